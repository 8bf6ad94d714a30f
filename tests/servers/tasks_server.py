"""A 2026-07-28 server that speaks the tasks extension (SEP-2663) itself: `long_job` runs only
as a task (a request that does not declare the extension is refused with -32021, as the spec
asks of a task-required tool), `failing_job` is a task that fails at the protocol level,
`ask_job` a task that asks its client to confirm (`input_required`, answered with
`tasks/update`; with `odd: true` its `inputRequests` is a list, not an object), and `quick`
answers at once. `tasks/get`, `tasks/update` and `tasks/cancel` over its tasks; a cancelled
job is written to $TASKS_LOG (bundlectl's tests: was the server told?).

    python tasks_server.py            (stdio)
"""

from __future__ import annotations

import _unmeasured  # noqa: F401  # first: see its docstring
import os
import secrets
import time
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from pydantic import ConfigDict

TASKS = "io.modelcontextprotocol/tasks"
EMPTY: dict[str, Any] = {"type": "object", "properties": {}}
TOOLS = [
    types.Tool(
        name="long_job",
        description="Works `seconds`, only as a task.",
        input_schema={"type": "object", "properties": {"seconds": {"type": "number"}}},
    ),
    types.Tool(name="failing_job", description="A task that fails.", input_schema=EMPTY),
    types.Tool(
        name="ask_job", description="A task that asks its client first.", input_schema=EMPTY
    ),
    types.Tool(name="quick", description="Answers at once.", input_schema=EMPTY),
]
JOBS: dict[str, dict[str, Any]] = {}
QUESTION = {
    "method": "elicitation/create",
    "params": {
        "message": "Go ahead?",
        "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
    },
}
GROUP: list[Any] = []


def _stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def log(line: str) -> None:
    path = os.environ.get("TASKS_LOG")
    if path:
        with open(path, "a") as handle:
            handle.write(line + "\n")


async def list_tools(ctx: ServerRequestContext, params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx: ServerRequestContext, params: types.CallToolRequestParams) -> Any:
    if params.name == "quick":
        return types.CallToolResult(content=[types.TextContent(type="text", text="quick")])
    extensions = getattr(ctx.session.client_capabilities, "extensions", None) or {}
    if TASKS not in extensions:
        required = types.ClientCapabilities.model_validate({"extensions": {TASKS: {}}})
        data = types.MissingRequiredClientCapabilityErrorData(required_capabilities=required)
        raise MCPError(
            code=types.MISSING_REQUIRED_CLIENT_CAPABILITY,
            message=f"{params.name} runs only as a task",
            data=data.model_dump(by_alias=True, mode="json", exclude_none=True),
        )
    task_id = secrets.token_hex(8)
    job: dict[str, Any] = {"status": "working", "scope": anyio.CancelScope()}
    JOBS[task_id] = job
    seconds = float((params.arguments or {}).get("seconds", 0.5))
    failing = params.name == "failing_job"

    async def work() -> None:
        with job["scope"]:
            await anyio.sleep(seconds)
            if params.name == "ask_job":
                job["answered"] = anyio.Event()
                odd = (params.arguments or {}).get("odd")  # a malformed question: a list
                asked: Any = ["confirm", QUESTION] if odd else {"confirm": QUESTION}
                job.update(status="input_required", inputRequests=asked)
                await job["answered"].wait()
                answer = job.pop("answers")["confirm"]
                text = f"confirmed: {answer.get('content')}"
                job.update(status="completed", result={"content": [{"type": "text", "text": text}]})
                del job["inputRequests"]
            elif failing:
                job.update(status="failed", error={"code": -32603, "message": "the job broke"})
            else:
                text = f"worked {seconds} s"
                job.update(status="completed", result={"content": [{"type": "text", "text": text}]})
        if job["scope"].cancelled_caught:
            job["status"] = "cancelled"

    GROUP[0].start_soon(work)
    return {"resultType": "task", **_task(task_id), "ttlMs": 60_000, "pollIntervalMs": 50}


def _task(task_id: str) -> dict[str, Any]:
    job = JOBS.get(task_id)
    if job is None:
        raise MCPError(types.INVALID_PARAMS, f"no task {task_id}")
    shown = {"taskId": task_id, "status": job["status"], "createdAt": _stamp()}
    shown.update(lastUpdatedAt=_stamp(), ttlMs=60_000)
    for key in ("result", "error", "inputRequests"):
        if key in job:
            shown[key] = job[key]
    return shown


async def get_task(ctx: ServerRequestContext, params: types.GetTaskRequestParams) -> Any:
    return _task(params.task_id)


async def cancel_task(ctx: ServerRequestContext, params: types.CancelTaskRequestParams) -> Any:
    _task(params.task_id)
    log(f"cancelled {params.task_id}")  # (before the answer: the client may stop us next)
    JOBS[params.task_id]["scope"].cancel()
    return {}


async def update_task(ctx: ServerRequestContext, params: Any) -> Any:
    job = JOBS.get(params.taskId) if hasattr(params, "taskId") else None
    if job is None or job.get("status") != "input_required":
        return {}
    job["answers"] = dict(params.inputResponses or {})
    job["status"] = "working"
    job["answered"].set()
    return {}


class UpdateParams(types.RequestParams):
    model_config = ConfigDict(extra="allow")
    taskId: str  # (the wire's name)
    inputResponses: dict[str, Any] | None = None


server: Server[Any] = Server("tasks-test-server", on_list_tools=list_tools, on_call_tool=call_tool)
server.extensions[TASKS] = {}
server.add_request_handler("tasks/get", types.GetTaskRequestParams, get_task)
server.add_request_handler("tasks/cancel", types.CancelTaskRequestParams, cancel_task)
server.add_request_handler("tasks/update", UpdateParams, update_task)


async def main() -> None:
    async with anyio.create_task_group() as group:
        GROUP.append(group)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
        group.cancel_scope.cancel()


if __name__ == "__main__":
    anyio.run(main)
