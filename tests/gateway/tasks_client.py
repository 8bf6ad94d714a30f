"""The tasks extension (SEP-2663) on the client side, for the MCP Python SDK's `Client`: what a
client that declares `io.modelcontextprotocol/tasks` does with a `CreateTaskResult` — it polls
`tasks/get` until the task ends, and its `call_tool` returns the call's own result. The SDK
ships the extension mechanism (`ClientExtension`, `ResultClaim`) but not this extension."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Literal

import anyio
import mcp_types as types
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.shared.exceptions import MCPError
from pydantic import ConfigDict, Field, TypeAdapter

TASKS = "io.modelcontextprotocol/tasks"
_ANY: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])


class CreatedTask(types.Result):
    """A `CreateTaskResult`: the task's fields, flat."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = Field(alias="resultType")
    task_id: str = Field(alias="taskId")
    status: str
    poll_interval_ms: int | None = Field(default=None, alias="pollIntervalMs")


class TaskFailed(Exception):
    """The task ended `failed` or `cancelled` (its `tasks/get` answer in `task`)."""

    def __init__(self, task: dict[str, Any]) -> None:
        super().__init__(f"task {task.get('status')}: {task.get('error')}")
        self.task = task


class Tasks(ClientExtension):
    """Polls each task a `tools/call` answers with until it ends (`seen`: every `tasks/get`
    answer, with the time it came)."""

    identifier = TASKS

    def __init__(
        self,
        poll: float | None = None,
        answer: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        self.poll = poll  # seconds between looks (None: what the server asks)
        self.answer = answer  # a task's questions (`input_required`) → the client's answers
        self.created: list[CreatedTask] = []
        self.seen: list[tuple[float, dict[str, Any]]] = []

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=self.resolve)]

    async def resolve(self, created: CreatedTask, ctx: ClaimContext) -> types.CallToolResult:
        self.created.append(created)
        while True:
            task = await get(ctx.session, created.task_id)
            self.seen.append((time.monotonic(), task))
            if task["status"] == "completed":
                return types.CallToolResult.model_validate(task["result"])
            if task["status"] in ("failed", "cancelled") or (
                task["status"] == "input_required" and self.answer is None
            ):
                raise TaskFailed(task)
            if task["status"] == "input_required" and self.answer is not None:
                await update(ctx.session, created.task_id, self.answer(task["inputRequests"]))
                continue
            interval = task.get("pollIntervalMs") or created.poll_interval_ms or 500
            await anyio.sleep(self.poll if self.poll is not None else interval / 1000)


async def get(session: Any, task_id: str) -> dict[str, Any]:
    request = types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id))
    answer: dict[str, Any] = await session.send_request(request, _ANY)
    return answer


async def update(session: Any, task_id: str, responses: dict[str, Any]) -> dict[str, Any]:
    params = {"taskId": task_id, "inputResponses": responses}
    answer: dict[str, Any] = await session.send_request(_Update(params=params), _ANY)
    return answer


class _Update(types.Request[dict[str, Any], Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"


async def cancel(session: Any, task_id: str) -> dict[str, Any]:
    request = types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id))
    answer: dict[str, Any] = await session.send_request(request, _ANY)
    return answer


async def code_of(step: Any) -> int:
    """The JSON-RPC error code `step` (a coroutine) ends in."""
    try:
        await step
    except MCPError as exc:
        return int(exc.error.code)
    raise AssertionError("no error")
