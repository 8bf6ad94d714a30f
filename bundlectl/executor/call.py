"""One tool call on an open client: find the tool, type and validate arguments, call, time it."""

from __future__ import annotations

import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from bundlectl.errors import BundlectlError, UsageError
from bundlectl.executor import runner
from bundlectl.executor.arguments import build_arguments, validate
from bundlectl.executor.connect import Target, classify, list_all_tools, missing_tool
from bundlectl.executor.stdio import Child
from bundlectl.policy import Decision


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

    @property
    def qualified(self) -> str:
        return f"{self.server}.{self.tool}"


@dataclass
class CallOutcome:
    """What happened: a result, or the error that ended the call; and how long it took."""

    request: CallRequest
    result: Any = None  # mcp_types.CallToolResult
    arguments: dict[str, Any] | None = None
    error: BundlectlError | None = None
    duration_ms: float = 0.0

    @property
    def outcome(self) -> str:
        if self.error is not None:
            return {
                2: "usage-error",
                3: "denied",
                4: "invalid-call",
                5: "server-error",
                6: "timeout",
                130: "interrupted",
            }.get(self.error.exit_code, "error")
        return "tool-error" if self.result.is_error else "ok"


class _Progress:
    """Progress notifications as one rewritten line on a terminal."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.shown = False

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        if not sys.stderr.isatty():
            return
        amount = f"{progress:g}/{total:g}" if total else f"{progress:g}"
        sys.stderr.write(f"\r{self.label}: {amount} {message or ''}".ljust(60)[:200])
        sys.stderr.flush()
        self.shown = True

    def done(self) -> None:
        if self.shown:
            sys.stderr.write("\n")


async def perform(
    client: Any, request: CallRequest, target: Target, tools: dict[str, Any] | None = None
) -> CallOutcome:
    """Run one call on an open session; errors are captured in the outcome, not raised.

    `tools`: the session's tools by name when the caller already has them (a warm gateway
    session); otherwise they are listed first.
    """
    started = time.perf_counter()
    outcome = CallOutcome(request)
    progress = _Progress(request.qualified)
    try:
        if tools is None:
            tools = {t.name: t for t in await list_all_tools(client)}
        tool = tools.get(request.tool)
        if tool is None:
            raise missing_tool(request.server, request.tool, sorted(tools))
        execution = getattr(tool, "execution", None)
        if getattr(execution, "task_support", None) == "required":
            raise UsageError(
                f"{request.qualified} runs only as an MCP task (execution.taskSupport: "
                "required), which bundlectl does not support yet; nothing was sent",
                hint="ask the server's authors for a plain-call variant, or call it from a "
                "client with MCP tasks",
            )
        refusal = request.check(tool) if request.check is not None else None
        if refusal is not None:
            raise refusal
        schema = tool.input_schema or {"type": "object"}
        outcome.arguments = build_arguments(request.pairs, request.base_arguments, schema)
        validate(outcome.arguments, schema, request.qualified)
        with runner.interruptible() as scope:
            outcome.result = await client.call_tool(
                request.tool,
                outcome.arguments,
                read_timeout_seconds=request.timeout,
                progress_callback=request.progress or progress,
            )
        if scope.cancelled_caught:
            raise runner.stopped()
    except BundlectlError as exc:
        outcome.error = exc
    except Exception as exc:
        error = classify(exc, target)
        if error is None:
            raise
        outcome.error = error
    finally:
        progress.done()
        outcome.duration_ms = (time.perf_counter() - started) * 1000
    return outcome


async def call_once(
    target: Target,
    request: CallRequest,
    *,
    child: Child | None,
    connect_timeout: float,
    whole: float | None,
    show: Callable[[CallOutcome], None],
) -> CallOutcome:
    """Connect, make one call, and `show` a successful outcome before the session closes.

    `whole` (exec --timeout) bounds everything, connecting included; without it the request's
    own timeout bounds the call and `connect_timeout` the connection.
    """
    import anyio

    from bundlectl.executor.connect import connect

    began = anyio.current_time()
    limit, option = connect_timeout, "--connect-timeout"
    if whole is not None and whole < connect_timeout:
        limit, option = whole, "--timeout"
    async with connect(target, connect_timeout=limit, option=option, child=child) as client:
        if whole is not None:
            request.timeout = max(whole - (anyio.current_time() - began), 0.001)
        outcome = await perform(client, request, target)
        if outcome.error is None:
            show(outcome)
        return outcome
