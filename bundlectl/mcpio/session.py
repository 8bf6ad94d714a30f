"""The session interface every request to a server goes through, and bundlectl's own result type.

`call.perform` takes a `Session`: something that lists a server's tools and calls one. Three
kinds implement it — the MCP SDK's client (`SdkSession`, an adapter), the SDK-free stdio client
(`plain.StdioClient`), and a built-in server's toolbox called in this process
(`plain.BuiltinClient`) — the way httpx puts a transport under its client.

`ServerSession` is the rest of what the gateway and the CLI ask of a server (resources,
templates, prompts, completion, subscriptions, ping, the listen stream); only `SdkSession`
implements it, so this module is the one place outside `mcpio` that the SDK's client is touched
through. Whatever the session,
a call's result is a `ToolResult`: the result's MCP JSON, converted from the SDK's model once,
at this boundary, and only when someone reads it.

Nothing here imports the SDK: `exec` on a stdio server or a built-in tool never loads it.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import mcp_types as types

    CompletionRef = types.PromptReference | types.ResourceTemplateReference

# Progress of a call: (progress, total, message).
Progress = Callable[[float, float | None, str | None], Awaitable[None]]


@dataclass(frozen=True)
class Rounds:
    """A call whose caller answers its server's 2026-07-28 input requests itself (a gateway's
    client that retries): the server's `InputRequiredResult` is the call's answer, handed on
    with the names the server gave its questions, rather than answered here. A retry carries
    the caller's answers and the server's `requestState`. A session on an older protocol has
    no such rounds (its server asks during the call) and ignores this."""

    responses: dict[str, Any] | None = None
    state: str | None = None


class ListedTool(Protocol):
    """What a call reads of a listed tool (the SDK's `Tool`, or `plain.PlainTool`)."""

    @property
    def name(self) -> str: ...

    @property
    def input_schema(self) -> dict[str, Any]: ...


class Session(Protocol):
    """An open session with one server, as a call uses it."""

    async def tools(self) -> list[Any]:
        """Every tool the server lists (all pages), each a `ListedTool`."""
        ...

    async def call(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        timeout: float | None,
        progress: Progress | None,
        meta: dict[str, Any] | None = None,
        rounds: Rounds | None = None,
    ) -> ToolResult:
        """One tools/call; a transport or protocol failure raises (see `connect.classify`).
        With `rounds`, a 2026-07-28 server's questions are the answer (`ToolResult.asks`)."""
        ...


class ServerSession(Session, Protocol):
    """Everything else the gateway and the CLI ask of a server. Listings follow every page; a
    server without the feature (it answers an error) lists nothing. Results are the SDK's
    models, which the gateway hands on to its own client unconverted."""

    async def resources(self) -> list[types.Resource]: ...

    async def templates(self) -> list[types.ResourceTemplate]: ...

    async def prompts(self) -> list[types.Prompt]: ...

    async def read(self, uri: str) -> types.ReadResourceResult:
        """The resource's `ReadResourceResult`; the server's refusal raises (`MCPError`)."""
        ...

    async def prompt(
        self, name: str, arguments: dict[str, str] | None, rounds: Rounds | None = None
    ) -> types.GetPromptResult | types.InputRequiredResult: ...

    async def complete(
        self, ref: CompletionRef, argument: dict[str, str], context: dict[str, str] | None
    ) -> types.CompleteResult: ...

    async def subscribe(self, uri: str) -> bool:
        """Ask to hear of changes to `uri` (2025-11-25 and older); False: the server refused."""
        ...

    async def unsubscribe(self, uri: str) -> None: ...

    async def ping(self) -> None: ...

    def listen(self, *, tools: bool, prompts: bool, resources: list[str]) -> Any:
        """The 2026-07-28 listen stream (an async context manager of events)."""
        ...


class ToolResult:
    """A tools/call result: its MCP JSON (`data`) and what the front doors read of it.

    A result from the SDK keeps the SDK's model (`model`) and is dumped to JSON only when read
    as JSON; the gateway hands the model on to its own client unconverted (`as_model`).
    """

    __slots__ = ("_data", "_model")

    def __init__(self, data: dict[str, Any] | None = None, *, model: Any = None) -> None:
        if data is None and model is None:
            raise ValueError("a ToolResult needs its JSON or the SDK's model")
        self._data, self._model = data, model

    @property
    def data(self) -> dict[str, Any]:
        """The result as MCP JSON (`content`, `structuredContent`, `isError`, `_meta`)."""
        if self._data is None:
            self._data = self._model.model_dump(by_alias=True, mode="json", exclude_none=True)
        return self._data

    @property
    def is_error(self) -> bool:
        if self._model is not None:
            return bool(getattr(self._model, "is_error", False))
        return bool(self.data.get("isError", False))

    @property
    def asks(self) -> bool:
        """Whether the server asks the caller first (a 2026-07-28 `InputRequiredResult`, handed
        on when the call was made with `Rounds`)."""
        if self._model is not None:
            return hasattr(self._model, "input_requests")
        return self.data.get("resultType") == "input_required"

    @property
    def content(self) -> list[dict[str, Any]]:
        """The content blocks, as JSON."""
        return list(self.data.get("content") or [])

    @property
    def structured_content(self) -> Any:
        if self._model is not None:
            return self._model.structured_content
        return self.data.get("structuredContent")

    def texts(self) -> list[str]:
        """The text of each text block, in order."""
        return [block["text"] for block in self.content if block.get("type") == "text"]

    def as_model(self) -> Any:
        """The SDK's `CallToolResult` or `InputRequiredResult` (the gateway answers its client
        with it)."""
        if self._model is None:
            import mcp_types as types

            self._model = types.CallToolResult.model_validate(self.data)
        return self._model


async def list_all_tools(client: Any) -> list[Any]:
    """Every tool of an SDK client's session, following pagination."""
    tools: list[Any] = []
    cursor = None
    while True:
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


class SdkSession:
    """The MCP SDK's client (`mcp.Client`) as a `ServerSession`."""

    def __init__(self, client: Any) -> None:
        self.client = client

    @property
    def protocol_version(self) -> str:
        return str(self.client.protocol_version)

    @property
    def modern(self) -> bool:
        """Whether the server speaks 2026-07-28 (questions as input-required results)."""
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        return self.client.protocol_version in MODERN_PROTOCOL_VERSIONS

    async def tools(self) -> list[Any]:
        return await list_all_tools(self.client)

    async def _pages(self, method: str, field: str) -> list[Any]:
        from mcp.shared.exceptions import MCPError

        items: list[Any] = []
        cursor = None
        try:
            while True:
                page = await getattr(self.client, method)(cursor=cursor)
                items.extend(getattr(page, field))
                cursor = page.next_cursor
                if not cursor:
                    return items
        except MCPError:  # method not found: the server has no such feature
            return items

    async def resources(self) -> list[types.Resource]:
        return await self._pages("list_resources", "resources")

    async def templates(self) -> list[types.ResourceTemplate]:
        return await self._pages("list_resource_templates", "resource_templates")

    async def prompts(self) -> list[types.Prompt]:
        return await self._pages("list_prompts", "prompts")

    async def read(self, uri: str) -> types.ReadResourceResult:
        result: types.ReadResourceResult = await self.client.read_resource(uri)
        return result

    async def prompt(
        self, name: str, arguments: dict[str, str] | None, rounds: Rounds | None = None
    ) -> types.GetPromptResult | types.InputRequiredResult:
        """The prompt; with `rounds`, a 2026-07-28 server's questions instead (as `call`)."""
        if rounds is not None and self.modern:
            asked: types.GetPromptResult | types.InputRequiredResult
            asked = await self.client.session.get_prompt(
                name,
                arguments,
                input_responses=rounds.responses,
                request_state=rounds.state,
                allow_input_required=True,
            )
            return asked
        result: types.GetPromptResult = await self.client.get_prompt(name, arguments)
        return result

    async def complete(
        self, ref: CompletionRef, argument: dict[str, str], context: dict[str, str] | None
    ) -> types.CompleteResult:
        result: types.CompleteResult = await self.client.complete(ref, argument, context)
        return result

    async def subscribe(self, uri: str) -> bool:
        from mcp.shared.exceptions import MCPError

        try:
            with warnings.catch_warnings():  # the SDK warns that subscribe is deprecated
                warnings.simplefilter("ignore")
                await self.client.subscribe_resource(uri)
        except MCPError:
            return False
        return True

    async def unsubscribe(self, uri: str) -> None:
        from mcp.shared.exceptions import MCPError

        with warnings.catch_warnings(), contextlib.suppress(MCPError):
            warnings.simplefilter("ignore")
            await self.client.unsubscribe_resource(uri)

    async def ping(self) -> None:
        await self.client.send_ping()

    def listen(self, *, tools: bool, prompts: bool, resources: list[str]) -> Any:
        return self.client.listen(
            tools_list_changed=tools,
            prompts_list_changed=prompts,
            resource_subscriptions=resources,
        )

    async def call(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        timeout: float | None,
        progress: Progress | None,
        meta: dict[str, Any] | None = None,
        rounds: Rounds | None = None,
    ) -> ToolResult:
        if rounds is not None and self.modern:
            from bundlectl.mcpio.tasks import CreatedTask, continued, followed  # noqa: PLC0415

            session = self.client.session
            following = await continued(session, rounds.state, rounds.responses, timeout)
            if following is not None:  # (the next round of a server's task that asked)
                return ToolResult(model=following)
            asked = await self.client.session.call_tool(
                name,
                arguments,
                read_timeout_seconds=timeout,
                progress_callback=progress,
                input_responses=rounds.responses,
                request_state=rounds.state,
                meta=meta or None,
                allow_input_required=True,
                allow_claimed=True,
            )
            if isinstance(asked, CreatedTask):  # (a task: its result, or question, the round's)
                asked = await followed(session, asked, timeout, relay=True)
            return ToolResult(model=asked)
        result = await self.client.call_tool(
            name,
            arguments,
            read_timeout_seconds=timeout,
            progress_callback=progress,
            **({"meta": meta} if meta else {}),
        )
        return ToolResult(model=result)
