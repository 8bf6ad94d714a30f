"""Held calls as tasks: the `io.modelcontextprotocol/tasks` extension (SEP-2663) for 2026-07-28
clients that declare it.

A call such a client makes runs through the sequence as every call does (`AgentView.call_tool`).
When it is answered within `AFTER` seconds, the client gets its result as usual. When it is
held for a person (`policy.approvals`: its approval request made), waits for a full quota's
window to reset (`limits:`, up to QUOTA_WAIT), or outlasts `AFTER` (a slow server), the client
gets a task at once (`CreateTaskResult`) and the call goes on in this
process; the client polls `tasks/get` for its status and, at the end, the call's own result
inlined (`completed`), how it was refused (`failed`: who denied it and why, or a protocol error)
or `cancelled` (its approval request expired, or the client sent `tasks/cancel`, which
withdraws the request or stops the call).

A task is a record in the state store (`state.Store.put_task`; SQLite, or Redis for replicas),
so any replica answers `tasks/get`, and one client's agent never sees another agent's task, nor
one person's another person's (an unknown task, -32602). The process that runs the call holds a
lease on the record and renews it; when that process is gone (a restart, a replica that
stopped), the next `tasks/get` finds the lease over: a call still held for a person is made
again from the record (its arguments sealed with the replicas' shared state key,
`access.StateKeys`) by the replica that asked — the same approval request, the sequence again —
and a call that had already started on its server is `failed`, since whether it finished cannot
be known (its audit record says).

A question the call's server asks after the call became a task makes it `input_required`: the
questions are in `tasks/get` (`inputRequests`, as a 2026-07-28 client would be asked them in an
input-required result), and the client's `tasks/update` with its answers makes the call's next
round, as a retry would (the same path: `relayed.py`, `input_rounds.py`). Not built:
`notifications/tasks` on the listen stream (optional in SEP-2663: clients poll). `tasks/list`
and `tasks/result` were removed by SEP-2663 and answer -32601.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import mcp_types as types
from anyio.abc import TaskGroup
from mcp.server.request_state import AESGCMRequestStateCodec
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_NAME_HEADER, decode_header_value
from mcp_types.jsonrpc import HEADER_MISMATCH
from pydantic import Field

from bundlectl.errors import BundlectlError, PolicyDenied
from bundlectl.gateway.request_context import MODERN, SdkContext
from bundlectl.mcpio.requests import TASKS, JsonObject

if TYPE_CHECKING:
    from bundlectl.state import Approval, Store

AFTER = 0.5  # seconds a call may take before its client gets a task instead of the result
LEASE = 15.0  # seconds a process's hold on a running task lasts unless renewed
RENEW = 5.0  # seconds between renewals (and looks for a client's tasks/cancel)
KEEP = 3600.0  # seconds a task is kept after its call is held (its result, after the end)
POLL_MS = 200  # how often a client is asked to poll (ms)
QUOTA_WAIT = 900.0  # seconds a task's call may wait for its quota's window to reset
DENIED = -32003  # the JSON-RPC error of a call a person (or the policy) refused
TERMINAL = ("completed", "failed", "cancelled")
_ENDED = re.compile(r"\b(expired|was withdrawn)\b")  # an approval request nobody answered

Answer = types.CallToolResult | types.InputRequiredResult
Who = tuple[str, str | None]  # whose a task is: the agent, and the person when a token named one


class UpdateParams(types.RequestParams):
    """`tasks/update`'s params."""

    task_id: str = Field(alias="taskId")
    input_responses: dict[str, Any] | None = Field(default=None, alias="inputResponses")


class Sealer(Protocol):
    def seal(self, payload: bytes) -> str: ...

    def unseal(self, token: str) -> bytes: ...


# What makes a task's call: (the request that makes it, the tool's name as the client called
# it, its arguments, the task it runs as, and for a next round the state of the one before and
# the client's answers) → the call's answer (handlers.py: the one path).
Runner = Callable[
    [SdkContext, str, JsonObject, "TaskRun", "str | None", "JsonObject | None"], Awaitable[Answer]
]
_SEALED = ("result", "error", "inputRequests", "requestState")  # kept sealed in the store


def declared(ctx: SdkContext) -> bool:
    """Whether the client of request `ctx` declared the tasks extension (2026-07-28)."""
    capabilities = ctx.session.client_capabilities
    extensions = getattr(capabilities, "extensions", None) or {}
    return ctx.protocol_version >= MODERN and TASKS in extensions


def _stamp(when: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(when)) + f".{int(when % 1 * 1000):03d}Z"


