"""`serve`'s express door on stdio: a warm `tools/call` read from our stdin and answered on our
stdout past the SDK's server, through the same sequence as every call (`calls.sequence`).

Through the SDK's server a call is parsed, modelled, validated and dispatched on the way in, and
its result modelled and serialized on the way out: on a warm call that costs about as much as
the call itself costs a Python server (`bench/bench_serve_raw.py`: 2.3x the byte-copying relay
without this door, 1.5x with it). This door reads the client's JSON-RPC line itself, runs the
call through `calls.sequence` (judge, admission, perform on the server's warm session, finish —
the same steps, records and checks as the SDK path), and writes the result as the SDK's server
would for the client's protocol (`results_out.shaped`). The speed of the call itself is the server's
session's (`mcpio.pipe_session.PipeSession`: the request over the server's pipes).

A call comes to this door only when it needs nothing the door cannot present: the agent's policy
allows the tool outright (no `ask`, no argument condition, no quota), nothing is tokenized
(privacy), the tool passes `pin_tools`, its server is a warm stdio process, and the client
cannot be asked questions by retrying (2026-07-28 with elicitation or sampling: those calls
are held on the SDK path, `input_rounds.py`). Everything else — the first call, a denied or unknown
name, a reload, search mode, prompts and resources — goes through the SDK's server, so every
refusal has one source. What the server sends during a call goes where it would through the
SDK: progress to the client's progress token; log messages and questions through `Relay`,
which gets an `StdioCallContext` standing for the request. A client's `notifications/cancelled`
for a call here cancels it (its server is told, its record says `interrupted`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio
import mcp_types as types
from anyio.abc import TaskGroup
from mcp.server.connection import Connection
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS, SUPPORTED_PROTOCOL_VERSIONS
from pydantic import ValidationError

from bundlectl.calls import sequence
from bundlectl.calls.call import perform
from bundlectl.calls.calldata import CallOutcome, CallRequest, ToolCall
from bundlectl.calls.confirm import AfterCall, Confirmation
from bundlectl.calls.pipeline import Pipeline
from bundlectl.calls.sequence import Door
from bundlectl.errors import BundlectlError
from bundlectl.gateway import results_out
from bundlectl.gateway.relayed import protocol_error
from bundlectl.gateway.request_context import SdkContext, StdioCallContext
from bundlectl.mcpio.connect import broke_protocol
from bundlectl.mcpio.pipes import PipeWriter, json_line
from bundlectl.mcpio.requests import TASKS, JsonObject, Requests
from bundlectl.mcpio.session import ServerSession
from bundlectl.policy.rules import Decision

if TYPE_CHECKING:
    from bundlectl.gateway.downstream import Downstream
    from bundlectl.gateway.hub import Hub
    from bundlectl.resolve.resolved import Resolution

VERSION_KEY = types.PROTOCOL_VERSION_META_KEY
CAPABILITIES_KEY = types.CLIENT_CAPABILITIES_META_KEY
SERVER_INFO_KEY = types.SERVER_INFO_META_KEY


def _trace_of(meta: JsonObject) -> dict[str, str]:
    """The W3C trace context in a request's `_meta`."""
    return {k: meta[k] for k in ("traceparent", "tracestate") if isinstance(meta.get(k), str)}


