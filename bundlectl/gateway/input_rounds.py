"""Calls held open across the 2026-07-28 protocol's input-required rounds.

A downstream server may ask the client something during a call: an elicitation, a sampling
request. On 2025-11-25 the gateway sends that request on to its client over the same session
(`Relay`). A client on 2026-07-28 takes no requests during a call; it is sent an
`InputRequiredResult` and retries the call with its answers. So when such a client's call
starts, `InputRounds.start` runs it in the background: each question the server asks becomes an
`InputRequiredResult` (its `requestState` names the held call), and the retry
(`InputRounds.resume`) gives the answers to the waiting server and returns the next question or,
once the server finishes, the call's result. The server's side never changes: a 2025-11-25
server is answered mid-call, a 2026-07-28 one through the SDK client's own retries.

The `requestState` binds the agent, the tool and the exact arguments, and the SDK seals it
(unforgeable, expiring): another agent, tool or argument set cannot take over a held call.
A question nobody answers ends after the server's `timeout` (an elicitation as `cancel`), so
a client that goes away holds nothing for long. Held calls live in this process: replicas of a
`--stateless` deployment need the retry to reach the same replica, or it is told the call is
gone.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio
import mcp_types as types
from anyio.abc import TaskGroup
from mcp.shared.exceptions import MCPError

from bundlectl.mcpio.requests import JsonObject

if TYPE_CHECKING:
    from bundlectl.gateway.request_context import RequestContext

GRACE = 60.0  # seconds a finished call's result waits for the client's retry


@dataclass
class _Question:
    request: types.ElicitRequest | types.CreateMessageRequest
    answered: anyio.Event = field(default_factory=anyio.Event)
    answer: object = None  # what the client's retry carried


@dataclass
class Held:
    """One call held open while its client answers what the server asked."""

    key: str
    ctx: RequestContext  # the request that started it (`Relay` names it for the server)
    binding: dict[str, str]  # agent, tool, arguments (a digest)
    questions: dict[str, _Question] = field(default_factory=dict)
    result: types.CallToolResult | types.InputRequiredResult | None = None
    changed: anyio.Event = field(default_factory=anyio.Event)
    finished_at: float | None = None
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    asked: int = 0  # questions asked so far (their names: q1, q2, … unless the server named it)
    refused: MCPError | None = None  # the answer is this JSON-RPC error (-32021)

    def wake(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()

    def state(self) -> str:
        return json.dumps({**self.binding, "held": self.key})


class InputRounds:
    """The calls of 2026-07-28 clients, held while their server waits for an answer."""

    def __init__(self, group: TaskGroup) -> None:
        self.group = group
        self.held: dict[str, Held] = {}
        self._by_ctx: dict[int, Held] = {}

    async def start(
        self,
        ctx: RequestContext,
        binding: dict[str, str],
        job: Callable[[], Awaitable[types.CallToolResult | types.InputRequiredResult]],
    ) -> types.CallToolResult | types.InputRequiredResult:
        """Run `job` (the whole call: perform, finish, audit) for the request `ctx`; its
        result, or the first question its server asks."""
        self._purge()
        held = Held(secrets.token_hex(16), ctx, binding)
        self.held[held.key] = held
        self._by_ctx[id(ctx)] = held

        async def run() -> None:
            held.result = _failed("the call was cancelled")
            with held.scope:
                try:
                    held.result = await job()
                except MCPError as exc:  # the client's request is refused as such
                    held.refused = exc
                except Exception as exc:  # a defect: the client hears of it
                    held.result = _failed(f"the gateway failed during the call: {exc}")
                finally:
                    self._by_ctx.pop(id(ctx), None)
                    held.finished_at = anyio.current_time()
                    held.wake()

        self.group.start_soon(run)
        try:
            return await self._next(held)
        except anyio.get_cancelled_exc_class():
            held.scope.cancel()  # the client cancelled its request: the call ends too
            self.held.pop(held.key, None)
            raise

    def holds(self, ctx: RequestContext) -> bool:
        """Whether the call of the request `ctx` is held (its server's questions are parked)."""
        return id(ctx) in self._by_ctx

    async def ask(
        self,
        ctx: RequestContext,
        request: types.ElicitRequest | types.CreateMessageRequest,
        timeout: float,
        name: str | None = None,
    ) -> object:
        """The client's answer to what the server asks during the held call of `ctx`: None
        when no answer came within `timeout` seconds. `name`: the server's own name for the
        question (2026-07-28), kept unless taken."""
        held = self._by_ctx[id(ctx)]
        held.asked += 1
        if name is None or name in held.questions:
            name = f"q{held.asked}"
        question = held.questions[name] = _Question(request)
        held.wake()
        with anyio.move_on_after(timeout):
            await question.answered.wait()
        held.questions.pop(name, None)
        return question.answer

    async def resume(
        self, state: JsonObject, binding: dict[str, str], responses: Mapping[str, object]
    ) -> types.CallToolResult | types.InputRequiredResult | None:
        """The retry of a held call (`state`: its unsealed requestState): the answers go to the
        waiting server; then the next question or the result. None: no such call here (it
        ended long ago, or was held by another replica) or it is not this agent's call."""
        held = self.held.get(str(state.get("held")))
        if held is None or held.binding != binding:
            return None
        for name, answer in responses.items():
            question = held.questions.get(name)
            if question is not None and not question.answered.is_set():
                question.answer = answer
                question.answered.set()
        return await self._next(held)

    async def _next(self, held: Held) -> types.CallToolResult | types.InputRequiredResult:
        while True:
            if held.refused is not None:
                self.held.pop(held.key, None)
                raise held.refused
            if held.finished_at is not None:
                self.held.pop(held.key, None)
                return held.result or _failed("the call ended without a result")
            waiting = {
                name: question.request
                for name, question in held.questions.items()
                if not question.answered.is_set()
            }
            if waiting:
                return types.InputRequiredResult(input_requests=waiting, request_state=held.state())
            await held.changed.wait()

    def _purge(self) -> None:
        """Forget finished calls whose client never came back for the result."""
        now = anyio.current_time()
        for key, held in list(self.held.items()):
            if held.finished_at is not None and held.finished_at + GRACE < now:
                del self.held[key]


def _failed(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def unseal(state: str | None) -> JsonObject | None:
    """The requestState of a held call, or of a round relayed as the server asked it
    (`AgentView.rounds`), unsealed by the SDK; else None."""
    if state is None:
        return None
    try:
        bound = json.loads(state)
    except ValueError:
        return None
    held = isinstance(bound, dict) and ("held" in bound or "relay" in bound)
    return bound if held else None
