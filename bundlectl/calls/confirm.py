"""Who confirms a call that an `ask` rule holds: the strategies of `Pipeline.admission` (a terminal
prompt, `--yes`, and, in other modules, an MCP elicitation and an out-of-band approval), and
what a session should do after a call (`AfterCall`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Coroutine
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from bundlectl.config.local import LOCAL_FILE
from bundlectl.output import ask
from bundlectl.policy.rules import Decision

if TYPE_CHECKING:
    import mcp_types

    from bundlectl.calls.arguments_shown import Shown
    from bundlectl.calls.audit import AuditSink
    from bundlectl.calls.calldata import ToolCall
    from bundlectl.config.settings import ApprovalSettings
    from bundlectl.resolve.resolved import Resolution
    from bundlectl.state import Store


# The audit log's outcome of a call that failed, by the error's exit code (SPEC 4.1).


T = TypeVar("T")


class AfterCall(Enum):
    """What a server's session should do after a call (`Pipeline.finish`)."""

    KEEP = "keep"  # it answered (a result or a tool error): keep using it
    RESTART = "restart"  # it answered the call with an error of its own: start it afresh
    CRASHED = "crashed"  # it broke the call (exited, garbled the protocol): afresh, backing off
    PROBE = "probe"  # it did not answer in time: check it is not stuck in the call


@dataclass(frozen=True)
class AnswerLater:
    """An `ask` rule's answer that comes later, outside this request: what the front door
    answers meanwhile (the gateway: an MCP input-required result its client answers by
    retrying the call)."""

    answer: mcp_types.InputRequiredResult


# An `ask` rule's answer: True go ahead, False the person said no, None no one could be asked.
Answer = bool | None | AnswerLater


class Admitting(Protocol):
    """What a confirmation reads of the admission it serves, and what it may record there
    (`Pipeline` is the one admission; the strategies need no more of it)."""

    @property
    def resolution(self) -> Resolution: ...

    @property
    def audit(self) -> AuditSink: ...

    @property
    def approvals(self) -> ApprovalSettings | None: ...

    @property
    def shown(self) -> Shown: ...

    @property
    def changes(self) -> dict[tuple[str, str], str]: ...

    def store(self) -> Store: ...

    def record(
        self,
        decision: Decision,
        outcome: str,
        duration_ms: float,
        arguments: dict[str, Any] | None,
        *,
        call: ToolCall | None = None,
        why: str | None = None,
    ) -> None: ...

    def always_allow(self, decision: Decision) -> None: ...


class Confirmation(Protocol):
    """Who confirms a call an `ask` rule holds: one strategy of `Pipeline.admission` per front
    door — a terminal prompt (`OnTerminal`), `--yes` (`always_yes`), an MCP elicitation (the
    gateway), or no one (None: the call is refused)."""

    async def __call__(self, pipeline: Admitting, decision: Decision, call: ToolCall) -> Answer:
        """The answer for `call` (its arguments as a person sees them: `call.shown`)."""


def terminal_confirmer() -> Confirmation | None:
    """A y/N prompt on the terminal, or None when no one is there to answer (CI, pipes)."""
    ci = os.environ.get("CI", "").lower() not in ("", "0", "false")
    if ci or not (sys.stdin.isatty() and sys.stderr.isatty()):
        return None
    return on_terminal


async def on_terminal(pipeline: Admitting, decision: Decision, call: ToolCall) -> bool:
    """The question, and the answer read on the terminal (blocking: `exec`, code mode): yes
    once, no, or always — an allow rule for this tool (with the conditions of the rule that
    asked) written to `bundlectl.local.yaml`, never to the reviewed config."""
    answer = ask(
        f"{pipeline.shown.question(decision, call.shown)}\n"
        f"Allow? [y/N/a] (a: always, a rule in {LOCAL_FILE}) "
    )
    choice = answer.strip().lower()
    if choice in ("a", "always"):
        pipeline.always_allow(decision)
        return True
    return choice in ("y", "yes")


async def always_yes(pipeline: Admitting, decision: Decision, call: ToolCall) -> bool:
    """`--yes`: every `ask` rule is confirmed in advance."""
    return True


def run_to_end(step: Coroutine[Any, Any, T]) -> T:
    """A coroutine that never waits on anything (the admission of `exec`, batch and code mode,
    whose confirmations block), run to its end without an event loop: the policy decides before
    anyio or the SDK is imported."""
    try:
        step.send(None)
    except StopIteration as done:
        return cast(T, done.value)
    step.close()
    raise RuntimeError("this confirmation waits: await it in an event loop")