@dataclass
class StdioCalls:
    """The express door of one stdio client (one agent, direct mode)."""

    hub: Hub
    agent: str
    group: TaskGroup
    writer: PipeWriter  # our stdout
    connection: Connection | None = None  # the client's connection as the SDK holds it
    calls: dict[types.RequestId, _StdioCallDoor] = field(default_factory=dict)  # by client id
    asked: Requests = field(default_factory=Requests)  # our questions to the client
    _routes: dict[str, tuple[Resolution, Downstream, types.Tool, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.group.start_soon(self._outlive_none)

    def seen(self, ctx: SdkContext) -> None:
        """A request the SDK served: the client's connection (its handshake's protocol and
        capabilities) is known from now on."""
        if self.connection is None:
            self.connection = getattr(ctx.session, "_connection", None)

    def post(self, message: JsonObject) -> None:
        """A message to the client: written now, or queued in order."""
        self.write(json_line(message))

    def write(self, data: bytes) -> None:
        """A line to the client: written now, or queued in order."""
        if not self.writer.post(data):
            self.group.start_soon(self.writer.put, data)

    def take(self, message: object) -> bool:
        """Whether the door takes this message of the client's (the SDK gets the rest)."""
        if not isinstance(message, dict):
            return False
        method = message.get("method")
        if method == "tools/call" and "id" in message:
            try:
                door = self._ready(message)
            except Exception as exc:  # a fault of ours must not lose the call: the SDK has it
                self.hub.log(f"express door: {exc!r}; the call goes through the SDK")
                return False
            if door is None:
                return False
            self.calls[door.id] = door
            self._start(door)
            return True
        if method == "notifications/cancelled":
            params = message.get("params")
            cancelled = params.get("requestId") if isinstance(params, dict) else None
            door = self.calls.get(cancelled) if isinstance(cancelled, (int, str)) else None
            if door is None or door.task is None:
                return False
            door.task.cancel()
            return True
        return method is None and self.asked.take(message)

    def _start(self, door: _StdioCallDoor) -> None:
        """The call's own task: an asyncio task, not one of the group's. anyio's `start_soon`
        costs ~90,000 instructions a call (a task handle with its cancel scope and event: 7 %
        of the door's work, `bench_serve_raw.py --callgrind`); the group's end cancels and
        awaits these tasks all the same (`_outlive_none`)."""
        door.task = asyncio.get_running_loop().create_task(door.run())

    async def _outlive_none(self) -> None:
        """While the group runs, nothing; when it ends (the client left, a stop signal), the
        calls in flight are cancelled — each finishes its audit record as `interrupted` — and
        awaited."""
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                running = [door.task for door in self.calls.values() if door.task is not None]
                for task in running:
                    task.cancel()
                for task in running:
                    with contextlib.suppress(Exception, asyncio.CancelledError):
                        await task

    def _ready(self, message: JsonObject) -> _StdioCallDoor | None:
        """The call's door, when the call may come this way (see the module); else None."""
        params = message.get("params")
        if not isinstance(params, dict) or "requestState" in params or "inputResponses" in params:
            return None
        name, arguments, meta = params.get("name"), params.get("arguments"), params.get("_meta")
        arguments = {} if arguments is None else arguments
        meta = {} if meta is None else meta
        if not (isinstance(name, str) and isinstance(arguments, dict) and isinstance(meta, dict)):
            return None
        version = meta.get(VERSION_KEY)
        if version is None:  # an older protocol's session: the version its handshake agreed
            version = getattr(self.connection, "protocol_version", None)
            if version in MODERN_PROTOCOL_VERSIONS:
                return None  # a 2026-07-28 request without its envelope: the SDK says why
        if version not in SUPPORTED_PROTOCOL_VERSIONS or not self.hub.current():
            return None
        if version in MODERN_PROTOCOL_VERSIONS and _may_be_asked(meta.get(CAPABILITIES_KEY)):
            return None  # its server's questions are answered by retries, or it takes tasks
        route = self._route(name)
        if route is None:
            return None
        downstream, server, tool = route
        tap = downstream.target.tap
        if tap is None or not tap.ready:
            return None
        call = ToolCall(self.agent, server, tool, arguments, trace=_trace_of(meta) or None)
        return _StdioCallDoor(
            self, message["id"], version=version, meta=meta, downstream=downstream, call=call
        )

    def _route(self, name: str) -> tuple[Downstream, str, str] | None:
        """The warm server and the tool a name stands for, when the agent's policy lets its
        calls through outright while the loaded policy and the server's listed tools stay what
        they are (then the answer is remembered: the pin check hashes the definition). The
        sequence judges each call all the same; this only says the door can present it."""
        hub = self.hub
        resolution = hub.pipeline.resolution
        known = self._routes.get(name)
        if known is not None and known[0] is resolution:
            held, known_tool, server = known[1:]
            if (
                hub.servers.get(hub.slot(server, self.agent)) is held
                and held.warm
                and (held.tools or {}).get(known_tool.name) is known_tool
            ):
                return held, server, known_tool.name
        if hub.privacy.settings() is not None:
            return None
        found = hub.listings.tool_named(name)
        if found is None:
            return None
        downstream = hub.servers.get(hub.slot(found[0], self.agent))
        if downstream is None or not downstream.warm:
            return None
        server, tool = found
        live = (downstream.tools or {}).get(tool)
        if live is None:
            return None
        if getattr(getattr(live, "execution", None), "task_support", None) == "required":
            return None
        if hub.pipeline.limited(self.agent, server, tool):
            return None  # each call is counted: the SDK path's admission does it
        check = hub.pipeline.pin_check(server)
        if check is not None and check(live) is not None:
            return None
        compiled = resolution.policy.agent(self.agent)
        decision = compiled.decide(server, tool, interactive=True)
        if decision.effect != "allow" or decision.conditional:
            return None  # a decision on the arguments, or a question: the SDK path's
        if len(self._routes) >= 4096:
            self._routes.clear()
        self._routes[name] = (resolution, downstream, live, server)
        return downstream, server, tool

    def failure(self, version: str, error: BundlectlError) -> bytes:
        """A failed call as the result the SDK path gives: an error the model can act on."""
        text = {"type": "text", "text": error.explained}
        return results_out.shaped({"content": [text], "isError": True}, version)

    async def ask(self, method: str, params: JsonObject) -> JsonObject:
        """A request to the client (an elicitation, a sampling) and its result."""
        done = anyio.Event()
        box: list[JsonObject | None] = []

        def arrived(message: JsonObject | None) -> None:
            box.append(message)
            done.set()

        key = self.asked.open(arrived)
        try:
            self.post({"jsonrpc": "2.0", "id": key, "method": method, "params": params})
            await done.wait()
        finally:
            self.asked.drop(key)
        if box[0] is None:
            raise MCPError(code=types.CONNECTION_CLOSED, message="the client went away")
        error = box[0].get("error")
        if isinstance(error, dict):
            code, message = error.get("code", types.INTERNAL_ERROR), error.get("message", "")
            raise MCPError(code=code, message=message)
        return dict(box[0].get("result") or {})


def _may_be_asked(capabilities: object) -> bool:
    """Whether a 2026-07-28 client declared it answers elicitation or sampling, or takes
    tasks (a slow call becomes one: `tasks.py`, on the SDK path)."""
    if not isinstance(capabilities, dict):
        return False
    extensions = capabilities.get("extensions")
    tasks = isinstance(extensions, dict) and TASKS in extensions
    return tasks or bool(capabilities.keys() & {"elicitation", "sampling"})


class _StdioCallDoor(Door[None]):
    """One call at the express door (see the module): the sequence's adapter for it, and the
    task that runs it and answers the client."""

    def __init__(
        self,
        lane: StdioCalls,
        key: types.RequestId,
        *,
        version: str,
        meta: JsonObject,
        downstream: Downstream,
        call: ToolCall,
    ) -> None:
        self.lane, self.id, self.version, self.meta = lane, key, version, meta
        self.downstream, self.call = downstream, call
        # its task, which the client's `notifications/cancelled` cancels
        self.task: asyncio.Task[None] | None = None
        self.raised = False  # a failure `Downstream.run` has already counted
        self.answered = False

    async def run(self) -> None:
        lane = self.lane
        try:  # answered as it is presented (or refused)
            await sequence.run(lane.hub.pipeline, self, self.call)
        except Exception as exc:  # never leave the client waiting
            if self.answered:  # a fault after the answer: logged, the gateway goes on
                lane.hub.log(f"express door: {exc!r} after the call was answered")
                return
            failed = {"code": types.INTERNAL_ERROR, "message": f"bundlectl: {exc}"}
            lane.post({"jsonrpc": "2.0", "id": self.id, "error": failed})
        finally:
            lane.calls.pop(self.id, None)

    def interactive(self, pipeline: Pipeline) -> bool:
        return True  # as the SDK path: an `ask` no one can confirm is refused as such

    def confirmer(self, pipeline: Pipeline, decision: Decision) -> Confirmation | None:
        return None  # a call that needs a question does not come this way

    def request(self, pipeline: Pipeline, call: ToolCall, decision: Decision) -> CallRequest:
        request = super().request(pipeline, call, decision)
        request.timeout = float(self.downstream.target.spec.timeout)
        token = self.meta.get("progressToken")
        if token is not None:  # the server's progress, to the client's token
            lane = self.lane

            async def progress(done: float, total: float | None, message: str | None) -> None:
                params: JsonObject = {"progressToken": token, "progress": done}
                if total is not None:
                    params["total"] = total
                if message is not None:
                    params["message"] = message
                lane.post({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})

            request.progress = progress
        return request

    async def perform(self, request: CallRequest) -> CallOutcome:
        downstream, lane = self.downstream, self.lane
        tools = downstream.tools or {}

        async def call(session: ServerSession) -> CallOutcome:
            return await perform(session, request, downstream.target, tools)

        ctx = StdioCallContext(lane, self.id, self.version, self.meta)
        try:
            done: CallOutcome = await downstream.run(lane.group, call, ctx)
            return done
        except BundlectlError:
            self.raised = True
            raise

    async def present(self, outcome: CallOutcome) -> None:
        """The answer, written to the client now (before the call's audit record)."""
        refusal = protocol_error(self.version, outcome.error) if outcome.error else None
        if refusal is not None:  # (a JSON-RPC error, not a result)
            self.answered = True
            error = refusal.model_dump(by_alias=True, mode="json", exclude_none=True)
            self.lane.post({"jsonrpc": "2.0", "id": self.id, "error": error})
            return
        self.answer(self.shaped(outcome))

    def shaped(self, outcome: CallOutcome) -> bytes:
        if outcome.error is not None:
            return self.lane.failure(self.version, outcome.error)
        assert outcome.result is not None
        try:
            return results_out.shaped(outcome.result.data, self.version)
        except (ValidationError, ValueError) as exc:
            problem = str(exc).splitlines()[0]
            target = self.downstream.target
            return self.lane.failure(self.version, broke_protocol(target, problem))

    def answer(self, result: bytes) -> None:
        self.answered = True
        head = b'{"jsonrpc":"2.0","id":' + json.dumps(self.id).encode() + b',"result":'
        self.lane.write(head + result + b"}\n")

    async def finished(self, after: AfterCall) -> None:
        lane, downstream = self.lane, self.downstream
        if not self.raised and not downstream.kept(after):  # in a task: not the client's wait
            lane.group.start_soon(downstream.after, after, lane.group)

    def refused(self, decision: Decision | None, error: BundlectlError) -> None:
        self.answer(self.lane.failure(self.version, error))
