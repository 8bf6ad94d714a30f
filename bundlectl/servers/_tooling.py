"""The built-in servers' tools as plain functions, registered once and used two ways: served by
the MCP SDK (`bundlectl server NAME`, the gateway, code mode) or called in-process by `exec`
without importing the SDK at all (`mcpio.plain.BuiltinClient`: the import alone costs ~0.7 s,
more than the rest of a one-shot call). Nothing here imports the SDK until `Toolbox.server()`.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from bundlectl import __version__

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

F = TypeVar("F", bound=Callable[..., Any])


class ToolFailure(Exception):
    """A failure the tool saw coming; its message reaches the caller (the SDK's ToolError)."""


@dataclass(frozen=True)
class Blob:
    """Binary content a tool returns: an embedded resource with a base64 blob."""

    uri: str
    mime_type: str
    blob: str


@dataclass(frozen=True)
class BuiltinTool:
    name: str
    fn: Callable[..., Any]
    description: str
    annotations: dict[str, bool]
    # False: the result is content only (text or a Blob), which BuiltinClient can produce as the
    # SDK does; None: the SDK decides (structured output from the return type).
    structured_output: bool | None


@dataclass
class Toolbox:
    """One built-in server: its name, instructions and tools."""

    name: str
    instructions: str
    tools: dict[str, BuiltinTool] = field(default_factory=dict)

    def tool(
        self, *, annotations: dict[str, bool], structured_output: bool | None = None
    ) -> Callable[[F], F]:
        """Register a tool; its docstring folded into one line is the description."""

        def register(fn: F) -> F:
            description = " ".join(inspect.cleandoc(fn.__doc__ or "").split())
            self.tools[fn.__name__] = BuiltinTool(
                fn.__name__, _os_errors_said(fn), description, annotations, structured_output
            )
            return fn

        return register

    def server(self) -> MCPServer:
        """The MCP server of these tools (imports the SDK)."""
        from mcp.server.mcpserver import MCPServer
        from mcp.server.mcpserver.tools import Tool
        from mcp_types import ToolAnnotations

        tools = [
            _declared_only(
                Tool.from_function(
                    _for_sdk(tool.fn),
                    name=tool.name,
                    description=tool.description,
                    annotations=ToolAnnotations(**tool.annotations),
                    structured_output=tool.structured_output,
                )
            )
            for tool in self.tools.values()
        ]
        return MCPServer(
            self.name,
            version=__version__,
            instructions=self.instructions,
            log_level="WARNING",
            tools=tools,
        )


def _declared_only(tool: Any) -> Any:
    """The SDK's tool, refusing arguments it does not declare (the SDK drops them without a
    word), so what a person confirmed is all the call carries. Its schema stays as the bundles'
    catalogs record it (a lock pins those digests); clients that know the server is ours refuse
    such a call before sending it (`calls.call`)."""
    model = tool.fn_metadata.arg_model
    strict = type(model.__name__, (model,), {"model_config": {"extra": "forbid"}})
    metadata = tool.fn_metadata.model_copy(update={"arg_model": strict})
    return tool.model_copy(update={"fn_metadata": metadata})


def _os_errors_said(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` with an error of the operating system (a name too long, no permission, a full
    disk) as a ToolFailure that says it, not an anonymous "error executing tool"."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except OSError as exc:
            name = f": {os.path.basename(str(exc.filename))[:80]}" if exc.filename else ""
            raise ToolFailure(f"{exc.strerror or type(exc).__name__}{name}") from None

    return call


def _for_sdk(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` as the SDK wants it: a ToolFailure is its ToolError, a Blob an EmbeddedResource."""
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp_types import BlobResourceContents, EmbeddedResource

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            value = fn(*args, **kwargs)
        except ToolFailure as exc:
            raise ToolError(str(exc)) from None
        if isinstance(value, Blob):
            contents = BlobResourceContents(
                uri=value.uri, mime_type=value.mime_type, blob=value.blob
            )
            return EmbeddedResource(type="resource", resource=contents)
        return value

    return call


def content_only(tool: BuiltinTool | None) -> bool:
    """Whether the tool's results are content only (text or a Blob), which a client can make
    from its return value as the SDK does (`mcpio.plain.BuiltinClient`)."""
    return tool is not None and tool.structured_output is False
