"""A tool call's data as it passes through the sequence (`calls.sequence`): the call itself
(`ToolCall`: who asks for which tool with what, who stands behind it, its trace, and the id it
is admitted under), the call as admitted for its session (`CallRequest`: the call, the policy's
`Decision`, how the session makes it), and what happened (`CallOutcome`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bundlectl.errors import BundlectlError
from bundlectl.policy.rules import Decision

if TYPE_CHECKING:
    from bundlectl.mcpio.session import Rounds, ToolResult


@dataclass
class ToolCall:
    """A call as it came in at a front door — who asks for which tool, with what, who stands
    behind it and the trace it belongs to — and, once admitted, its id."""

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
    # Who stands behind the agent when an identity provider's token named it (its `sub`;
    # `gateway.auth`): for the audit record, an approval request and the call's span; never
    # the token.
    subject: str | None = None
    # The W3C trace context the client sent with the call (`traceparent`, `tracestate` of its
    # `_meta`): the parent of the call's span.
    trace: dict[str, str] | None = None
    # The id it was let through under (`Pipeline.admit`): its audit records share it.
    id: str | None = None

    @property
    def shown(self) -> dict[str, Any]:
        """The arguments as a person asked to confirm the call sees them."""
        return self.seen if self.seen is not None else self.arguments

    @property
    def judged(self) -> dict[str, Any]:
        """The arguments the policy's conditions judge before the call starts."""
        if self.received is not None:
            return self.received
        return self.seen if self.seen is not None else self.arguments


@dataclass
class CallRequest:
    """A call the policy has already allowed, as its session makes it."""

    call: ToolCall
    decision: Decision
    timeout: float = 60.0
    # A last check on the live tool before anything is sent (`pin_tools`): the refusal, or None.
    check: Callable[[Any], BundlectlError | None] | None = None
    # The policy's decision again for the arguments as the server will get them (validated, the
    # tool's schema at hand), asked before a call a rule's argument condition names is sent;
    # None: the arguments do not matter.
    rejudge: Callable[[Mapping[str, Any], Mapping[str, Any] | None], Decision] | None = None
    # Where the server's progress goes (the gateway: to its client); None: shown on stderr.
    progress: Callable[[float, float | None, str | None], Awaitable[None]] | None = None
    events: bool = False  # progress as JSON events on stderr (`--format json`)
    # A `detokenize` tool (privacy): the real values behind the agent's tokens, put back only
    # once the arguments as sent have passed validation, so no message can quote them.
    restore: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    # The request's `_meta` for the server (the gateway: the log level its client asked for).
    meta: dict[str, Any] | None = None
    # Its caller answers the server's 2026-07-28 questions itself (the gateway's retrying
    # client): they are the call's answer, and a retry carries the answers (`mcpio.session`).
    rounds: Rounds | None = None
    # The call went to the server (from then on a failure may follow what it did): set by
    # `perform` as it sends the request, and by the gateway's express lane.
    sent: bool = False

    @property
    def agent(self) -> str:
        return self.call.agent

    @property
    def server(self) -> str:
        return self.call.server

    @property
    def tool(self) -> str:
        return self.call.tool

    @property
    def pairs(self) -> list[tuple[str, str]]:
        return self.call.pairs

    @property
    def base_arguments(self) -> dict[str, Any]:
        return self.call.arguments

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
