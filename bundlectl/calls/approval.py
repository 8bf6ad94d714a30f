"""Out-of-band approval (SPEC 11): the confirmation strategy for an `ask` rule's call that no one
can confirm where it is made. The call is held as a request bound to its agent, tool and the
sha256 of its arguments; a person approves or denies it with `bundlectl approvals` (never the
agent: it has no way to). `exec` waits for the answer (polling the store every `POLL` seconds;
Ctrl-C withdraws the request); batch, code mode and `serve` answer at once with the request's id
(`ApprovalHeld`, exit 75), and the same call made again once it is approved goes through.

A "tool changed" request (`pin_tools`, #60: `Binding.tool_change`) holds no call: a tool whose
live definition differs from the reviewed one (or that was renamed, or moved to another server)
waits for a person who reads the difference (`toolchange.change_lines`); approving it pins the new
definition on the approver's machine (`bundlectl.local.yaml`), until `bundlectl pins update`
moves it into the reviewed file."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from bundlectl.calls import auditfile
from bundlectl.calls.toolchange import change_of, changed_parts
from bundlectl.config.local import pin
from bundlectl.config.lockfile import digest_json
from bundlectl.config.paths import CONFIG_NAME
from bundlectl.config.settings import seconds
from bundlectl.errors import Declined, PolicyDenied, Unconfirmable
from bundlectl.output import err, span_text, status
from bundlectl.state import TOOL_CHANGE, WAITED_EVERY, Approval, Binding, StateError, Store

if TYPE_CHECKING:
    from bundlectl.calls.calldata import ToolCall
    from bundlectl.calls.confirm import Admitting
    from bundlectl.policy.rules import Decision

_ENDED = {"expired": "expired with no answer", "withdrawn": "was withdrawn", "used": "was used"}
POLL = 0.1  # seconds between looks at the store while `exec` waits for an approver


class ApprovalHeld(PolicyDenied):
    """The call is held for an approver (nothing was started); the same call made again once it
    is approved goes through."""

    exit_code = 75  # EX_TEMPFAIL: try again later

    def __init__(self, message: str, approval: Approval, *, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.approval = approval


class SelfApproval(PolicyDenied):
    """The person who made a held call tried to approve it."""


class DeniedByApprover(Declined):
    """An approver denied the held call (who, and why, in the message)."""


@dataclass
class OutOfBand:
    """A `Confirmation` that holds the call for an approver; `wait`: until one answers (`exec`),
    else the caller is told the request's id at once."""

    wait: bool
    store: Store | None = None
    by_approver: ClassVar[bool] = True  # what `approve: out-of-band` rules require
    # The gateway, for a client that sent a progress token: keep the call open this long (s),
    # telling the client through `progress` (progress, total, message) while it waits.
    hold: float | None = None
    progress: Callable[[float, float | None, str | None], Awaitable[None]] | None = None
    # ... and is told when the call starts to wait, with what it waits for (a task's client)
    held: Callable[[Approval, str], None] | None = None
    # ... and when its wait is cancelled, whether the request stays (a task's call that another
    # gateway process makes again, as this one stops); else it is withdrawn
    kept: Callable[[], bool] | None = None
    # The request this wait last told the store it waits on, and when (monotonic)
    _said_waiting: tuple[str, float] = ("", float("-inf"))

    async def __call__(self, pipeline: Admitting, decision: Decision, call: ToolCall) -> bool:
        settings = pipeline.approvals
        ttl = seconds(settings.ttl if settings is not None else "15m")
        store = self.store = self.store or pipeline.store()
        binding = Binding(
            str(pipeline.resolution.project.root),
            decision.agent,
            decision.server,
            decision.tool,
            # the arguments as the server receives them (privacy tokens put back): per-session
            # token maps make `[EMAIL_1]` stand for different values in different sessions,
            # and the approval of one must not let the other through
            _bound_digest(call.received if call.received is not None else call.shown, call.subject),
        )
        granted = store.take(binding)
        if granted is not None:
            pipeline.audit.approval(decision, "approval-used", granted.id, granted.decided_by)
            return True
        rule = decision.rule
        where = f"{rule.label} ({rule.origin})" if rule is not None else "an ask rule"
        shown = json.dumps(pipeline.shown.redacted(call.shown), ensure_ascii=False, indent=2)
        # A caller that waits here (`exec`) is stopped as by Ctrl-C from before its request
        # exists: a SIGTERM or SIGHUP between the request and the wait ended the process with
        # the request pending, for an approver to approve a call no one waits for.
        waits = self.hold is None and self.wait
        approval: Approval | None = None
        with _stops_as_interrupts() if waits else contextlib.nullcontext():
            try:
                approval, new = store.request(
                    binding,
                    rule=where,
                    shown=shown,
                    ttl=ttl,
                    requester=call.subject,
                    needed=decision.approvals_needed,
                )
                return await self._requested(pipeline, decision, call, approval, new=new)
            except KeyboardInterrupt:
                if waits and approval is not None:
                    store.withdraw(approval.id)
                    pipeline.audit.approval(decision, "approval-withdrawn", approval.id, None)
                raise

    async def _requested(
        self,
        pipeline: Admitting,
        decision: Decision,
        call: ToolCall,
        approval: Approval,
        *,
        new: bool,
    ) -> bool:
        """The request made: announced when new, then held, refused as held, or waited for."""
        settings = pipeline.approvals
        if new:
            pipeline.audit.approval(decision, "approval-requested", approval.id, None)
            if settings is not None and settings.notify is not None:
                from bundlectl.calls.notify import announce  # noqa: PLC0415 - only with notify

                announce(settings.notify, approval)
        how = f"bundlectl approvals show {approval.id}; bundlectl approvals approve {approval.id}"
        if self.hold is not None and await self._held(pipeline, decision, call, approval, how):
            return True
        if not self.wait:
            raise ApprovalHeld(
                f"{decision.qualified} needs a person's approval ({decision.reason}); it is held "
                f"as approval request {approval.id}, which expires in {_left(approval)}; once "
                "it is approved, make the same call again",
                approval,
                hint=f"an approver runs: {how}",
            )
        return self._waited(pipeline, decision, call, approval, how)

    async def _held(
        self, pipeline: Admitting, decision: Decision, call: ToolCall, approval: Approval, how: str
    ) -> bool:
        """The gateway's wait (`hold` seconds at most): True once approved (and taken); a
        denial or an expiry refuse the call; False when the wait is over (the caller is told
        the request's id). A client that cancels the call withdraws the request (unless
        `kept`)."""
        import anyio  # noqa: PLC0415 - the gateway's event loop

        assert self.store is not None
        assert self.hold is not None
        said = f"waiting for approval request {approval.id}; an approver runs: {how}"
        if self.held is not None:
            self.held(approval, said)
        ends = time.monotonic() + self.hold
        told = 0.0
        try:
            while time.monotonic() < ends:
                if self.progress is not None and time.monotonic() - told >= 1.0:
                    told = time.monotonic()
                    with contextlib.suppress(Exception):  # a client that went away
                        await self.progress(told - (ends - self.hold), self.hold, said)
                if self._settled(pipeline, decision, call, approval):
                    return True
                await anyio.sleep(POLL)
        except anyio.get_cancelled_exc_class():
            if self.kept is None or not self.kept():
                with anyio.CancelScope(shield=True):
                    self.store.withdraw(approval.id)
                    pipeline.audit.approval(decision, "approval-withdrawn", approval.id, None)
            raise
        return False

    def _settled(
        self, pipeline: Admitting, decision: Decision, call: ToolCall, approval: Approval
    ) -> bool:
        """One look at the request: True once approved (and taken, audited); raises for a
        denial (`Declined`) or a request that ended (`Unconfirmable`); False: still pending."""
        assert self.store is not None
        said, when = self._said_waiting
        if said != approval.id or time.monotonic() - when >= WAITED_EVERY:  # approvers see it
            self._said_waiting = (approval.id, time.monotonic())
            self.store.waiting(approval.id)
        current = self.store.get(approval.id) or approval
        state = current.state()
        if state == "approved":
            taken = self.store.take(approval.binding)
            if taken is not None:
                pipeline.audit.approval(decision, "approval-used", taken.id, taken.decided_by)
                return True
            state = "used"  # another process with the same call took it first
        if state == "denied":
            pipeline.record(decision, "denied-by-approver", 0.0, None, call=call)
            why = f": {current.reason}" if current.reason else ""
            raise DeniedByApprover(
                f"{decision.qualified} was denied by {current.decided_by}{why}; nothing was started"
            )
        if state != "pending":
            pipeline.record(decision, "denied", 0.0, None, call=call)
            raise Unconfirmable(
                f"approval request {approval.id} for {decision.qualified} "
                f"{_ENDED.get(state, 'ended')}; nothing was started",
                hint="make the call again to ask anew",
            )
        return False

    def _waited(
        self, pipeline: Admitting, decision: Decision, call: ToolCall, approval: Approval, how: str
    ) -> bool:
        """Wait for the approver's answer: True once approved (and taken); a denial, an expiry
        or Ctrl-C refuse the call (audited)."""
        assert self.store is not None
        err(
            f"{decision.qualified} needs a person's approval ({decision.reason}); waiting for "
            f"approval request {approval.id} (expires in {_left(approval)}; Ctrl-C withdraws "
            f"it)\n  an approver runs: {how}"
        )
        while not self._settled(pipeline, decision, call, approval):
            if sys.stderr.isatty():
                current = self.store.get(approval.id) or approval
                status(f"\rwaiting for approval {approval.id} ({_left(current)} left)   ")
            time.sleep(POLL)
        taken = self.store.get(approval.id) or approval
        err(f"approved by {taken.decided_by}")
        return True


