"""`bundlectl serve`: one MCP server in front of every resolved server, enforcing each agent's
policy at run time (SPEC 7). The transports are `serve_stdio` (one agent) here and
`gateway_http` (many agents, bearer tokens).

Direct mode: `tools/list` holds the tools the agent may call (allow or ask), named
`server__tool`, with their definitions passed through; a denied tool is invisible and calling it
answers exactly as calling a tool that does not exist (the audit log records the real reason).
Every call goes through the pipeline `exec` uses — decide, validate, call with the server's
timeout, audit (`via: serve`) — and every failure comes back as a tool result with `isError` and
a message the model can act on; the gateway never dies of a downstream failure.

The `Hub` holds what all sessions share: the policy (reloaded when the config or the lock
changes; a file that does not load keeps the last good one) and the downstream servers. Each
downstream server is an actor: a task that starts the server on first use, holds its client
session (entered and left in that one task, as the SDK requires) and runs one call at a time; a
server whose connection broke is started again on the next call. A `Gateway` is one agent's view.
"""

from __future__ import annotations

import contextlib
import json
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
class Hub:
    """Everything behind the gateway that its sessions share: the policy in force (reloaded
    when the config or the lock changes) and the downstream servers (one actor each, whichever
    agent calls them)."""

    pipeline: Pipeline
    group: TaskGroup
    quiet: bool = True
    log: Callable[[str], None] = lambda line: None
    agents: set[str] = field(default_factory=set)  # served agents: checked again on reload
    servers: dict[str, Downstream] = field(default_factory=dict)
    _names: dict[str, tuple[str, str]] | None = None  # gateway name → (server, tool)
    _stamp: tuple[Any, ...] | None = None
    _reloading: anyio.Lock = field(default_factory=anyio.Lock)

    def __post_init__(self) -> None:
        self._stamp = self._files()

    @property
    def resolution(self) -> Any:
        return self.pipeline.resolution

    def view(self, agent: str, mode: str = "direct") -> Gateway:
        return Gateway(self, agent, mode)

    def downstream(self, server: str) -> Downstream:
        if server not in self.servers:
            self.servers[server] = Downstream(self.pipeline.target(server, quiet=self.quiet))
        return self.servers[server]

    def names(self) -> dict[str, tuple[str, str]]:
        """Every known tool by gateway name: the declared catalogs, and the live tools of the
        servers listed so far."""
        if self._names is None:
            self._names = {}
            for server, merged in self.pipeline.resolution.merged.servers.items():
                self.learn(server, merged.spec.tools)
        return self._names

    def learn(self, server: str, tools: Any) -> None:
        names = self.names()
        for tool in tools:
            names[gateway_name(server, tool.name)] = (server, tool.name)

    def _files(self) -> tuple[Any, ...]:
        project = self.pipeline.resolution.project
        stamps: list[Any] = []
        for path in (project.config_path, project.lock_path):
            try:
                stat = path.stat()
                stamps.append((stat.st_mtime_ns, stat.st_size, stat.st_ino))
            except OSError:
                stamps.append(None)
        return tuple(stamps)

    async def refresh(self) -> None:
        """Apply an edited config or lock from this request on (SPEC 7 "Reload"): a file that
        does not load keeps the last good policy (and says why in the log); servers whose
        configuration changed are stopped, to start afresh on their next call."""
        if self._files() == self._stamp:
            return
        async with self._reloading:
            stamp = self._files()
            if stamp == self._stamp:
                return
            self._stamp = stamp
            from bundlectl.project import load_project, resolve_project

            old = self.pipeline.resolution
            try:
                fresh = resolve_project(load_project(old.project.config_path))
                for agent in sorted(self.agents):
                    fresh.policy.agent(agent)
            except BundlectlError as exc:
                found = [p.render() for p in exc.problems] or [exc.message]
                self.log(
                    "reload failed; the last good policy stays in force (fix the file: the next "
                    "request reads it again): " + "; ".join(found)
                )
                return
            self.pipeline.reload(fresh)
            self._names = None
            for name, downstream in list(self.servers.items()):
                now = fresh.merged.servers.get(name)
                if now is None or now.spec != downstream.target.spec:
                    del self.servers[name]
                    await downstream._stop()
            self.log(f"reloaded {old.project.config_path.name}: policy {fresh.lock.policy_digest}")


