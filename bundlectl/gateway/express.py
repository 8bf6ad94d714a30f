"""The gateway's express lane: a warm `tools/call` relayed line to line, past the SDK.

Through the SDK a call is parsed, validated and dispatched by its server on the way in, then
modelled, validated and dispatched again by its client on the way out, and the same for the
answer: about as much work as the call itself costs a Python server (SPEC 7's warm-call goal).
On `serve`'s stdio front door, a call that needs none of what the SDK adds goes instead from our
stdin reader straight to the downstream server's stdin (`stdio.Tap`), and its answer from the
server's stdout straight to ours, without a task switch on the way. It passes the same
pipeline: the policy's decision, argument validation, the server's timeout and concurrency, the
checks of the result against the tool's output schema and the client's protocol, and the audit
record (`via: serve`).

A call takes the lane only when the answer is already certain to be the same: the agent's
policy allows the tool outright (no `ask`), the config and lock are unchanged since they were
loaded, nothing is tokenized (privacy), the tool passes `pin_tools`, and its server is a stdio
process whose session is up, whose tools are listed and which has a free slot (`concurrency`).
Anything else — the first call, a denied or unknown name, a reload, search mode, a busy server,
a 2026-07-28 client that can answer elicitation or sampling (its server's questions hold the
call open across retries: `parking.py`), prompts and resources — goes through the SDK as
before, so every refusal has one source.

What the server sends during a call goes where it would through the SDK: progress to the
client's progress token (rewritten here); log messages and elicitation or sampling requests
through `Relay`, which gets an `ExpressContext` standing for the request. A client's
`notifications/cancelled` for an express call ends it and is passed on to the server.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio
import mcp_types as types
from anyio.abc import TaskGroup
from mcp.server.connection import Connection
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS, SUPPORTED_PROTOCOL_VERSIONS
from pydantic import ValidationError

from bundlectl import telemetry
from bundlectl.calls.arguments import structured_problem
from bundlectl.calls.call import CallOutcome, CallRequest, prepared
from bundlectl.errors import BundlectlError, Interrupted
from bundlectl.gateway import wire
from bundlectl.gateway.context import ExpressContext, SdkContext
from bundlectl.mcpio.connect import (
    broke_protocol,
    call_timed_out,
    connection_closed,
    returned_error,
)
from bundlectl.mcpio.pipes import PipeWriter, json_line
from bundlectl.mcpio.plain import check_result
from bundlectl.mcpio.requests import JsonObject, Requests
from bundlectl.mcpio.session import ToolResult
from bundlectl.policy.rules import Decision

if TYPE_CHECKING:
    from bundlectl.gateway.downstream import Downstream
    from bundlectl.gateway.hub import Hub
    from bundlectl.mcpio.stdio import Tap
    from bundlectl.mcpio.target import Target
    from bundlectl.resolve.resolved import Resolution

VERSION_KEY = types.PROTOCOL_VERSION_META_KEY
CAPABILITIES_KEY = types.CLIENT_CAPABILITIES_META_KEY
SERVER_INFO_KEY = types.SERVER_INFO_META_KEY


def _trace_of(meta: JsonObject) -> dict[str, str]:
    """The W3C trace context in a request's `_meta`."""
    return {k: meta[k] for k in ("traceparent", "tracestate") if isinstance(meta.get(k), str)}


