"""How a call from code ends when it does not return a result: the exceptions generated code
sees (re-exported by `bundlectl.client`)."""


class ToolDenied(PermissionError):
    """The policy does not let this agent call the tool (nothing was started)."""


class ToolFailed(RuntimeError):
    """The call was made and failed: a tool error, invalid arguments, a server failure."""