@dataclass
class Gateway:
    """One agent's view of every resolved server, and the calls it makes through them."""

    hub: Hub
    agent: str
    mode: str = "direct"  # direct | search

    @property
    def listing(self) -> str:
        """Where the agent finds the names it may call."""
        return "search_tools" if self.mode == "search" else "tools/list"

    @property
    def pipeline(self) -> Pipeline:
        return self.hub.pipeline

    async def _offered(self, name: str, spec: Any) -> list[types.Tool]:
        """A server's tools: its declared definitions, or the live ones when it declares none or
        `pin_tools` holds (then a live tool that differs from the lock is withheld)."""
        pinned = self.pipeline.resolution.policy.set.pin_tools
        if spec.tools and not pinned:
            return [_declared(tool) for tool in spec.tools]
        try:
            live = (await self.hub.downstream(name).live_tools(self.hub.group)).values()
        except BundlectlError:
            return []  # a server that cannot start offers nothing
        self.hub.learn(name, live)
        return [tool for tool in live if self.pipeline.unpinned(name, tool) is None]

    async def _catalog(self) -> list[tuple[str, types.Tool]]:
        """(server, tool) for every tool the agent may call (allow or ask)."""
        compiled = self.pipeline.resolution.policy.agent(self.agent)
        usable: list[tuple[str, types.Tool]] = []
        for name, merged in self.pipeline.resolution.merged.servers.items():
            if merged.spec.disabled:
                continue
            for tool in await self._offered(name, merged.spec):
                if compiled.decide(name, tool.name, interactive=True).effect != "deny":
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

    def _find(self, name: str) -> tuple[str, str] | None:
        """The (server, tool) a name the agent used stands for: `server__tool`, or `server.tool`
        (search mode); None: no configured server has that tool."""
        names = self.hub.names()
        if "." in name:
            server, _, tool = name.partition(".")
            return names.get(gateway_name(server, tool)) if server and tool else None
        return names.get(name)

    async def call_tool(
        self, name: str, arguments: dict[str, Any], confirm: AskUser | None = None
    ) -> types.CallToolResult:
        """One call through the pipeline, by `server__tool` (direct mode) or `server.tool`
        (search mode's `call_tool`); every failure is a result the model can act on.

        `confirm` asks the person at the client about an `ask` rule (an MCP elicitation); without
        it such a call is refused.
        """
        unknown = f"unknown tool {name!r}; {self.listing} shows the tools you can call"
        found = self._find(name)
        if found is None:
            await self._catalog()  # servers without declared tools: learn their live names
            found = self._find(name)
        if found is None:
            return _error(unknown)
        server, tool = found
        decision = self.pipeline.judge(self.agent, server, tool, interactive=True)
        if decision.effect == "deny":  # audited with the reason; said as for no such tool
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
        downstream = self.hub.downstream(server)
        request = CallRequest(
            self.agent,
            server,
            tool,
            decision,
            [],
            arguments,
            float(downstream.target.spec.timeout),
            check=self.pipeline.pin_check(server),
        )
        try:
            tools = await downstream.live_tools(self.hub.group)

            async def call(client: Any) -> CallOutcome:
                return await perform(client, request, downstream.target, tools)

            outcome = await downstream.run(self.hub.group, call)
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


