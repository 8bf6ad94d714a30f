"""`bundlectl serve`: one MCP server in front of every resolved server, enforcing one agent's
policy at run time (SPEC 7). This slice serves one agent over stdio in direct mode.

Direct mode: `tools/list` holds the tools the agent may call (allow or ask), named
`server__tool`, with their definitions passed through; a denied tool is invisible and calling it
answers exactly as calling a tool that does not exist (the audit log records the real reason).
Every call goes through the pipeline `exec` uses — decide, validate, call with the server's
timeout, audit (`via: serve`) — and every failure comes back as a tool result with `isError` and
a message the model can act on; the gateway never dies of a downstream failure.

Each downstream server is an actor: a task that starts the server on first use, holds its client
session (entered and left in that one task, as the SDK requires) and runs one call at a time; a
server whose connection broke is started again on the next call.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel
import mcp_types as types
from anyio.abc import TaskGroup, TaskStatus

from bundlectl.errors import BundlectlError, ServerError
from bundlectl.executor.call import CallOutcome, CallRequest, perform
from bundlectl.executor.connect import Target, connect, list_all_tools
from bundlectl.executor.pipeline import Pipeline
from bundlectl.executor.stdio import decode_message, pipe_lines, write_pipe
from bundlectl.patterns import gateway_name
from bundlectl.policy import Decision

CONNECT_TIMEOUT = 30.0

Job = Callable[[Any], Awaitable[Any]]
# Asks the person at the client whether an `ask` rule's call may go ahead: the answer, or (on
# the 2026-07-28 protocol) the result that asks the client to ask, and to retry with the answer.
AskUser = Callable[[Decision], Awaitable["bool | types.InputRequiredResult"]]


@dataclass
class Downstream:
    """One server behind the gateway: started on first use, warm after, one call at a time."""

    target: Target
    _inbox: Any = None  # the actor's job queue while it runs
    _lock: anyio.Lock = field(default_factory=anyio.Lock)
    tools: dict[str, Any] | None = None  # the live tools of the current session, by name

    async def run(self, group: TaskGroup, job: Job) -> Any:
        """Run `job(client)` on this server's session, starting the server when needed."""
        async with self._lock:
            if self._inbox is None:
                self._inbox = await group.start(self._actor)
            reply_send, reply = anyio.create_memory_object_stream[tuple[Any, Any]](1)
            await self._inbox.send((job, reply_send))
            try:
                value, error = await reply.receive()
            except anyio.EndOfStream:  # the actor died under the call
                self._inbox = None
                raise ServerError(f"server {self.target.name!r} stopped during the call") from None
            if isinstance(error, ServerError):  # the connection is gone: start afresh next time
                await self._stop()
            if error is not None:
                raise error
            return value

    async def live_tools(self, group: TaskGroup) -> dict[str, Any]:
        """The session's tools, listed once per session (a restart lists them again)."""
        if self.tools is None or self._inbox is None:
            listed = await self.run(group, list_all_tools)
            self.tools = {tool.name: tool for tool in listed}
        return self.tools

    async def _stop(self) -> None:
        self.tools = None
        inbox, self._inbox = self._inbox, None
        if inbox is not None:
            await inbox.aclose()

    async def _actor(self, *, task_status: TaskStatus[Any]) -> None:
        send, receive = anyio.create_memory_object_stream[tuple[Job, Any]](1)
        try:
            async with connect(self.target, connect_timeout=CONNECT_TIMEOUT) as client:
                task_status.started(send)
                async with receive:
                    async for job, reply in receive:
                        async with reply:
                            try:
                                await reply.send((await job(client), None))
                            except BundlectlError as exc:
                                await reply.send((None, exc))
        finally:
            self.target.close(wait=0)


