"""The built-in servers' tools as plain functions, registered once and used two ways: served by
the MCP SDK (`bundlectl server NAME`, the gateway, code mode) or called in-process by `exec`
without importing the SDK at all (`DirectClient`: the import alone costs ~0.7 s, more than the
rest of a one-shot call). Nothing here imports the SDK until `Toolbox.server()` is asked for.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, TypeVar

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
    # False: the result is content only (text or a Blob), which DirectClient can produce as the
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
                fn.__name__, fn, description, annotations, structured_output
            )
            return fn

        return register

    def server(self) -> MCPServer:
        """The MCP server of these tools (imports the SDK)."""
        from mcp.server.mcpserver import MCPServer
        from mcp_types import ToolAnnotations

        server = MCPServer(self.name, instructions=self.instructions, log_level="WARNING")
        for tool in self.tools.values():
            server.add_tool(
                _for_sdk(tool.fn),
                name=tool.name,
                description=tool.description,
                annotations=ToolAnnotations(**tool.annotations),
                structured_output=tool.structured_output,
            )
        return server


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


@dataclass
class DirectResult:
    """A CallToolResult made in-process, with what `exec` reads of one: content blocks,
    `is_error`, `structured_content`, and the same JSON as the SDK's (`model_dump`)."""

    server: str
    content: list[Any]
    is_error: bool
    structured_content: Any = None

    def model_dump(self, **options: Any) -> dict[str, Any]:
        blocks = []
        for block in self.content:
            if block.type == "text":
                blocks.append({"type": "text", "text": block.text})
            else:
                res = block.resource
                resource = {"uri": res.uri, "mimeType": res.mime_type, "blob": res.blob}
                blocks.append({"type": "resource", "resource": resource})
        return {
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": self.server, "version": ""}},
            "content": blocks,
            "isError": self.is_error,
            "resultType": "complete",
        }


class DirectClient:
    """The part of an MCP client session `exec` uses (`list_tools`, `call_tool`), over a
    built-in server's functions in this process. Tool definitions are the declared ones (the
    bundle's catalog, which a test keeps equal to what the SDK serves); only content-only tools
    are offered, so every result is one the SDK would give."""

    def __init__(self, box: Toolbox, declared: list[Any]) -> None:
        self.box = box
        self.declared = [t for t in declared if _direct(box.tools.get(t.name))]

    @classmethod
    def able(cls, box: Toolbox, tool: str, declared: list[Any]) -> bool:
        """Whether `tool` can be called this way (declared, and content-only)."""
        return _direct(box.tools.get(tool)) and any(t.name == tool for t in declared)

    async def list_tools(self, cursor: str | None = None) -> Any:
        return SimpleNamespace(tools=self.declared, next_cursor=None)

    async def call_tool(
        self, name: str, arguments: dict[str, Any], read_timeout_seconds: float, **_: Any
    ) -> DirectResult:
        import anyio

        from bundlectl.errors import CallTimeout

        tool = self.box.tools[name]
        known = inspect.signature(tool.fn).parameters
        kwargs = {k: v for k, v in arguments.items() if k in known}  # as the SDK: extras ignored
        try:
            with anyio.fail_after(read_timeout_seconds):
                value = await anyio.to_thread.run_sync(
                    functools.partial(tool.fn, **kwargs), abandon_on_cancel=True
                )
        except TimeoutError:
            raise CallTimeout(f"server {self.box.name!r} did not answer in time") from None
        except ToolFailure as exc:
            return self._error(f"Error executing tool {name}: {exc}")
        except Exception:  # a crash: its text stays here, as in the SDK
            return self._error(f"Error executing tool {name}")
        if isinstance(value, Blob):
            block = SimpleNamespace(type="resource", resource=value)
        else:
            block = SimpleNamespace(type="text", text=value)
        return DirectResult(self.box.name, [block], False)

    def _error(self, text: str) -> DirectResult:
        return DirectResult(self.box.name, [SimpleNamespace(type="text", text=text)], True)


def _direct(tool: BuiltinTool | None) -> bool:
    return tool is not None and tool.structured_output is False