@contextlib.contextmanager
def _stops_as_interrupts() -> Iterator[None]:
    """While inside: SIGTERM (what `timeout` and a cancelled CI job send) and SIGHUP (the
    terminal went away) end the wait as Ctrl-C does, so every way a waiting `exec` ends
    withdraws its request (the default action ended the process with the request pending)."""
    import signal  # noqa: PLC0415
    import threading  # noqa: PLC0415

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    stops = [signal.SIGTERM] + ([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])
    before = {stop: signal.signal(stop, interrupt) for stop in stops}
    try:
        yield
    finally:
        for stop, handler in before.items():
            signal.signal(stop, handler)


def _bound_digest(arguments: Mapping[str, Any], subject: str | None) -> str:
    """What an approval binds: the arguments, and who made the call when an identity token
    named them (so one person's approval never lets another person's same call through, and
    the person who made it can be told apart from who approves it)."""
    if subject is None:
        return digest_json(dict(arguments))
    return digest_json({"arguments": dict(arguments), "subject": subject})


def _left(approval: Approval) -> str:
    return span_text(approval.expires - time.time())


def settle(
    store: Store,
    approval_id: str,
    *,
    approve: bool,
    by: str,
    reason: str | None = None,
    until: float | None = None,
    sub: str | None = None,
) -> Approval:
    """An approver's decision on a pending request, stored and audited (`approvals approve`,
    the approvers' page); `until`: an approval good until then, else for one call. `sub`: the
    approver's subject when an identity token named them: never the call's own
    (`SelfApproval`, audited)."""
    if sub is not None:
        held = store.get(approval_id)
        if held is not None and held.requester == sub:
            _audited(held, "approval-refused", by, sub=sub)
            raise SelfApproval(
                f"{by} made this call ({held.binding.qualified} as agent "
                f"{held.binding.agent!r}): someone else must approve it",
                hint="ask another approver",
            )
    approval = store.decide(
        approval_id, approve=approve, by=by, reason=reason, until=until, approver=sub
    )
    step = "approved" if approval.status == "approved" else "approval-counted"
    _audited(approval, step if approve else "denied-by-approver", by, sub=sub)
    b = approval.binding
    if b.tool_change and approval.status == "approved":
        try:
            pin(Path(b.project) / CONFIG_NAME, b.qualified, b.digest.removeprefix(TOOL_CHANGE))
        except OSError as exc:  # approved, and said so; the tool stays refused until pinned
            raise StateError(
                f"approved {approval.id}, but the pin of {b.qualified} could not be written "
                f"to the project's bundlectl.local.yaml: {exc.strerror or exc}",
                hint="check the project folder's permissions, then record it with "
                "`bundlectl pins update` after pinning by hand, or approve a new request",
            ) from None
    return approval