@dataclass
class Gateway:
    """The agent's view of every resolved server, and the calls it makes through them."""

    pipeline: Pipeline
    agent: str
    group: TaskGroup
    mode: str = "direct"  # direct | search
    quiet: bool = True
    _servers: dict[str, Downstream] = field(default_factory=dict)
    # Confirmations asked for through an InputRequiredResult: request_state → tool name.
    pending: dict[str, str] = field(default_factory=dict)
    _names: dict[str, tuple[str, str]] = field(default_factory=dict)  # gateway name → tool

    @property
    def listing(self) -> str:
        """Where the agent finds the names it may call."""
        return "search_tools" if self.mode == "search" else "tools/list"

    def _downstream(self, server: str) -> Downstream:
        if server not in self._servers:
            self._servers[server] = Downstream(self.pipeline.target(server, quiet=self.quiet))
        return self._servers[server]

    def _usable(self, server: str, tool: str) -> Decision | None:
        """The decision when the agent may call the tool (allow, or ask), else None."""
        compiled = self.pipeline.resolution.policy.agent(self.agent)
        decision = compiled.decide(server, tool, interactive=True)
        return decision if decision.effect != "deny" else None

    async def _catalog(self) -> list[tuple[str, types.Tool]]:
        """(server, tool) for every tool the agent may call: declared definitions, or the
        server's own when it declares none (it is then started to ask). Every tool, usable or
        not, is known by name afterwards, so a call to a denied one is audited for what it is."""
        usable: list[tuple[str, types.Tool]] = []
        for name, merged in self.pipeline.resolution.merged.servers.items():
            if merged.spec.disabled:
                continue
            if merged.spec.tools:
                offered = [_declared(spec) for spec in merged.spec.tools]
            else:
                try:
                    offered = list((await self._downstream(name).live_tools(self.group)).values())
                except BundlectlError:
                    continue  # a server that cannot start offers nothing
            for tool in offered:
                self._names[gateway_name(name, tool.name)] = (name, tool.name)
                self._names[f"{name}.{tool.name}"] = (name, tool.name)
                if self._usable(name, tool.name) is not None:
                    usable.append((name, tool))
        return usable

    async def list_tools(self) -> list[types.Tool]:
        """Direct mode: the usable tools, named `server__tool`, definitions passed through."""
        tools = [
            tool.model_copy(update={"name": gateway_name(server, tool.name)})
            for server, tool in await self._catalog()
        ]
        return sorted(tools, key=lambda t: t.name)

    async def search(
        self, query: str, server: str | None, detail: str, limit: int
    ) -> types.CallToolResult:
        """Search mode's `search_tools`: the usable tools ranked as `bundlectl tools --search`
        ranks them, at the detail asked for."""
        from bundlectl.catalog import ToolRef, search
        from bundlectl.models import ToolSpec

        if detail not in DETAILS:
            return _error(f"detail must be one of {', '.join(DETAILS)}, not {detail!r}")
        found = {
            (name, tool.name): tool
            for name, tool in await self._catalog()
            if server is None or name == server
        }
        refs = [
            ToolRef(
                name, tool, ToolSpec(name=tool, description=found[(name, tool)].description or "")
            )
            for name, tool in sorted(found)
        ]
        ranked = [ref for _, ref in search(refs, query)] if query.strip() else refs
        items = [_describe(ref.server, found[(ref.server, ref.tool)], detail) for ref in ranked]
        shown = items[: max(1, limit)]
        payload = {"tools": shown, "more": len(items) - len(shown)}
        text = types.TextContent(type="text", text=json.dumps(payload, ensure_ascii=False))
        return types.CallToolResult(content=[text])

    async def call_tool(
        self, name: str, arguments: dict[str, Any], confirm: AskUser | None = None
    ) -> types.CallToolResult:
        """One call through the pipeline, by `server__tool` (direct mode) or `server.tool`
        (search mode's `call_tool`); every failure is a result the model can act on.

        `confirm` asks the person at the client about an `ask` rule (an MCP elicitation); without
        it such a call is refused.
        """
        if not self._names:
            await self._catalog()
        found = self._names.get(name)
        unknown = f"unknown tool {name!r}; {self.listing} shows the tools you can call"
        if found is None:
            return _error(unknown)
        server, tool = found
        compiled = self.pipeline.resolution.policy.agent(self.agent)
        decision = compiled.decide(server, tool, interactive=True)
        if decision.effect == "deny":  # audited with the reason; said as for no such tool
            self.pipeline.audit.record(decision, "denied", 0.0, None)
            return _error(unknown)
        if decision.effect == "ask":
            if confirm is None:
                self.pipeline.audit.record(decision, "denied", 0.0, None)
                return _error(
                    f"{name} needs a person's confirmation ({decision.reason}), and this client "
                    "cannot ask for it (no elicitation support); ask the user to run it with "
                    "`bundlectl exec`"
                )
            answer = await confirm(decision)
            if isinstance(answer, types.InputRequiredResult):
                return answer  # type: ignore[return-value]  # the client asks, then retries
            if not answer:
                self.pipeline.audit.record(decision, "denied-by-user", 0.0, None)
                return _error(f"the user did not confirm {name}; it was not called")
        downstream = self._downstream(server)
        request = CallRequest(
            self.agent, server, tool, decision, [], arguments, float(downstream.target.spec.timeout)
        )

        try:
            tools = await downstream.live_tools(self.group)

            async def call(client: Any) -> CallOutcome:
                return await perform(client, request, downstream.target, tools)

            outcome = await downstream.run(self.group, call)
        except BundlectlError as exc:
            self.pipeline.audit.record(decision, "server-error", 0.0, arguments)
            return _error(_explain(exc))
        self.pipeline.audit.record(
            decision, outcome.outcome, outcome.duration_ms, outcome.arguments
        )
        if outcome.error is not None:
            if isinstance(outcome.error, ServerError):
                await downstream._stop()
            return _error(_explain(outcome.error))
        result: types.CallToolResult = outcome.result
        return result


