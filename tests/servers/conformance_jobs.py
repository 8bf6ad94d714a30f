"""The conformance downstream's tools for the tasks extension's scenarios (SEP-2663), served by
`conformance.py`: plain tools, some slow. The server speaks no tasks itself: `bundlectl serve`
in front of it makes a task of a call slower than half a second (`gateway/tasks.py`), which is what
these scenarios see. The tools that ask (`slow_question`, `confirm_delete`, `multi_input`) work
a while before they ask, as the scenarios' task-supporting tools do: the question then reaches
the client as its task's `input_required`, answered with `tasks/update`."""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

from conformance_rounds import _form, inputs, rounds, said, text

SLOW = 0.8  # seconds a job takes (the gateway answers with a task after half a second)


def _tool(name: str, description: str, properties: dict[str, Any], **extra: Any) -> types.Tool:
    schema = {"type": "object", "properties": properties}
    return types.Tool(name=name, description=description, input_schema=schema, **extra)


JOBS = [
    _tool("greet", "Says hello at once.", {"name": {"type": "string"}}),
    _tool(
        "slow_compute",
        "Sleeps `seconds`, then answers.",
        {"seconds": {"type": "number"}, "label": {"type": "string"}},
    ),
    _tool("failing_job", "Fails (a tool error) after a while.", {}),
    _tool("test_tool_with_task", "Asks the user's name, then works a while.", {}),
    _tool("slow_question", "Works a while, then asks the user's name.", {}),
    _tool(
        "confirm_delete",
        "Works a while, then asks to confirm deleting `filename`.",
        {"filename": {"type": "string"}},
    ),
    _tool("multi_input", "Works a while, then asks two things at once.", {}),
    _tool("protocol_error_job", "Fails with a protocol error after a while.", {}),
]


async def jobs(ctx: ServerRequestContext, params: types.CallToolRequestParams) -> Any:
    name, args = params.name, params.arguments or {}
    if name == "greet":
        return types.CallToolResult(content=[text(f"Hello, {args.get('name', 'World')}!")])
    if name == "slow_compute":
        await anyio.sleep(float(args.get("seconds", 1)))
        return types.CallToolResult(content=[text(f"Computed {args.get('label', 'result')}")])
    if name == "failing_job":
        await anyio.sleep(SLOW)
        return types.CallToolResult(content=[text("the job failed")], is_error=True)
    if name == "test_tool_with_task":
        got = await inputs(ctx, params, {"user_name": _form("What is your name?", "name")})
        if isinstance(got, types.InputRequiredResult):
            return got
        await anyio.sleep(SLOW)
        return types.CallToolResult(content=[text(f"Hello, {said(got['user_name'], 'name')}!")])
    if name == "slow_question":
        if not params.input_responses:
            await anyio.sleep(SLOW)
        got = await inputs(ctx, params, {"user_name": _form("What is your name?", "name")})
        if isinstance(got, types.InputRequiredResult):
            return got
        return types.CallToolResult(content=[text(f"Hello, {said(got['user_name'], 'name')}!")])
    if name in ("confirm_delete", "multi_input"):
        return await _asks(ctx, params)
    if name == "protocol_error_job":
        await anyio.sleep(SLOW)
        raise MCPError(code=types.INTERNAL_ERROR, message="the job crashed")
    return await rounds(ctx, params)


async def _asks(ctx: ServerRequestContext, params: types.CallToolRequestParams) -> Any:
    """`confirm_delete` (one question) and `multi_input` (two at once): each works a while
    first (so the gateway has made the call a task), then asks, and ends once answered."""
    if params.name == "confirm_delete":
        filename = (params.arguments or {}).get("filename", "the file")
        asked = {"confirm": _form(f"Delete {filename}?", "confirm", "boolean")}
    else:
        asked = {"first": _form("Your name?", "name"), "second": _form("Confirm?", "confirm")}
    if not params.input_responses:
        await anyio.sleep(SLOW)
    got = await inputs(ctx, params, asked)
    if isinstance(got, types.InputRequiredResult):
        return got
    return types.CallToolResult(content=[text(f"{params.name}: answered {sorted(got)}")])
