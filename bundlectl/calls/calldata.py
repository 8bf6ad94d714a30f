"""A tool call's data as it passes through the sequence (`calls.sequence`): as it came in at a
front door (`ToolCall`), as the policy admitted it for its session (`CallRequest`), and what
happened (`CallOutcome`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bundlectl.errors import BundlectlError
from bundlectl.policy.rules import Decision

if TYPE_CHECKING:
    from bundlectl.mcpio.session import ToolResult


@dataclass
class ToolCall:
    """A call as it came in at a front door: who asks for which tool, with what."""

    agent: str
    server: str
    tool: str
    arguments: dict[str, Any]  # as the agent sent them (what the audit digests)
    # exec's KEY=VALUE pairs, typed by the tool's schema once it is known
    pairs: list[tuple[str, str]] = field(default_factory=list)
    # What the policy's conditions and a person asked to confirm see before the tool's schema is
    # known (exec: KEY=VALUE typed by the declared schema); None: `arguments`.
    seen: dict[str, Any] | None = None
    typed: bool = True  # `seen` is typed: the conditions can be checked before anything starts
    # The arguments as the server will receive them (privacy tokens put back), when they differ:
    # what the conditions judge and an approver's decision binds.
    received: dict[str, Any] | None = None
    subject: str | None = None  # who made it (the identity token's subject, `gateway.auth`)
    trace: dict[str, str] | None = None  # the W3C trace context it came with

    @property
    def judged(self) -> dict[str, Any]:
        """The arguments the policy's conditions judge before the call starts."""
        if self.received is not None:
            return self.received
        return self.seen if self.seen is not None else self.arguments


@dataclass
class CallRequest:
    """A call the policy has already allowed."""

    agent: str
    server: str
    tool: str
    decision: Decision
    pairs: list[tuple[str, str]] = field(default_factory=list)
    base_arguments: dict[str, Any] = field(default_factory=dict)
    timeout: float = 60.0
    # A last check on the live tool before anything is sent (`pin_tools`): the refusal, or None.
    check: Callable[[Any], BundlectlError | None] | None = None
    # Where the server's progress goes (the gateway: to its client); None: shown on stderr.
    progress: Callable[[float, float | None, str | None], Awaitable[None]] | None = None
    events: bool = False  # progress as JSON events on stderr (`--format json`)
    # A `detokenize` tool (privacy): the real values behind the agent's tokens, put back only
    # once the arguments as sent have passed validation, so no message can quote them.
    restore: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    # The request's `_meta` for the server (the gateway: the log level its client asked for).
    meta: dict[str, Any] | None = None
    # The call went to the server (from then on a failure may follow what it did): set by
    # `perform` as it sends the request, and by the gateway's express lane.
    sent: bool = False

    @property
    def qualified(self) -> str:
        return f"{self.server}.{self.tool}"


@dataclass
class CallOutcome:
    """What happened: a result, or the error that ended the call; and how long it took."""

    request: CallRequest
    result: ToolResult | None = None
    arguments: dict[str, Any] | None = None
    error: BundlectlError | None = None
    duration_ms: float = 0.0