DETAILS = ("name", "summary", "full")


def _describe(server: str, tool: types.Tool, detail: str) -> Any:
    """One search result: the qualified name, with the first line of the description
    (`summary`) or the whole definition (`full`)."""
    name = f"{server}.{tool.name}"
    if detail == "name":
        return name
    item: dict[str, Any] = {"name": name}
    description = (tool.description or "").strip()
    if detail == "summary":
        item["description"] = description.splitlines()[0] if description else ""
        return item
    item["description"] = description
    item["input_schema"] = tool.input_schema
    if tool.output_schema:
        item["output_schema"] = tool.output_schema
    if tool.annotations:
        item["annotations"] = tool.annotations.model_dump(by_alias=True, exclude_none=True)
    return item


def search_mode_tools() -> list[types.Tool]:
    """Search mode's whole `tools/list`: find tools, then call them by name."""
    search_schema = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "Words to match; empty lists all."},
            "server": {"type": "string", "description": "Only this server's tools."},
            "detail": {"type": "string", "enum": list(DETAILS), "default": "summary"},
            "limit": {"type": "integer", "minimum": 1, "default": 20},
        },
    }
    call_schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "server.tool, as search_tools names it."},
            "arguments": {"type": "object", "description": "The tool's arguments."},
        },
        "required": ["name"],
    }
    return [
        types.Tool(
            name="search_tools",
            description="Find the tools you may call: name only, a summary, or full schemas.",
            input_schema=search_schema,
            annotations=types.ToolAnnotations(read_only_hint=True),
        ),
        types.Tool(
            name="call_tool",
            description="Call a tool found with search_tools, by its server.tool name.",
            input_schema=call_schema,
        ),
    ]


def _declared(spec: Any) -> types.Tool:
    annotations = spec.annotations or None
    return types.Tool(
        name=spec.name,
        title=spec.title,
        description=spec.description or None,
        input_schema=spec.input_schema,
        output_schema=spec.output_schema,
        annotations=types.ToolAnnotations(**annotations) if annotations else None,
    )


def _explain(exc: BundlectlError) -> str:
    return exc.message + (f"\n{exc.hint}" if exc.hint else "")


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=message)], is_error=True
    )


async def serve_stdio(pipeline: Pipeline, agent: str, mode: str = "direct") -> None:
    """Serve the agent over stdin/stdout until the client closes them (or a stop signal)."""
    from mcp.server.lowlevel import Server

    from bundlectl import __version__

    async with anyio.create_task_group() as group:
        gateway = Gateway(pipeline, agent, group, mode)

        async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            if mode == "search":
                return types.ListToolsResult(tools=search_mode_tools())
            return types.ListToolsResult(tools=await gateway.list_tools())

        async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> Any:
            arguments = dict(params.arguments or {})
            confirm = _elicitation(ctx, gateway, params)
            if mode != "search":
                return await gateway.call_tool(params.name, arguments, confirm)
            return await _search_mode_call(gateway, params.name, arguments, confirm)

        server: Any = Server(
            "bundlectl",
            version=__version__,
            instructions=f"The tools agent {agent!r} may call, under bundlectl's policy.",
            on_list_tools=on_list_tools,
            on_call_tool=on_call_tool,
        )
        async with _stdio() as (read, write):
            await server.run(read, write, server.create_initialization_options())
        group.cancel_scope.cancel()  # the client is gone: stop every downstream server


_NO_FIELDS: dict[str, Any] = {"type": "object", "properties": {}}


def _question(decision: Decision) -> str:
    rule = decision.rule
    where = f" ({rule.label}, {rule.origin})" if rule is not None else ""
    return f"Agent {decision.agent!r} wants to call {decision.qualified}{where}. Allow it?"


