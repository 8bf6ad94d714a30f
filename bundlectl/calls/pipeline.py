"""The call pipeline every front door shares: `exec`, `exec --batch`, code mode, and the `serve`
gateway (its SDK path and its express lane).

One sequence, in three steps:

- `admit`: the policy's decision (`judge`), confirmed where an `ask` rule needs it, refused and
  audited here when it is a deny, an unconfirmed ask, or an ask no one can confirm;
- `perform` (`calls.call`): on a session — check the live tool, validate the arguments, call
  with the timeout;
- `finish`: the outcome audited, and what the session should do next (`AfterCall`: keep the server,
  start it afresh, or check that it is not stuck).

A front door supplies what differs between them through two small interfaces: who confirms an
`ask` rule (a terminal prompt, `--yes`, an MCP elicitation) and where audit records go.
"""

from __future__ import annotations

import dataclasses
import itertools
import secrets
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from bundlectl import metrics, telemetry
from bundlectl.config import paths
from bundlectl.config.local import always_allow
from bundlectl.config.paths import display_path
from bundlectl.config.settings import ApprovalSettings
from bundlectl.errors import (
    BundlectlError,
    CallTimeout,
    ClientLacks,
    Declined,
    PolicyDenied,
    ServerCrashed,
    ServerError,
    ToolCallError,
    Unconfirmable,
    UsageError,
)
from bundlectl.mcpio.sandbox import mode_here
from bundlectl.mcpio.target import Target
from bundlectl.output import err
from bundlectl.policy.conditions import non_finite, unencodable
from bundlectl.policy.rules import Decision
from bundlectl.resolve.resolved import Resolution
from bundlectl.resolve.sandboxing import writes_from_policy
from bundlectl.state import Counter, StateError, Store, open_store
from bundlectl.suggest import tool_suggestions

if TYPE_CHECKING:  # the transports load anyio: not before the policy has allowed the call
    from bundlectl.calls.calldata import CallOutcome, ToolCall
    from bundlectl.calls.limits import Limits
    from bundlectl.mcpio.target import Target
    from bundlectl.policy.conditions import PathReader

from bundlectl.calls import pins
from bundlectl.calls.arguments import not_unicode
from bundlectl.calls.arguments_shown import Shown
from bundlectl.calls.audit import AuditLog, AuditSink
from bundlectl.calls.confirm import (
    AfterCall,
    Answer,
    AnswerLater,
    Confirmation,
)

# The audit log's outcome of a call that failed, by the error's exit code (SPEC 4.1).
OUTCOMES = {
    2: "usage-error",
    3: "denied",
    4: "invalid-call",
    5: "server-error",
    6: "timeout",
    130: "interrupted",
}


NOT_STARTED = "not-started"  # a call let through that never reached its server
ASKED = "asked"  # a round that ended in its server's questions to the client (2026-07-28)


def outcome_of(error: BundlectlError | None, *, tool_error: bool = False) -> str:
    """The audit log's outcome of a call: `ok`, `tool-error`, or what its error says."""
    if error is not None:
        return OUTCOMES.get(error.exit_code, "error")
    return "tool-error" if tool_error else "ok"


T = TypeVar("T")


# Call ids: this process's random prefix and a counter (unique across processes and runs).
_RUN = secrets.token_hex(4)


_CALLS = itertools.count(1)