@dataclass
class TaskRun:
    """One call of a tasks client, running in this process (see the module)."""

    tasks: Tasks
    id: str
    record: JsonObject
    ready: anyio.Event = field(default_factory=anyio.Event)  # the client gets a task now
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    created: bool = False  # the client was given the task (else it gets the result itself)
    ended: tuple[str, types.ErrorData | None] | None = None  # refused: (status, error)
    released: bool = False  # this process stops: another one makes the held call again

    def held(self, approval: Approval, message: str) -> None:
        """The call waits for a person's approval (`OutOfBand`): the client gets a task."""
        self.record.update(approval=approval.id, message=message)
        self.ready.set()

    def waiting(self, message: str) -> None:
        """The call waits (for a quota's window to reset): the client gets a task now."""
        self.record["message"] = message
        self.ready.set()
        if self.created:
            self.tasks.save(self, message=message)

    async def report(self, progress: float, total: float | None, message: str | None) -> None:
        """What the call says while it runs (its server's progress, the approval's wait)
        becomes the task's status message."""
        if message and message != self.record.get("message"):
            self.record["message"] = message
            if self.created:
                self.tasks.save(self, message=message)

    def failed(self, message: str) -> None:
        """The call failed at the protocol level (its server broke it, timed out, answered
        with an error): the task is `failed`, whatever the client would be shown otherwise."""
        self.ended = ("failed", types.ErrorData(code=types.INTERNAL_ERROR, message=message))

    def started(self) -> None:
        """The call is being made on its server: from now on it is never made again."""
        self.record["phase"] = "running"
        if self.created:
            self.tasks.save(self, phase="running")

    def refused(self, error: BundlectlError) -> None:
        """How a refused call ends its task: a person denied it (`failed`, who and why), its
        approval request expired or was withdrawn (`cancelled`), or the policy refused it."""
        from bundlectl.calls.approval import ApprovalHeld, DeniedByApprover  # noqa: PLC0415

        if isinstance(error, DeniedByApprover) or not isinstance(error, PolicyDenied):
            self.ended = ("failed", types.ErrorData(code=DENIED, message=error.message))
        elif isinstance(error, ApprovalHeld) or (  # (its wait over with no answer)
            self.record.get("approval") is not None and _ENDED.search(error.message)
        ):
            self.ended = ("cancelled", None)
        else:
            self.ended = ("failed", types.ErrorData(code=DENIED, message=error.message))