@dataclass
class _Call:
    """A call on the lane, from the client's request to its answer. Every step runs in the
    callback that brings it (the client's request, the server's answer, the timer, the
    client's cancellation), so no task is started for it."""

    lane: Express
    message: JsonObject  # the client's request
    version: str  # the protocol of the client's request
    meta: JsonObject  # the request's _meta
    downstream: Downstream
    tool: types.Tool  # the live tool
    outcome: CallOutcome  # its request (the decision, the arguments as sent) and how it ends
    tap: Tap  # the server's pipes
    key: str = ""  # our request's id at the server
    started: float = field(default_factory=time.perf_counter)
    timer: asyncio.TimerHandle | None = None
    over: bool = False
    relay_key: int | None = None  # this call's place among the server's calls in flight
    step: object | None = None  # its request's trace span on the server (`telemetry`)

    @property
    def id(self) -> types.RequestId:  # the client's request id
        request_id: types.RequestId = self.message["id"]
        return request_id

    @property
    def target(self) -> Target:
        return self.downstream.target

    @property
    def decision(self) -> Decision:
        return self.outcome.request.decision

    def send(self, arguments: JsonObject) -> bool:
        """Send the call to the server; False when it cannot go now (then it was not sent)."""
        tap = self.tap
        self.key = tap.requests.open(self.arrived)
        params: JsonObject = {"name": self.tool.name, "arguments": arguments}
        meta = self.meta
        if meta.get("progressToken") is not None:
            params["_meta"] = {"progressToken": self.key}
        if "traceparent" in meta:  # the server's spans join the client's trace
            params["_meta"] = {**params.get("_meta", {}), **_trace_of(meta)}
        request = {"jsonrpc": "2.0", "id": self.key, "method": "tools/call", "params": params}
        if not tap.post(request):
            tap.requests.drop(self.key)
            return False
        self.outcome.request.sent = True
        relay = self.downstream.relay
        if relay is not None:  # what the server sends meanwhile goes to this call's client
            self.relay_key = relay.enter(
                ExpressContext(self.lane, self.id, self.version, self.meta)
            )
        timeout = self.outcome.request.timeout
        self.timer = asyncio.get_running_loop().call_later(timeout, self.timed_out)
        return True

    def arrived(self, message: JsonObject | None) -> None:
        """The server's answer or progress (None: its connection ended)."""
        if message is not None and "method" in message:
            token = self.meta.get("progressToken")
            if token is not None and not self.over:
                params = {**message.get("params", {}), "progressToken": token}
                self.lane.post({"jsonrpc": "2.0", "method": message["method"], "params": params})
            return
        if message is None:
            self.end(error=connection_closed(self.target))
            return
        answer = message.get("result")
        if isinstance(answer, dict) and answer.get("resultType") == "input_required":
            self.detour()
            return
        result, error = self.lane.result(self, message)
        if error is None and isinstance(answer, dict):
            self.outcome.result = ToolResult(answer)
        self.end(result=result, error=error)

    def detour(self) -> None:
        """The server asks the client something before it answers (2026-07-28): the lane
        cannot carry that, so the client's request goes through the SDK path instead (the
        server is asked again there, a call of its own; such a server expects retries), and
        the tool's later calls go there from the start. The lane's request ends here: its
        `pending` record gets its outcome (`interrupted`), as every admitted call's does."""
        self.lane.asks.add((self.decision.server, self.decision.tool))
        handed_on = Interrupted("its server asked the client first; handed to the SDK path")
        self.end(error=handed_on, answer=False)
        self.lane.to_sdk(self.message)

    def timed_out(self) -> None:
        self.tell_server()
        self.end(error=call_timed_out(self.target))

    def cancelled(self) -> None:
        """The client cancelled the call: the server is told; the client gets no answer."""
        self.tell_server()
        self.end(error=Interrupted("the client cancelled the call"), answer=False)

    def tell_server(self) -> None:
        params = {"requestId": self.key, "reason": "the client cancelled the call or it timed out"}
        self.tap.post({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params})

    def release(self) -> bool:
        """The call leaves the lane: its server's slot, its timer and its place among the
        server's calls are given back. False: it had left already."""
        if self.over:
            return False
        self.over = True
        lane, downstream = self.lane, self.downstream
        lane.calls.pop(self.id, None)
        if self.key:
            self.tap.requests.drop(self.key)
            downstream.release()
        if self.timer is not None:
            self.timer.cancel()
        if self.relay_key is not None and downstream.relay is not None:
            downstream.relay.leave(self.relay_key)
        return True

    def end(
        self,
        *,
        result: bytes | None = None,
        error: BundlectlError | None = None,
        answer: bool = True,
    ) -> None:
        """Answer the client (`result`: the result as JSON; not with `answer` False: the client
        cancelled, or the SDK path answers), free the server's slot, finish the call as every
        call is finished (`Pipeline.finish`: its audit record, what its server should do next).
        The answer goes first: the rest is not the client's wait."""
        if self.over:
            return
        telemetry.end_step(self.step, None if error is None else error.message)
        duration = (time.perf_counter() - self.started) * 1000
        lane, downstream = self.lane, self.downstream
        if answer:
            try:
                shaped = result if error is None else lane.failure(self.version, error)
                head = b'{"jsonrpc":"2.0","id":' + json.dumps(self.id).encode() + b',"result":'
                lane.write(head + (shaped or b"{}") + b"}\n")
            except Exception as exc:  # never leave the client waiting
                failed = {"code": types.INTERNAL_ERROR, "message": f"bundlectl: {exc}"}
                lane.post({"jsonrpc": "2.0", "id": self.id, "error": failed})
        self.release()
        outcome = self.outcome
        outcome.error = error
        outcome.duration_ms = duration
        after = lane.hub.pipeline.finish(outcome)
        if not downstream.kept(after):  # `Downstream.after`, in a task only when there is more
            lane.group.start_soon(downstream.after, after, lane.group)