@dataclass
class Pipeline:
    """The policy side of every call: decisions, confirmation, targets, audit."""

    resolution: Resolution
    audit: AuditSink
    confirm: Confirmation | None  # None: an `ask` rule cannot be confirmed, so it denies
    # How each server reads a path argument (`paths`), made once per loaded config.
    _readers: dict[str, PathReader | None] = field(default_factory=dict, repr=False)
    _limits: Limits | None = field(default=None, repr=False)  # compiled once per loaded config
    _shown: Shown | None = field(default=None, repr=False)
    _store: Store | None = field(default=None, repr=False)  # opened when first needed
    # The quota counters each admitted call was counted on, by call id, until it finishes: a
    # call refused for its arguments before anything was sent gets its count back.
    _charged: dict[str, list[Counter]] = field(default_factory=dict, repr=False)
    # "tool changed" requests opened by this process: (server.tool, digest) → approval id
    changes: dict[tuple[str, str], str] = field(default_factory=dict, repr=False)
    # An approver's answer is waited for (`exec` on a terminal), else the caller gets the id.
    wait_for_approver: bool = False

    def __post_init__(self) -> None:
        # Tracing, when the environment asks for it, is set up before the first request, so
        # the MCP SDK's own spans around it are recorded and parent the calls' spans.
        telemetry.active()

    def access(
        self, agent: str, server: str, method: str, key: dict[str, Any], outcome: str
    ) -> None:
        """The one place a resource read, prompt get or listing is recorded (`serve`, `read`,
        `prompt`): refused by the access rule (`denied`), or what the server did."""
        self.audit.access(agent, server, method, key, outcome)

    def record(
        self,
        decision: Decision,
        outcome: str,
        duration_ms: float,
        arguments: dict[str, Any] | None,
        *,
        call: ToolCall | None = None,
        why: str | None = None,
    ) -> None:
        """A step of `call` — let through (`pending`), refused, or its outcome — to the audit
        log, and to the call's trace span when tracing is on (`telemetry`)."""
        self.audit.record(decision, outcome, duration_ms, arguments, call=call, why=why)
        telemetry.record(decision, outcome, duration_ms, call)  # nothing when tracing is off
        metrics.record(decision, outcome, duration_ms, call)  # nothing without serve --metrics

    def paths(self, server: str) -> PathReader | None:
        """How `server` reads a path argument, for `{path: }` conditions: a built-in server's
        own reading (links resolved below its root); None: lexically, for a third-party server
        (SPEC 10; the README's security section says what that covers)."""
        if server not in self._readers:
            self._readers[server] = self.resolution.path_reader(server)
        return self._readers[server]

    def judge(
        self,
        agent: str,
        server: str,
        tool: str,
        *,
        interactive: bool,
        arguments: Mapping[str, Any] | None = None,
        call: ToolCall | None = None,
    ) -> Decision:
        """The policy's decision (`interactive`: someone could confirm an `ask` rule) for a call
        with `arguments` (as sent; `perform` checks the rules' conditions again once they are
        validated: `rejudge`); nothing is recorded until `admit`, but arguments no JSON can
        carry, refused here (`call`: whose)."""
        decision = self.resolution.policy.agent(agent).decide(
            server, tool, interactive=interactive, arguments=arguments, paths=self.paths(server)
        )
        if arguments is not None and non_finite(arguments):  # any front door: HTTP's parser too
            self.record(decision, "invalid-call", 0.0, None, call=call)
            raise ToolCallError(
                f"the arguments of {decision.qualified} hold NaN or an infinity, which are not "
                "JSON numbers; nothing was sent",
                hint="send finite numbers",
            )
        if arguments is not None and (where := unencodable(arguments)) is not None:
            self.record(decision, "invalid-call", 0.0, None, call=call)
            raise not_unicode(decision.qualified, where)
        return decision

    def rejudge(
        self, decision: Decision, *, interactive: bool
    ) -> Callable[[Mapping[str, Any], Mapping[str, Any] | None], Decision] | None:
        """The same judgement for other arguments (validated, with the tool's input schema),
        when a rule's argument condition names the tool; None: the arguments do not matter."""
        if not decision.conditional:
            return None
        agent = self.resolution.policy.agent(decision.agent)
        server, tool, paths = decision.server, decision.tool, self.paths(decision.server)

        def again(arguments: Mapping[str, Any], schema: Mapping[str, Any] | None) -> Decision:
            return agent.decide(
                server,
                tool,
                interactive=interactive,
                arguments=arguments,
                schema=schema,
                paths=paths,
            )

        return again

    async def admission(
        self, decision: Decision, call: ToolCall, confirm: Confirmation | None
    ) -> Decision | AnswerLater:
        """The one place a judged call is confirmed and admitted, for every front door: an
        `ask` rule's call is put to `confirm` (the front door's strategy; when it has none,
        an approver's, if `policy.approvals` is on); then `admit`, which gives `call` its id.
        An approver's decision binds the arguments as the server will receive them
        (`call.received`: privacy tokens put back), so a token that stands for another value
        in another session cannot reuse it."""
        arguments = call.shown
        answer: Answer = None
        # an `ask` (unconfirmable where it was judged, too) a local rule answers in advance —
        # unless only an approver may answer it
        if (
            decision.matched_effect == "ask"
            and not decision.by_approver
            and (
                rule := self.resolution.confirmed_in_advance(
                    decision, arguments, self.paths(decision.server)
                )
            )
        ):
            err(f"note: {decision.qualified} confirmed in advance by {rule.origin} (always allow)")
            return self.admit(dataclasses.replace(decision, effect="ask"), call, True)
        if (
            decision.effect == "ask"
            and decision.by_approver
            and not getattr(confirm, "by_approver", False)
        ):
            # `approve: out-of-band`: never the caller's own terminal, --yes or elicitation
            confirm = self.out_of_band(wait=self.wait_for_approver)
        elif decision.effect == "ask" and confirm is None:
            confirm = self.out_of_band()  # held for an approver, when approvals are on
        if decision.effect == "ask" and confirm is not None:
            self.check_limits(decision, call)  # over a quota: refused before anyone is asked
            answer = await confirm(self, decision, call)
        if isinstance(answer, AnswerLater):
            return answer
        return self.admit(decision, call, answer)

    @property
    def approvals(self) -> ApprovalSettings | None:
        """`policy.approvals` of the project: None when calls are never held for an approver."""
        return self.resolution.project.config.policy.approvals

    def pending_approvals(self) -> int | None:
        """How many approval requests wait for an approver now (None: approvals are off). Read
        from a store opened for it: a metrics reader may ask from a thread of its own."""
        if self.approvals is None:
            return None
        return len(self._open_store().listed())

    def out_of_band(self, *, wait: bool = False) -> Confirmation | None:
        """Out-of-band approval (`calls.approval`) when `policy.approvals` is on, else None;
        `wait`: until an approver answers (`exec`), else the caller gets the request's id."""
        if self.approvals is None:
            return None
        from bundlectl.calls.approval import OutOfBand  # noqa: PLC0415 - only for a held call

        return OutOfBand(wait=wait)

    def admit(self, decision: Decision, call: ToolCall, answer: bool | None = None) -> Decision:
        """Let the call through under a new id (`start`), or refuse it (PolicyDenied, exit 3:
        `Unconfirmable` when no one could be asked, `Declined` when the person said no) with the
        refusal audited under its real reason, whatever the front door then tells the caller.
        `answer`: the person's answer to an `ask` rule (None: no one could be asked)."""
        agent, qualified = decision.agent, decision.qualified
        if decision.effect == "deny":
            self.record(decision, "denied", 0.0, None, call=call)
            close = tool_suggestions(self.resolution.catalog.index, decision.server, decision.tool)
            raise PolicyDenied(
                f"agent {agent!r} may not call {qualified}: {decision.reason}",
                hint=self._did_you_mean(agent, qualified, close) if close else decision.explain,
            )
        if decision.effect == "ask" and answer is None and decision.by_approver:
            self.record(decision, "denied", 0.0, None, call=call)
            raise Unconfirmable(
                f"only an approver may confirm {qualified} (the rule at "
                f"{decision.rule.origin if decision.rule else '?'} says approve: out-of-band), "
                "and this project has no approvals",
                hint="turn them on with `approvals: {}` under policy: in bundlectl.yaml",
            )
        if decision.effect == "ask" and answer is None:
            self.record(decision, "denied", 0.0, None, call=call)
            raise Unconfirmable(
                f"{qualified} needs a person's confirmation ({decision.reason}), and no one "
                "can be asked here",
                hint="run it with `bundlectl exec` on a terminal, or with --yes",
            )
        if decision.effect == "ask" and not answer:
            self.record(decision, "denied-by-user", 0.0, None, call=call)
            raise Declined(f"{qualified} was not confirmed; nothing was started")
        charged = self.charge(decision, call)
        call_id = self.start(decision, call)
        if charged:
            self._charged[call_id] = charged
        return decision

    @property
    def limits(self) -> Limits:
        """The project's quotas (`limits:`), compiled once per loaded config."""
        if self._limits is None:
            from bundlectl.calls.limits import Limits  # noqa: PLC0415 - cheap, but not for every command

            project = self.resolution.project
            self._limits = Limits(list(project.config.limits), str(project.root))
        return self._limits

    def limited(self, agent: str, server: str, tool: str) -> bool:
        """Whether a quota counts the agent's calls of `server.tool`."""
        spec = self.resolution.catalog.spec(server, tool)
        return bool(self.limits) and bool(self.limits.covering(agent, server, tool, spec))

    def store(self) -> Store:
        """The state store (approvals, quotas), opened on first use and kept."""
        if self._store is None:
            self._store = self._open_store()
        return self._store

    def _open_store(self) -> Store:
        state = self.resolution.project.config.state
        return open_store(state.url if state is not None else None)

    def check_limits(self, decision: Decision, call: ToolCall) -> None:
        """Refuse (audited) a call a quota would refuse now, counting nothing: an `ask` is
        refused before a person is asked to approve a call that could not run anyway."""
        if self.limits:
            self._counted(decision, call, self.limits.check)

    def charge(self, decision: Decision, call: ToolCall) -> list[Counter]:
        """Count the let-through call against the quotas that cover it, or refuse it: over a
        limit (`LimitReached`), or no state store to count in (`StateError`: fail closed);
        either refusal audited. The counters it was counted on."""
        if not self.limits:
            return []
        return self._counted(decision, call, self.limits.charge)

    def _counted(self, decision: Decision, call: ToolCall, step: Callable[..., T]) -> T:
        """A quota step (`Limits.check` or `charge`) for the call, its refusal audited."""
        spec = self.resolution.catalog.spec(decision.server, decision.tool)
        try:
            return step(self.store(), decision.agent, decision.server, decision.tool, spec)
        except PolicyDenied as exc:
            self.record(decision, "over-limit", 0.0, None, call=call)
            metrics.over_limit(decision.agent, getattr(exc, "limit", ""))
            raise
        except StateError:
            self.record(decision, "state-error", 0.0, None, call=call)
            raise

    def _did_you_mean(self, agent: str, qualified: str, close: list[str]) -> str:
        """The declared tools close to a mistyped one, those the agent may call first; the
        others marked, so the hint never sends it to another refusal."""
        compiled = self.resolution.policy.agent(agent)
        usable = [n for n in close if compiled.decide(*n.split(".", 1)).effect != "deny"]
        others = [n for n in close if n not in usable]
        said = f"{qualified} is not a declared tool"
        if usable:
            said += f"; did you mean {' or '.join(usable)}?"
        if others:
            said += (
                f" ({' and '.join(others)} {'is' if len(others) == 1 else 'are'} close too, "
                f"but agent {agent!r} may not call {'it' if len(others) == 1 else 'them'})"
            )
        return said

    def start(self, decision: Decision, call: ToolCall) -> str:
        """The call is let through: recorded now as `pending` under a new id (`call.id`),
        before the server can act (a process killed mid-call leaves that record), and
        completed by `finish` under the same id."""
        call.id = f"{_RUN}-{next(_CALLS)}"
        self.record(decision, "pending", 0.0, None, call=call)
        return call.id

    def always_allow(self, decision: Decision) -> None:
        """ "Always allow": an allow rule for exactly this tool — with the conditions of the rule
        that asked, when it had any — added to the agent's rules in `bundlectl.local.yaml`
        (SPEC 11). An agent the project does not list gets no local rules: allowed this once."""
        if decision.agent not in self.resolution.merged.agents:
            err(
                f"note: agent {decision.agent!r} is not listed in the project, so no local rule "
                "was kept; allowed this once"
            )
            return
        rule = decision.rule
        condition = rule.condition if rule is not None else None
        entry: str | dict[str, Any] = decision.qualified
        if condition is not None:
            entry = {"tool": decision.qualified, **condition.canonical}
        path = always_allow(self.resolution.project.config_path, decision.agent, entry)
        err(
            f"kept in {display_path(path)}: agent {decision.agent!r} may call "
            f"{decision.qualified}"
            + (f" ({condition.describe()})" if condition is not None else "")
            + " without being asked, on this machine"
        )

    @property
    def shown(self) -> Shown:
        """How this config's calls are shown to a person (made again after a reload: the
        secret variables may differ)."""
        if self._shown is None or self._shown.resolution is not self.resolution:
            self._shown = Shown(self.resolution)
        return self._shown

    def finish(self, outcome: CallOutcome) -> AfterCall:
        """The call is over, whichever front door made it: audit its outcome (the arguments as
        the agent sent them, digested) and say what the server's session should do next —
        `Downstream.after` acts on it, the one place crashes are counted."""
        error, result = outcome.error, outcome.result
        tool_error = result is not None and result.is_error
        done = outcome_of(error, tool_error=tool_error)
        if error is None and result is not None and result.asks:
            done = ASKED  # a round that ended in its server's questions to the client
        why = None
        if error is not None and not outcome.request.sent and error.exit_code not in (3, 4):
            # it never reached its server (not started, not connected): nothing can have acted
            # (a refusal of its arguments keeps its own outcome)
            done, why = NOT_STARTED, error.message
        request = outcome.request
        self.record(
            request.decision,
            done,
            outcome.duration_ms,
            outcome.arguments,
            call=request.call,
            why=why,
        )
        self._refund(request.call, done)
        if isinstance(error, ServerCrashed):
            return AfterCall.CRASHED
        if isinstance(error, ServerError) and not isinstance(error, ClientLacks):
            return AfterCall.RESTART  # (a server that asked what the client lacks is sound)
        if isinstance(error, CallTimeout):
            return AfterCall.PROBE
        return AfterCall.KEEP

    def _refund(self, call: ToolCall, done: str) -> None:
        """The quota count of an admitted call back, when nothing was sent (refused for its
        arguments, or never started) or when it was a round that asked the client something
        (2026-07-28: the client's retry is the same call's next round, counted then)."""
        charged = self._charged.pop(call.id or "", None)
        # (a round that asked is not counted: the round that ends the call is, once)
        if charged and done in ("invalid-call", NOT_STARTED, ASKED):
            try:
                self.store().refund(charged)
            except StateError as exc:
                err(f"warning: {exc.message}")

    def reload(self, resolution: Resolution) -> None:
        """Decide from a newly loaded config and lock from now on (the gateway's reload)."""
        self.resolution = resolution
        self._readers = {}
        self._limits = None
        if isinstance(self.audit, AuditLog):
            self.audit.resolution = resolution

    def unpinned(self, server: str, live: Any) -> str | None:
        """Why `pin_tools` refuses the server's live tool `live` (None: it may be used); a
        changed, renamed or moved tool is held for a person (`pins`)."""
        refusal = pins.refusal(self, server, live)
        return None if refusal is None else refusal.message

    def pin_check(self, server: str) -> Callable[[Any], PolicyDenied | None] | None:
        """The check a call makes on the live tool before sending anything (`pin_tools`)."""
        if not self.resolution.policy.set.pin_tools:
            return None

        def check(live: Any) -> PolicyDenied | None:
            return pins.refusal(self, server, live)

        return check

    def target(
        self, server: str, *, quiet: bool = False, agents: Collection[str] | None = None
    ) -> Target:
        """The configured server to call (its stderr to a log file when `quiet`), for `agents`
        (None: every listed agent): in a sandbox, they decide where it may write."""
        merged = self.resolution.server(server)
        if merged.spec.disabled:
            raise UsageError(
                f"server {server!r} is disabled",
                hint=f"set servers.{server}.disabled: false to use it",
            )
        mode = mode_here(self.resolution.project.config.policy.sandbox)
        return Target(
            server,
            merged.spec,
            self.resolution.project.root,
            log_file=paths.server_log(server) if quiet else None,
            sandbox_mode=mode,
            sandbox_writes=(
                writes_from_policy(self.resolution, server, agents) if mode != "off" else ()
            ),
            egress_refused=lambda host: self.audit.egress_denied(server, host),
        )