class Tasks:
    """The tasks of this gateway's clients (see the module)."""

    def __init__(self, group: TaskGroup, store: Callable[[], Store], ttl: Callable[[], float]):
        self.group, self._store, self._ttl = group, store, ttl
        self.owner = secrets.token_hex(8)  # this process, as a task's record names it
        # seals a task's arguments and result: over HTTP the replicas' shared key (`handlers`),
        # else one of this process
        self.keys: Sealer = AESGCMRequestStateCodec([os.urandom(32)])
        self.runner: Runner | None = None
        self.running: dict[str, TaskRun] = {}

    # -- a call -------------------------------------------------------------------------------

    async def call(  # noqa: PLR0917 - the call, and whose it is
        self,
        ctx: SdkContext,
        agent: str,
        subject: str | None,
        name: str,
        arguments: JsonObject,
        job: Callable[[TaskRun], Awaitable[Answer]],
    ) -> Answer | JsonObject:
        """The call `job` makes: its answer when it comes within AFTER seconds (and is not held
        for a person), else a task (`CreateTaskResult`) while it goes on."""
        now = time.time()
        record: JsonObject = {
            "agent": agent,
            "subject": subject,
            "name": name,
            "arguments": self._sealed(arguments),
            "status": "working",
            "phase": "held",
            "created": now,
            "updated": now,
            "ttl": self._ttl() + KEEP,
        }
        run = TaskRun(self, secrets.token_urlsafe(16), record)
        self.group.start_soon(self._body, run, job)
        try:
            with anyio.move_on_after(AFTER):
                await run.ready.wait()
        except anyio.get_cancelled_exc_class():
            run.scope.cancel()  # the client gave up before it was given a task
            raise
        if "outcome" in run.record and run.record.get("approval") is None:  # done in time
            return _answered(run.record)
        run.created = True
        self._create(run)
        return {"resultType": "task", **_shown(run.id, run.record)}

    async def _body(self, run: TaskRun, job: Callable[[TaskRun], Awaitable[Answer]]) -> None:
        """The call, to its end, and what its task says of it then."""
        answer: Answer | None = None
        error: types.ErrorData | None = None
        with run.scope:
            try:
                answer = await job(run)
            except MCPError as exc:
                error = exc.error
            except Exception as exc:  # a defect: the client hears of it
                said = f"the call failed: {exc}"
                error = types.ErrorData(code=types.INTERNAL_ERROR, message=said)
        if run.released:
            return  # (its record says so: `release`)
        if run.scope.cancelled_caught:
            run.ended = run.ended or ("cancelled", None)
        status, outcome = _outcome(run, answer, error)
        run.record["outcome"] = {"status": status, **outcome}
        run.record["answer"] = answer
        run.ready.set()
        if run.created:
            with anyio.CancelScope(shield=True):
                self.running.pop(run.id, None)
                self.save(run, **self._kept({"status": status, **outcome}))

    def release(self) -> None:
        """This process stops: the calls of its tasks still held for a person are left to the
        next process a client's `tasks/get` reaches (their approval requests stay); those
        under way on their servers are stopped with it, and their tasks fail saying so."""
        stopped = types.ErrorData(
            code=types.INTERNAL_ERROR,
            message="the gateway stopped while the call was under way on its server; whether "
            "the tool finished is not known (the audit log says)",
        )
        for run in list(self.running.values()):
            run.released = True
            self.running.pop(run.id, None)
            if run.record.get("phase") == "held":
                self.save(run, lease=0.0)
            else:
                self.save(run, **self._kept({"status": "failed", "error": _error(stopped)}))

    def _create(self, run: TaskRun) -> None:
        stored = {k: v for k, v in run.record.items() if k not in ("outcome", "answer")}
        stored.update(owner=self.owner, lease=time.time() + LEASE)
        ended = run.record.get("outcome")  # (held for a person, and refused already)
        if ended is not None:
            stored.update(self._kept(ended))
        self._store().put_task(run.id, json.dumps(stored), stored["ttl"], rev=None)
        if ended is None:
            self.running[run.id] = run
            self.group.start_soon(self._renew, run)

    async def _renew(self, run: TaskRun) -> None:
        """While the call runs: keep the lease, and stop the call when its client cancels."""
        while run.id in self.running:
            await anyio.sleep(RENEW)
            if run.id not in self.running:
                return
            with anyio.CancelScope(shield=True):
                record = self.save(run, lease=time.time() + LEASE)
            if record is not None and record.get("cancel"):
                run.ended = ("cancelled", None)
                run.scope.cancel()

    def save(self, run: TaskRun, **changes: Any) -> JsonObject | None:
        """`changes` written to the task's record (kept from the one in the store: another
        process may have written a client's cancel since); the record as written."""
        return self._update(run.id, lambda record: record.update(changes))

    def _update(
        self, task_id: str, change: Callable[[JsonObject], bool | None]
    ) -> JsonObject | None:
        """`change` made to the task's record as it is in the store, and written over the
        revision read (read again and made again when another process wrote it since); None:
        no such task, or `change` said False (nothing to write)."""
        store = self._store()
        for _ in range(20):
            found = store.task(task_id)
            if found is None:
                return None
            record, rev = json.loads(found[0]), found[1]
            if change(record) is False:
                return None
            record["updated"] = time.time()
            left = record["created"] + record["ttl"] - time.time()
            if store.put_task(task_id, json.dumps(record), max(left, 1.0), rev=rev):
                return dict(record)
        return None

    # -- the extension's methods --------------------------------------------------------------

    def get(self, ctx: SdkContext, who: Who, task_id: str) -> JsonObject:
        """`tasks/get`: the task as it is now (a DetailedTask)."""
        record = self._known(ctx, who, task_id)
        if record["status"] == "working" and record.get("lease", 0) < time.time():
            record = self._recovered(ctx, task_id, record)
        shown = {"resultType": "complete", **_shown(task_id, record)}
        for key in ("result", "error", "inputRequests"):  # (sealed: `_kept`)
            if key in record and record["status"] != "working":
                opened = self._opened(record[key])
                shown[key] = opened if opened is not None else _unreadable(key)
        return shown

    def cancel(self, ctx: SdkContext, who: Who, task_id: str) -> JsonObject:
        """`tasks/cancel`: an ack; the task's status says `cancelled` once the call stopped
        (at once when no process runs it)."""
        record = self._known(ctx, who, task_id)
        if record["status"] in TERMINAL:
            return {"resultType": "complete"}
        run = self.running.get(task_id)
        if record["status"] == "input_required" and run is None:  # nothing runs: it ends now
            self._abandoned(task_id, record, "cancelled", None)
            return {"resultType": "complete"}
        if run is not None:  # ours: stop it now
            run.ended = ("cancelled", None)
            run.scope.cancel()
            return {"resultType": "complete"}
        if record.get("lease", 0) >= time.time():  # another process's: it looks soon
            self._update(task_id, lambda r: r.update(cancel=True))
            return {"resultType": "complete"}
        self._abandoned(task_id, record, "cancelled", None)
        return {"resultType": "complete"}

    def update(
        self, ctx: SdkContext, who: Who, task_id: str, responses: JsonObject | None
    ) -> JsonObject:
        """`tasks/update`: the client's answers to what the task's call asks
        (`input_required`); an ack. Answers to questions it does not ask are ignored, as in a
        call's retry. While some of its questions are unanswered the task stays
        `input_required`, asking only those (SEP-2663: a client may answer one at a time);
        once every one is, they go to its server in the call's next round, made by this
        process (the task is `working` again)."""
        record = self._known(ctx, who, task_id)
        if record["status"] != "input_required" or self.runner is None:
            return {"resultType": "complete"}
        given = dict(responses or {})
        answered: JsonObject = {}

        def answer(current: JsonObject) -> bool:
            """Ours to make, once every question is answered (unless another update took it
            first: it is `working` again); else the answers so far are kept."""
            if current["status"] != "input_required":
                return False
            asked = self._opened(current.get("inputRequests")) or {}  # (those still open)
            answered.clear()
            answered.update(self._opened(current.get("answers")) or {})
            answered.update({key: value for key, value in given.items() if key in asked})
            left = {key: question for key, question in asked.items() if key not in answered}
            if left:
                current.update(self._kept({"status": "input_required", "inputRequests": left}))
                current["answers"] = self._sealed(answered)
                return True
            current.update(status="working", owner=self.owner, lease=time.time() + LEASE)
            for key in ("inputRequests", "answers"):
                current.pop(key, None)
            return True

        current = self._update(task_id, answer)
        if current is not None and current["status"] == "working":
            runner, name = self.runner, str(current["name"])
            arguments = self._opened(current.get("arguments")) or {}
            opened = self._opened(record.get("requestState"))
            state = opened if isinstance(opened, str) else None

            async def job(run: TaskRun) -> Answer:
                return await runner(ctx, name, arguments, run, state, dict(answered))

            self._resumed(task_id, current, job)
        return {"resultType": "complete"}

    def _resumed(
        self, task_id: str, record: JsonObject, job: Callable[[TaskRun], Awaitable[Answer]]
    ) -> None:
        """A task's call made (again, or its next round) here, the task's record claimed."""
        run = TaskRun(self, task_id, record, created=True)
        run.ready.set()
        self.running[task_id] = run
        self.group.start_soon(self._body, run, job)
        self.group.start_soon(self._renew, run)

    def _known(self, ctx: SdkContext, who: Who, task_id: str) -> JsonObject:
        """The task `task_id` of the agent and person `who` (another's is as unknown: -32602),
        asked for by a request that may ask (2026-07-28, the extension declared, `Mcp-Name`
        the task's id when given)."""
        if ctx.protocol_version < MODERN:  # an extension of the 2026-07-28 protocol
            raise MCPError(types.METHOD_NOT_FOUND, "Method not found")
        if not declared(ctx):
            raise MCPError.from_error_data(_undeclared())
        headers = getattr(getattr(ctx, "request", None), "headers", None)
        named = headers.get(MCP_NAME_HEADER) if headers is not None else None
        if named is not None and decode_header_value(named) != task_id:  # (SEP-2243)
            said = f"{MCP_NAME_HEADER} header does not match the request body's 'taskId'"
            raise MCPError(HEADER_MISMATCH, said)
        found = self._store().task(task_id)
        record: JsonObject = json.loads(found[0]) if found is not None else {}
        agent, subject = who
        person = record.get("subject")
        if record.get("agent") != agent or (person is not None and person != subject):
            raise MCPError(types.INVALID_PARAMS, f"no task {task_id!r} (it ended long ago?)")
        return record

    def _recovered(self, ctx: SdkContext, task_id: str, record: JsonObject) -> JsonObject:
        """A working task whose process is gone: made again here while it was held for a
        person (nothing started on its server), else failed."""
        arguments = self._opened(record.get("arguments"))
        if record.get("phase") != "held" or arguments is None or self.runner is None:
            error = types.ErrorData(
                code=types.INTERNAL_ERROR,
                message="the gateway process that made this call stopped before it ended; "
                "whether the tool ran is not known (the audit log says)",
            )
            return self._abandoned(task_id, record, "failed", error)

        def claim(current: JsonObject) -> bool:
            """Ours, unless another replica took it over first (its lease is fresh again)."""
            if current["status"] != "working" or current.get("lease", 0) >= time.time():
                return False
            current.update(owner=self.owner, lease=time.time() + LEASE)
            return True

        if current := self._update(task_id, claim):
            if current.get("cancel"):
                return self._abandoned(task_id, current, "cancelled", None)
            runner, name = self.runner, str(current["name"])

            async def job(run: TaskRun) -> Answer:
                return await runner(ctx, name, arguments, run, None, None)

            self._resumed(task_id, current, job)
            return current
        return record

    def _abandoned(
        self, task_id: str, record: JsonObject, status: str, error: types.ErrorData | None
    ) -> JsonObject:
        if record.get("approval") is not None:  # nobody waits for it any more
            self._store().withdraw(str(record["approval"]))
        ended = self._kept({"status": status, **({"error": _error(error)} if error else {})})
        return self._update(task_id, lambda r: r.update(ended)) or record

    def _kept(self, outcome: JsonObject) -> JsonObject:
        """How a task's end is stored: its status, and its result or error sealed (what a
        tool answered is no one's to read in the store)."""
        kept: JsonObject = {"status": outcome["status"]}
        for key in _SEALED:
            if key in outcome:
                kept[key] = self._sealed(outcome[key])
        return kept

    def _sealed(self, value: object) -> str:
        return self.keys.seal(json.dumps(value).encode())

    def _opened(self, sealed: object) -> Any:
        if not isinstance(sealed, str):
            return None
        try:
            return json.loads(self.keys.unseal(sealed))
        except Exception:  # another key (rotated twice since, a process's own), or damaged
            return None