@dataclass
class Express:
    """The lane of one stdio client (one agent, direct mode)."""

    hub: Hub
    agent: str
    group: TaskGroup
    writer: PipeWriter  # our stdout
    connection: Connection | None = None  # the client's connection as the SDK holds it
    # Hands a client's request to the SDK path after all (`_Call.detour`).
    to_sdk: Callable[[JsonObject], None] = lambda message: None
    asks: set[tuple[str, str]] = field(default_factory=set)  # tools whose server asked first
    calls: dict[types.RequestId, _Call] = field(default_factory=dict)  # by the client's id
    asked: Requests = field(default_factory=Requests)  # our questions to the client
    _routes: dict[str, tuple[Resolution, Downstream, types.Tool, Decision]] = field(
        default_factory=dict
    )

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
        """Whether the lane takes this message of the client's (the SDK gets the rest)."""
        if not isinstance(message, dict):
            return False
        method = message.get("method")
        if method == "tools/call" and "id" in message:
            try:
                return self._call(message)
            except Exception as exc:  # a fault of ours must not lose the call: the SDK has it
                self.hub.log(f"express lane: {exc!r}; the call goes through the SDK")
                return False
        if method == "notifications/cancelled":
            params = message.get("params")
            cancelled = params.get("requestId") if isinstance(params, dict) else None
            call = self.calls.get(cancelled) if isinstance(cancelled, (int, str)) else None
            if call is None:
                return False
            call.cancelled()
            return True
        return method is None and self.asked.take(message)

    def _call(self, message: JsonObject) -> bool:
        call = self._ready(message)
        if call is None:
            return False
        request, pipeline = call.outcome.request, self.hub.pipeline
        if "traceparent" in call.meta:  # the parent of the call's span (no SDK span here)
            request.decision = dataclasses.replace(request.decision, trace=_trace_of(call.meta))
        try:
            # the checks every call passes before it is sent (`_route` made the pin check)
            sent = prepared(call.outcome, call.tool, call.target)
        except BundlectlError as exc:
            request.decision = pipeline.admit(request.decision)  # admitted, then refused
            call.end(error=exc)
            return True
        if not call.downstream.acquire():
            return False  # busy: the SDK path waits for its turn
        if not call.send(sent):
            call.downstream.release()
            return False
        # its `pending` audit record: the same admission as every allowed call (a call the
        # quotas count never takes the lane)
        request.decision = pipeline.admit(request.decision)
        qualified = f"{call.decision.server}.{call.decision.tool}"
        call.step = telemetry.begin_step(
            call.decision.call,
            f"tools/call {qualified}",
            server=call.decision.server,
            tool=call.decision.tool,
        )
        self.calls[call.id] = call
        return True

    def _ready(self, message: JsonObject) -> _Call | None:
        """The call, when it may take the lane (see the module's docstring); else None."""
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
            return None  # its server's questions are answered by retries: held on the SDK path
        route = self._route(name)
        if route is None:
            return None
        downstream, live, decision = route
        if (decision.server, decision.tool) in self.asks:
            return None
        tap = downstream.target.tap
        if tap is None or not tap.ready:
            return None
        request = CallRequest(
            self.agent,
            decision.server,
            decision.tool,
            decision,
            base_arguments=arguments,
            timeout=float(downstream.target.spec.timeout),
        )
        return _Call(self, message, version, meta, downstream, live, CallOutcome(request), tap)

    def _route(self, name: str) -> tuple[Downstream, types.Tool, Decision] | None:
        """The server, live tool and decision for a tool name, when its calls may take the
        lane while the loaded policy and the server's listed tools stay what they are (then
        the answer is remembered: the pin check hashes the definition)."""
        hub = self.hub
        resolution = hub.pipeline.resolution
        known = self._routes.get(name)
        if known is not None and known[0] is resolution:
            held, known_tool, decided = known[1:]
            if (
                hub.servers.get(hub.slot(decided.server, self.agent)) is held
                and held.warm
                and (held.tools or {}).get(decided.tool) is known_tool
            ):
                return held, known_tool, decided
        if hub.privacy() is not None:
            return None
        found = hub.tool_named(name)
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
        decision = hub.pipeline.judge(self.agent, server, tool, interactive=True)
        if decision.effect != "allow" or decision.conditional:
            return None  # a decision on the arguments: the SDK path checks the conditions
        if len(self._routes) >= 4096:
            self._routes.clear()
        self._routes[name] = (resolution, downstream, live, decision)
        return downstream, live, decision

    def result(self, call: _Call, answer: JsonObject) -> tuple[bytes | None, BundlectlError | None]:
        """The client's result (as JSON) from the server's answer, or why there is none."""
        target = call.target
        error = answer.get("error")
        if error is not None:
            if not isinstance(error, dict):
                return None, broke_protocol(target, "its error is not an object")
            return None, returned_error(target, error.get("message", ""), error.get("code"))
        result = answer.get("result")
        problem = check_result(result)
        if not isinstance(result, dict):
            return None, broke_protocol(target, problem or "the result is not an object")
        if problem is None and call.tool.output_schema and not result.get("isError"):
            problem = structured_problem(result, call.tool.output_schema, call.tool.name)
        if problem is None:
            try:
                return wire.shaped(result, call.version), None
            except (ValidationError, ValueError) as exc:
                problem = str(exc).splitlines()[0]
        return None, broke_protocol(target, problem)

    def failure(self, version: str, error: BundlectlError) -> bytes:
        """A failed call as the result the SDK path gives: an error the model can act on."""
        text = {"type": "text", "text": error.explained}
        return wire.shaped({"content": [text], "isError": True}, version)

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
    """Whether a 2026-07-28 client declared it answers elicitation or sampling."""
    return isinstance(capabilities, dict) and bool(
        capabilities.keys() & {"elicitation", "sampling"}
    )