def mcp_server(
    hub: Hub,
    mode: str,
    agent_of: Callable[[Any], str],
    *,
    state_keys: list[bytes] | None = None,
) -> Any:
    """The gateway as an MCP server: `agent_of(ctx)` says whose view a request gets.

    `state_keys`: the keys that seal the 2026-07-28 protocol's `requestState` (the pending
    confirmation of an `ask` rule), shared by every replica of a stateless deployment; None: a
    key of this process only.
    """
    from mcp.server.lowlevel import Server
    from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity

    from bundlectl import __version__

    async def view(ctx: Any) -> Gateway:
        await hub.refresh()
        return hub.view(agent_of(ctx), mode)

    async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        if mode == "search":
            return types.ListToolsResult(tools=search_mode_tools())
        return types.ListToolsResult(tools=await (await view(ctx)).list_tools())

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> Any:
        gateway = await view(ctx)
        arguments = dict(params.arguments or {})
        confirm = _elicitation(ctx, gateway, params)
        if mode != "search":
            return await gateway.call_tool(params.name, arguments, confirm)
        return await _search_mode_call(gateway, params.name, arguments, confirm)

    server: Any = Server(
        "bundlectl",
        version=__version__,
        instructions="The tools this agent may call, under bundlectl's policy.",
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
    )
    security = (
        RequestStateSecurity(keys=state_keys) if state_keys else RequestStateSecurity.ephemeral()
    )
    server.middleware.append(RequestStateBoundary(security, default_audience="bundlectl"))
    return server


async def serve_stdio(pipeline: Pipeline, agent: str, mode: str = "direct") -> None:
    """Serve the agent over stdin/stdout until the client closes them (or a stop signal)."""
    async with anyio.create_task_group() as group:
        hub = Hub(pipeline, group, log=_log_line, agents={agent})
        server = mcp_server(hub, mode, lambda ctx: agent)
        async with _stdio() as (read, write):
            await server.run(read, write, server.create_initialization_options())
        group.cancel_scope.cancel()  # the client is gone: stop every downstream server


def _log_line(line: str) -> None:
    """The gateway's own log: stderr, which MCP clients keep as the server's log."""
    sys.stderr.write(f"bundlectl serve: {line}\n")
    sys.stderr.flush()


_NO_FIELDS: dict[str, Any] = {"type": "object", "properties": {}}
MODERN = "2026-07-28"  # the protocol with input-required results instead of server requests


def _question(decision: Decision) -> str:
    rule = decision.rule
    where = f" ({rule.label}, {rule.origin})" if rule is not None else ""
    return f"Agent {decision.agent!r} wants to call {decision.qualified}{where}. Allow it?"


def _elicitation(ctx: Any, gateway: Gateway, params: types.CallToolRequestParams) -> AskUser | None:
    """A confirmer that asks the client's user with an MCP elicitation, when the client declared
    it can elicit: a request sent back to the client (2025-11-25 sessions), or, on the 2026-07-28
    protocol, an InputRequiredResult that the client answers by retrying the call with the
    answer and the `requestState` we gave it (sealed and checked by the SDK: it cannot be forged
    or moved to another tool or agent)."""
    capabilities = ctx.session.client_capabilities
    if capabilities is None or capabilities.elicitation is None:
        return None
    bound = json.dumps({"agent": gateway.agent, "tool": params.name})
    if params.request_state is not None and params.input_responses is not None:
        reply = params.input_responses.get("confirm")
        if params.request_state == bound:
            accepted = isinstance(reply, types.ElicitResult) and reply.action == "accept"

            async def answered(decision: Decision) -> bool:
                return accepted

            return answered
    if not ctx.session.can_send_request and ctx.protocol_version < MODERN:
        return None  # a stateless HTTP session on the old protocol: no way back to the client

    async def confirm(decision: Decision) -> bool | types.InputRequiredResult:
        if ctx.session.can_send_request:
            answer = await ctx.session.elicit_form(
                _question(decision), _NO_FIELDS, related_request_id=ctx.request_id
            )
            return bool(answer.action == "accept")
        request = types.ElicitRequest(
            params=types.ElicitRequestFormParams(
                message=_question(decision), requested_schema=_NO_FIELDS
            )
        )
        return types.InputRequiredResult(input_requests={"confirm": request}, request_state=bound)

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