def _outcome(
    run: TaskRun, answer: Answer | None, error: types.ErrorData | None
) -> tuple[str, JsonObject]:
    """How the task ends: its status and what `tasks/get` inlines."""
    if run.ended is not None:
        status, refusal = run.ended
        return status, ({"error": _error(refusal)} if refusal is not None else {})
    if error is not None:
        return "failed", {"error": _error(error)}
    if isinstance(answer, types.CallToolResult):
        dumped = answer.model_dump(by_alias=True, mode="json", exclude_none=True)
        return "completed", {"result": dumped}
    assert answer is not None  # (an InputRequiredResult: its server asks the client first)
    asked = answer.model_dump(by_alias=True, mode="json", exclude_none=True)
    return "input_required", {
        "inputRequests": asked.get("inputRequests") or {},
        "requestState": answer.request_state,  # (ours, relayed: `relayed.py`; or a held call's)
    }


def _error(error: types.ErrorData) -> JsonObject:
    return error.model_dump(by_alias=True, mode="json", exclude_none=True)


def _answered(record: JsonObject) -> Answer:
    """A call that ended before it became a task: its answer as a plain call's."""
    answer = record.get("answer")
    error = record["outcome"].get("error")
    if answer is not None:
        return answer  # type: ignore[no-any-return]
    raise MCPError.from_error_data(types.ErrorData.model_validate(error))


