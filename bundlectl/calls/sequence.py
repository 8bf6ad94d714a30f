"""The one place a tool call is composed, for every front door — `exec`, `exec --batch`, code
mode, and `serve` (its SDK path over stdio and HTTP, and its stdio express door):

    judge → admission (confirmation, approvals, quotas) → perform → present → finish

(a door may wait for a full quota's window to reset, then the admission is made anew).

A front door is an adapter (`Door`): who confirms an `ask` rule there, the request as its
session needs it (timeout, progress, privacy, the pin check), how the call is performed on a
session of its choosing, and how the outcome is presented. It never calls the pipeline's steps
itself (`tests/calls/test_sequence.py` holds every module but this one to that), so a rule that
must hold for every call is written here, once.

A refusal (denied, not confirmed, over a quota, arguments refused at the door) is already
audited when the door presents it (`Door.refused`); a call that was let through always ends in
`finish` (its audit record, what its server's session does next), whatever happened to it, even
when it was cancelled. Its outcome is presented first: the audit record is not the caller's
wait (a door that answers as it presents, as the express door does, has answered by then).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from bundlectl.calls.calldata import CallOutcome, CallRequest, ToolCall
from bundlectl.calls.confirm import AfterCall, AnswerLater, Confirmation
from bundlectl.calls.limits import LimitReached
from bundlectl.calls.pipeline import Pipeline
from bundlectl.errors import BundlectlError, Interrupted
from bundlectl.policy.rules import Decision

R = TypeVar("R")


class Door(Generic[R]):
    """What one front door says about a call; the sequence does the rest (see the module)."""

    def interactive(self, pipeline: Pipeline) -> bool:
        """Whether an `ask` rule is a question here (someone, or an approver, could answer it);
        where no one could, the policy decides it as a deny."""
        return pipeline.confirm is not None or pipeline.approvals is not None

    def confirmer(self, pipeline: Pipeline, decision: Decision) -> Confirmation | None:
        """Who confirms this call's `ask` rule here (None: no one at this door; an approver when
        `policy.approvals` is on)."""
        return pipeline.confirm

    def request(self, pipeline: Pipeline, call: ToolCall, decision: Decision) -> CallRequest:
        """The admitted call as its session makes it."""
        return CallRequest(
            call,
            decision,
            check=pipeline.pin_check(call.server),
            rejudge=pipeline.rejudge(decision, interactive=self.interactive(pipeline)),
            meta=dict(call.trace) if call.trace else None,  # the server's spans join the trace
        )

    async def perform(self, request: CallRequest) -> CallOutcome:
        """The call made on a session (`calls.call.perform`); a failure before it could be made
        (no connection, a server that did not start) raised as a BundlectlError."""
        raise NotImplementedError

    async def present(self, outcome: CallOutcome) -> R:
        """What the door answers with (or answers, when it writes its own answer)."""
        raise NotImplementedError

    async def finished(self, after: AfterCall) -> None:
        """The call is finished (audited): what its server's session should do next."""

    def refused(self, decision: Decision | None, error: BundlectlError) -> R:
        """What the door answers for a call refused before it started (already audited):
        denied, not confirmed, over a quota, its arguments refused at the door (then there is
        no `decision`). By default the refusal is raised."""
        raise error

    async def waited(self, full: LimitReached) -> bool:
        """A quota's window is full (already audited, `over-limit`): whether this door waited
        for it to reset, so the call is admitted anew; by default it does not (refused)."""
        return False

    async def hold(self, job: Callable[[], Awaitable[R]]) -> R:
        """Where the admitted call runs: here and now (the gateway may hold it across a
        client's retries instead)."""
        return await job()


async def run(pipeline: Pipeline, door: Door[R], call: ToolCall) -> R | AnswerLater:
    """The call through every step, in order (see the module): what the door presents, or a
    `AnswerLater` answer (an `ask` answered later, by the client's retry), or its refusal."""
    try:
        decision = pipeline.judge(
            call.agent,
            call.server,
            call.tool,
            interactive=door.interactive(pipeline),
            arguments=call.judged if call.typed else None,
            call=call,
        )
    except BundlectlError as exc:  # arguments refused at the door (NaN, lone surrogates)
        return door.refused(None, exc)
    while True:
        try:
            admitted = await pipeline.admission(decision, call, door.confirmer(pipeline, decision))
        except LimitReached as exc:  # a full quota window: refused, or admitted anew once over
            if await door.waited(exc):
                continue
            return door.refused(decision, exc)
        except BundlectlError as exc:
            return door.refused(decision, exc)
        break
    if isinstance(admitted, AnswerLater):
        return admitted
    request = door.request(pipeline, call, admitted)

    async def job() -> R:
        started = time.perf_counter()
        try:
            outcome = await door.perform(request)
        except BundlectlError as exc:
            outcome = _failed(request, exc, started)
        except BaseException:  # cancelled (the client withdrew it, the process stops)
            pipeline.finish(_failed(request, Interrupted("the call was cancelled"), started))
            raise
        try:
            return await door.present(outcome)
        finally:
            await door.finished(pipeline.finish(outcome))

    return await door.hold(job)


def _failed(request: CallRequest, error: BundlectlError, started: float) -> CallOutcome:
    """The outcome of a call that ended before it was made: the arguments as the agent sent
    them (for the audit's digest) when they need no typing by the tool's schema."""
    arguments = None if request.pairs else dict(request.base_arguments)
    duration = (time.perf_counter() - started) * 1000
    return CallOutcome(request, arguments=arguments, error=error, duration_ms=duration)
