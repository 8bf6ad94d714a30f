"""The tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) as a client: bundlectl's
connections to servers (`exec`, `serve`'s downstream sessions) declare it, so a 2026-07-28
server may answer a `tools/call` with a task — a tool it runs only as one, or a long one — and
the call's result is the task's: `tasks/get` is polled (every `pollIntervalMs` the server asks,
between 50 ms and 5 s) until the task ends, and its result is the call's. A task that fails is the
server's error; one cancelled by the server, an error saying so; a call stopped on our side (its
timeout — the task is the call, bounded by its timeout as a whole —, Ctrl-C, the gateway's
client cancelling) sends `tasks/cancel` first. A task that asks its client something
(`input_required`) is handed on where the caller hands a server's questions on (the gateway's
2026-07-28 clients: `session.Rounds`), as an input-required round whose answers go to the task
(`tasks/update`); elsewhere the session's own callbacks answer them, as the SDK answers a
server's questions outside a task (`exec`: the terminal; `serve`: a 2025-11-25 client).

The SDK (2.3) has the extension mechanism (`ClientExtension`, `ResultClaim`), not this
extension; the gateway's own tasks, for its clients, are `gateway/tasks.py`."""

from __future__ import annotations

import math
from typing import Any, Literal

import anyio
import mcp_types as types
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError
from pydantic import ConfigDict, Field, TypeAdapter, ValidationError

from bundlectl.mcpio.requests import TASKS

_ANSWER: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])
_QUESTION: TypeAdapter[types.InputRequest] = TypeAdapter(types.InputRequest)
# The requestState of a round that a server's task asked (`followed`): the task's id after it.
# Never sent to a server as a requestState; a client cannot forge it (the gateway seals the
# states it hands on: `gateway/relayed.py`).
CONTINUED = "io.modelcontextprotocol/tasks#"


class CreatedTask(types.Result):
    """A server's `CreateTaskResult` (the task's fields, flat)."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = Field(alias="resultType")
    task_id: str = Field(alias="taskId")
    status: str = "working"
    poll_interval_ms: int | None = Field(default=None, alias="pollIntervalMs")


class TaskPolling(ClientExtension):
    """Declares the extension and follows each task a `tools/call` answers with (see the
    module)."""

    identifier = TASKS

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=self._resolve)]

    async def _resolve(self, created: CreatedTask, ctx: ClaimContext) -> types.CallToolResult:
        result = await followed(ctx.session, created, ctx.read_timeout_seconds)
        assert isinstance(result, types.CallToolResult)  # (nothing relayed: it fails instead)
        return result


async def followed(
    session: Any, created: CreatedTask, timeout: float | None, *, relay: bool = False
) -> types.CallToolResult | types.InputRequiredResult:
    """The result of the task `created`, polled on `session` until it ends: within `timeout`
    seconds (the call's), else the task is cancelled and the call timed out. `relay`: the
    caller hands the server's questions on (`session.Rounds`): a task that asks its client
    something is answered with them (an `InputRequiredResult` whose state names the task:
    the next round, `continued`, answers the task), else the call fails, saying so."""
    with anyio.move_on_after(timeout if timeout is not None else math.inf) as bounded:
        return await _polled(session, created, relay)
    if bounded.cancelled_caught:
        raise MCPError(types.REQUEST_TIMEOUT, "the server's task did not end in time")
    raise AssertionError("unreachable")


async def _polled(
    session: Any, created: CreatedTask, relay: bool
) -> types.CallToolResult | types.InputRequiredResult:
    interval = created.poll_interval_ms
    try:
        while True:
            task = await _request(session, types.GetTaskRequest, created.task_id)
            status = task.get("status")
            if status == "completed":
                return types.CallToolResult.model_validate(task.get("result") or {})
            if status == "failed":
                error = task.get("error") or {}
                raise MCPError(
                    int(error.get("code", types.INTERNAL_ERROR)),
                    str(error.get("message") or "the server's task failed"),
                    error.get("data"),
                )
            if status == "cancelled":
                raise MCPError(types.INTERNAL_ERROR, "the server cancelled the task")
            if status == "input_required" and relay:
                asked = {"inputRequests": task.get("inputRequests") or {}}
                asked["requestState"] = CONTINUED + created.task_id
                return types.InputRequiredResult.model_validate(asked)
            if status == "input_required":
                try:
                    answers = await _answered(session, task.get("inputRequests") or {})
                except MCPError:  # not answered here: the server need not wait for it
                    with anyio.CancelScope(shield=True), anyio.move_on_after(2):
                        await _request(session, types.CancelTaskRequest, created.task_id)
                    raise
                params = {"taskId": created.task_id, "inputResponses": answers}
                await session.send_request(_UpdateTask(params=params), _ANSWER)
                continue  # the task goes on with the answers: asked again at once
            interval = task.get("pollIntervalMs") or interval or 500
            await anyio.sleep(min(max(interval / 1000, 0.05), 5.0))
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True), anyio.move_on_after(2):
            await _request(session, types.CancelTaskRequest, created.task_id)
        raise


async def continued(
    session: Any, state: str | None, responses: dict[str, Any] | None, timeout: float | None
) -> types.CallToolResult | types.InputRequiredResult | None:
    """The next round of a call whose server's task asked its client something (`state`, as
    `followed` named it): the client's answers sent to the task (`tasks/update`), and the task
    followed on; None: `state` names no task (a round of a server's own, made as a call)."""
    if state is None or not state.startswith(CONTINUED):
        return None
    task_id = state.removeprefix(CONTINUED)
    update = _UpdateTask(params={"taskId": task_id, "inputResponses": responses or {}})
    await session.send_request(update, _ANSWER)
    created = CreatedTask.model_validate({"resultType": "task", "taskId": task_id})
    return await followed(session, created, timeout, relay=True)


async def _answered(session: Any, asked: object) -> dict[str, Any]:
    """The answers of this session's own callbacks to a task's questions (`inputRequests`), one
    after the other (a person may be asked): a refusal is the call's error."""
    if not isinstance(asked, dict):
        said = "the server's task asked its client something, but its inputRequests is no object"
        raise MCPError(types.INVALID_PARAMS, said)
    answers: dict[str, Any] = {}
    for key, raw in asked.items():
        try:
            request = _QUESTION.validate_python(raw)
        except ValidationError as exc:
            problem = str(exc).splitlines()[0]
            said = f"the server's task asked its client something it cannot answer: {problem}"
            raise MCPError(types.INVALID_PARAMS, said) from None
        meta = request.params.meta if request.params is not None else None
        context = ClientRequestContext(session=session, request_id=key, meta=meta)
        answer = await session.dispatch_input_request(context, request)
        if isinstance(answer, types.ErrorData):
            raise MCPError.from_error_data(answer)
        answers[key] = answer.model_dump(by_alias=True, mode="json", exclude_none=True)
    return answers


class _UpdateTask(types.Request[dict[str, Any], Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"


async def _request(session: Any, kind: Any, task_id: str) -> dict[str, Any]:
    params = (
        types.GetTaskRequestParams
        if kind is types.GetTaskRequest
        else types.CancelTaskRequestParams
    )
    answer: dict[str, Any] = await session.send_request(
        kind(params=params(task_id=task_id)), _ANSWER
    )
    return answer