def _shown(task_id: str, record: JsonObject) -> JsonObject:
    """A task on the wire: the fields of a `CreateTaskResult` and of `tasks/get`'s answer."""
    shown: JsonObject = {
        "taskId": task_id,
        "status": record["status"],
        "createdAt": _stamp(record["created"]),
        "lastUpdatedAt": _stamp(record["updated"]),
        "ttlMs": int(record["ttl"] * 1000),
    }
    if record["status"] not in TERMINAL:
        shown["pollIntervalMs"] = POLL_MS
    if record.get("message") and record["status"] == "working":
        shown["statusMessage"] = record["message"]
    return shown


def _unreadable(key: str) -> JsonObject:
    """A task's result or error sealed with a key this process does not hold."""
    said = f"this task's {key} was sealed by another gateway process, whose key this one lacks"
    if key == "error":
        return _error(types.ErrorData(code=types.INTERNAL_ERROR, message=said))
    return {"content": [{"type": "text", "text": said}], "isError": True}


def _undeclared() -> types.ErrorData:
    required = types.ClientCapabilities.model_validate({"extensions": {TASKS: {}}})
    data = types.MissingRequiredClientCapabilityErrorData(required_capabilities=required)
    return types.ErrorData(
        code=types.MISSING_REQUIRED_CLIENT_CAPABILITY,
        message=f"tasks are for clients that declare the {TASKS} extension",
        data=data.model_dump(by_alias=True, mode="json", exclude_none=True),
    )