def described(approval: Approval, now: float) -> dict[str, Any]:
    """A request as JSON (`approvals show --format json`, the approvers' page); a "tool
    changed" one has no arguments, its `definitions` instead."""
    b = approval.binding
    change: dict[str, Any] = {"kind": "call"}
    if b.tool_change:
        before, after = change_of(approval)
        change = {
            "kind": "tool-changed",
            "changed": changed_parts(approval),
            "definitions": {"before": before, "after": after},
        }
    return {
        **change,
        "id": approval.id,
        "status": approval.state(now),
        "agent": b.agent,
        "tool": b.qualified,
        "project": b.project,
        "rule": approval.rule,
        "arguments_sha256": b.digest,
        "arguments": None if b.tool_change else json.loads(approval.shown),
        "created": stamp(approval.created),
        "expires": stamp(approval.expires),
        "decided_by": approval.decided_by,
        "requested_by": approval.requester,
        "approvals_needed": approval.needed,
        "approved_by": [name for _, name in approval.approved_by],
        "reason": approval.reason,
        "until": stamp(approval.until) if approval.until is not None else None,
        "waited_on": approval.state(now) == "pending" and approval.waited_on(now),
    }


def undeclared(approval: Approval, schema: Mapping[str, Any] | None) -> list[str]:
    """The arguments of a held call that the tool's input schema (`schema`: the catalog's) does
    not declare: an approver is told, since the tool may ignore them or a server misuse them.
    None known when the schema is not (nothing is marked then)."""
    declared = (schema or {}).get("properties")
    if not isinstance(declared, Mapping) or approval.binding.tool_change:
        return []
    try:
        shown = json.loads(approval.shown)
    except ValueError:
        return []
    return [key for key in shown if key not in declared] if isinstance(shown, dict) else []