def _elicitation(ctx: Any, gateway: Gateway, params: types.CallToolRequestParams) -> AskUser | None:
    """A confirmer that asks the client's user with an MCP elicitation, when the client declared
    it can elicit: a request sent back to the client (2025-11-25 sessions), or, on the 2026-07-28
    protocol, an InputRequiredResult that the client answers by retrying the call."""
    capabilities = ctx.session.client_capabilities
    if capabilities is None or capabilities.elicitation is None:
        return None
    state = params.request_state
    if state is not None and params.input_responses is not None:
        asked_for = gateway.pending.pop(state, None)  # single use; unknown state: ask again
        reply = params.input_responses.get("confirm")
        if asked_for == params.name:
            accepted = isinstance(reply, types.ElicitResult) and reply.action == "accept"

            async def answered(decision: Decision) -> bool:
                return accepted

            return answered

    async def confirm(decision: Decision) -> bool | types.InputRequiredResult:
        if ctx.session.can_send_request:
            answer = await ctx.session.elicit_form(
                _question(decision), _NO_FIELDS, related_request_id=ctx.request_id
            )
            return bool(answer.action == "accept")
        token = secrets.token_urlsafe(16)
        gateway.pending[token] = params.name
        request = types.ElicitRequest(
            params=types.ElicitRequestFormParams(
                message=_question(decision), requested_schema=_NO_FIELDS
            )
        )
        return types.InputRequiredResult(input_requests={"confirm": request}, request_state=token)

    return confirm


async def _search_mode_call(
    gateway: Gateway, name: str, arguments: dict[str, Any], confirm: AskUser | None
) -> types.CallToolResult:
    """Search mode's two tools; any other name is unknown, as in direct mode."""
    if name == "search_tools":
        query, server = arguments.get("query", ""), arguments.get("server")
        detail, limit = arguments.get("detail", "summary"), arguments.get("limit", 20)
        if not isinstance(query, str) or not (server is None or isinstance(server, str)):
            return _error("query and server are strings")
        if not isinstance(limit, int) or not isinstance(detail, str):
            return _error("limit is an integer and detail one of name, summary, full")
        return await gateway.search(query, server, detail, limit)
    if name == "call_tool":
        target, inner = arguments.get("name"), arguments.get("arguments") or {}
        if not isinstance(target, str) or "." not in target or not isinstance(inner, dict):
            return _error("call_tool takes name (server.tool, from search_tools) and arguments")
        return await gateway.call_tool(target, inner, confirm)
    return _error(f"unknown tool {name!r}; use search_tools, then call_tool")


@asynccontextmanager
async def _stdio() -> AsyncIterator[tuple[Any, Any]]:
    """Our stdin and stdout as the SDK's message streams.

    The SDK's own stdio server reads stdin in a worker thread that cannot be cancelled, so a
    SIGTERM would wait for the client's next line; a daemon thread here is simply abandoned, and
    the shutdown (every downstream server stopped) goes ahead at once.
    """

    read_send, read = anyio.create_memory_object_stream[Any](16)
    write, write_receive = anyio.create_memory_object_stream[Any](16)
    token = anyio.lowlevel.current_token()
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer

    def parse(line: bytes) -> Any:
        try:
            return decode_message(line)
        except ValueError as exc:  # the SDK answers a malformed message with an error
            return exc

    async def read_async(lines: AsyncIterator[bytes]) -> None:
        async with read_send:
            async for line in lines:
                if not line.isspace():
                    await read_send.send(parse(line))

    def reader() -> None:  # when stdin is not a pipe (a file): a thread reads it
        try:
            for line in iter(stdin.readline, b""):
                if not line.isspace():
                    anyio.from_thread.run(read_send.send, parse(line), token=token)
        except (
            anyio.ClosedResourceError,
            anyio.BrokenResourceError,
            anyio.RunFinishedError,
            RuntimeError,
            OSError,
            ValueError,
        ):
            pass
        finally:
            with contextlib.suppress(RuntimeError, anyio.RunFinishedError):
                anyio.from_thread.run_sync(read_send.close, token=token)

    async def writer() -> None:
        async with write_receive:
            async for message in write_receive:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                await write_pipe(stdout, data.encode() + b"\n")

    lines = await pipe_lines(stdin)
    if lines is None:
        threading.Thread(target=reader, name="gateway-stdin", daemon=True).start()
    async with anyio.create_task_group() as group:
        group.start_soon(writer)
        if lines is not None:
            group.start_soon(read_async, lines)
        try:
            yield read, write
        finally:
            write.close()
            group.cancel_scope.cancel()