def argument_summary(approval: Approval, width: int = 90) -> str:
    """A held call's arguments on one line, `key=value, ...`, each value as JSON, cut to
    `width` characters (the list of requests: three writes of one tool tell apart); for a
    "tool changed" request, what changed."""
    if approval.binding.tool_change:
        return "tool changed: " + ", ".join(changed_parts(approval))
    try:
        shown = json.loads(approval.shown)
    except ValueError:
        return approval.shown[:width]
    if not isinstance(shown, dict):
        return json.dumps(shown, ensure_ascii=False)[:width]
    text = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in shown.items())
    return text if len(text) <= width else text[: width - 1] + "…"


def decision_text(approval: Approval) -> str:
    """Who decided and how — `approved by X`, `denied by X: why` — whatever became of the
    request since (its status says `used` or `expired`); empty while no one has."""
    if not approval.decided_by:
        return ""
    if approval.status == "denied":
        why = f": {approval.reason}" if approval.reason else ""
        return f"denied by {approval.decided_by}{why}"
    return f"approved by {approval.decided_by}"


def progress_text(approval: Approval) -> str:
    """`1 of 2 approvals (ana@acme.example)` while a request needs more people; else ``."""
    if approval.needed <= 1 or approval.status != "pending":
        return ""
    names = ", ".join(name for _, name in approval.approved_by)
    return approval.progress + (f" ({names})" if names else "")


def stamp(when: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))


def _audited(approval: Approval, outcome: str, by: str, *, sub: str | None = None) -> None:
    b = approval.binding
    record = auditfile.AuditRecord(
        agent=b.agent,
        server=b.server,
        tool=b.tool,
        decision="ask",
        lock_digest=None,
        policy_digest=None,
        outcome=outcome,
        rule=approval.rule,
        arguments_sha256=None,
        via="approvals",
        approval=approval.id,
        approver=by,
        approver_sub=sub,
        subject=approval.requester,
    )
    try:
        auditfile.AuditFile.configured().write(record)
    except OSError as exc:
        err(f"warning: could not write the audit log: {exc}")
