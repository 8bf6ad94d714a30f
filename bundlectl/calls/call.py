"""One tool call on an open client: find the tool, type and validate arguments, call, time it."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from bundlectl import servers, telemetry
from bundlectl.calls.arguments import build_arguments, not_unicode, validate
from bundlectl.calls.calldata import CallOutcome, CallRequest
from bundlectl.calls.confirm import terminal_confirmer
from bundlectl.errors import (
    BundlectlError,
    ClientLacks,
    PolicyDenied,
    ToolCallError,
    UsageError,
)
from bundlectl.mcpio import plain, runner
from bundlectl.mcpio.child import Child
from bundlectl.mcpio.connect import classify, connect, connect_timed_out, missing_tool
from bundlectl.mcpio.pipes import json_line
from bundlectl.mcpio.plain import NO_SAMPLING, NO_TERMINAL, BuiltinClient
from bundlectl.mcpio.results import needs_tasks
from bundlectl.mcpio.session import SdkSession, Session
from bundlectl.mcpio.stdio import child_transport
from bundlectl.mcpio.target import Target, start_child
from bundlectl.output import ask, err, status
from bundlectl.policy.conditions import unencodable


class _Progress:
    """Progress notifications: one rewritten line on a terminal, else a line per update on
    stderr (a JSON event per line with `--format json`)."""

    def __init__(self, label: str, *, events: bool = False) -> None:
        self.label = label
        self.events = events
        self.shown = False

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        if self.events:
            event = {"event": "progress", "tool": self.label, "progress": progress}
            event.update({"total": total, "message": message})
            err(json.dumps(event, ensure_ascii=False))
            return
        amount = f"{progress:g}/{total:g}" if total else f"{progress:g}"
        line = f"{self.label}: {amount} {message or ''}".rstrip()
        if not sys.stderr.isatty():
            err(line)
            return
        status(f"\r{line}".ljust(60)[:200])
        self.shown = True

    def done(self) -> None:
        if self.shown:
            status("\n")


def client_capabilities(root: Path, *, ask: bool) -> dict[str, Any]:
    """What `exec` answers when a server asks its client something (`mcp.Client` options):
    roots are the project folder; elicitation is asked on the terminal when `ask` (someone is
    there), refused otherwise; sampling is refused, since no model stands behind `exec`.
    The SDK's types are imported only when a server asks (the same answers without the SDK:
    `plain.StdioClient`)."""

    async def roots(context: Any) -> Any:
        import mcp_types as types

        return types.ListRootsResult(roots=[types.Root(uri=root.as_uri(), name=root.name)])

    async def sample(context: Any, params: Any) -> Any:
        import mcp_types as types

        return types.ErrorData(code=types.INVALID_REQUEST, message=NO_SAMPLING)

    async def elicit(context: Any, params: Any) -> Any:
        import mcp_types as types

        if not ask:
            return types.ErrorData(code=types.INVALID_REQUEST, message=NO_TERMINAL)

        asked = params.model_dump(by_alias=True, mode="json", exclude_none=True)
        answer = await anyio.to_thread.run_sync(ask_on_terminal, asked)
        return types.ElicitResult.model_validate(answer)

    return {
        "list_roots_callback": roots,
        "sampling_callback": sample,
        "elicitation_callback": elicit,
    }


def ask_on_terminal(params: dict[str, Any]) -> dict[str, Any]:
    """An elicitation (its JSON params) answered on the terminal: each field of the form in
    turn, its default shown (SEP-1034) and taken on Enter (Enter skips an optional field without
    one), or a URL to visit; end of input declines. The answer is the JSON of an ElicitResult."""
    err(f"the server asks: {params.get('message', '')}")
    url = params.get("url")
    try:
        if url:
            done = ask(f"open {url}, then answer: done? [y/N] ").strip().lower() in ("y", "yes")
            return {"action": "accept" if done else "decline"}
        schema = params.get("requestedSchema") or {}
        required = set(schema.get("required", []))
        content: dict[str, Any] = {}
        for name, field in (schema.get("properties") or {}).items():
            kind = field.get("type", "string")
            choices = field.get("enum")
            hint = f" ({'/'.join(map(str, choices))})" if choices else f" ({kind})"
            has_default = "default" in field
            if has_default:
                hint += f" [default: {json.dumps(field['default'], ensure_ascii=False)}]"
            line = ask(f"  {field.get('title') or name}{hint}: ")
            if not line:
                return {"action": "cancel"}
            text = line.strip()
            if not text and has_default:
                content[name] = field["default"]
                continue
            if not text and name not in required:
                continue
            content[name] = _typed(text, kind)
        if ask("send this answer? [y/N] ").strip().lower() not in ("y", "yes"):
            return {"action": "decline"}
        return {"action": "accept", "content": content}
    except OSError:
        return {"action": "cancel"}


def _typed(text: str, kind: str) -> Any:
    if kind == "boolean":
        return text.lower() in ("y", "yes", "true", "1")
    if kind in ("integer", "number"):
        try:
            return int(text) if kind == "integer" else float(text)
        except ValueError:
            return text  # the server says what it wanted
    return text


def _meets_conditions(request: CallRequest, arguments: dict[str, Any], schema: Any) -> None:
    """SPEC 10: a rule's argument conditions see the arguments as the server will get them
    (validated, the schema's defaults filled in). The call was admitted on the arguments as
    sent; when the validated ones decide more strictly, nothing is sent (PolicyDenied)."""
    if request.rejudge is None:
        return
    admitted = request.decision
    final = request.rejudge(arguments, schema)
    if admitted.effect == "ask" and final.matched_effect == "ask":
        # still the ask it was admitted under (confirmed, or confirmed in advance by a local
        # rule), even where no one could confirm it now
        final = dataclasses.replace(final, effect="ask")
    if final.stricter(admitted):
        raise PolicyDenied(
            f"agent {final.agent!r} may not call {final.qualified} with these arguments: "
            f"{final.reason}",
            hint=final.explain,
        )


def _declared_only(arguments: dict[str, Any], schema: dict[str, Any], qualified: str) -> None:
    """The built-in servers take only the arguments they declare (the SDK would drop the rest
    without a word; a person asked to confirm a call must see everything it carries)."""
    declared = schema.get("properties") or {}
    undeclared = [key for key in arguments if key not in declared]
    if undeclared:
        raise ToolCallError(
            f"{qualified} takes no argument {', '.join(map(repr, undeclared))}",
            hint=f"its arguments: {', '.join(declared) or 'none'}",
        )


def checked_arguments(outcome: CallOutcome, tool: Any, target: Target) -> dict[str, Any]:
    """Every check between a call's admission and its sending, on the server's live `tool`:
    the arguments as the server gets them (a detokenize tool's real values), or the refusal
    (BundlectlError); `outcome.arguments` are those the agent sent, typed by the tool's schema
    (what the audit digests, valid or not). The gateway's express lane checks its calls here
    too."""
    request = outcome.request
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
    outcome.arguments = arguments = build_arguments(request.pairs, request.base_arguments, schema)
    if (where := unencodable(arguments)) is not None:  # what the audit could not digest
        outcome.arguments = None
        raise not_unicode(request.qualified, where)
    validate(arguments, schema, request.qualified)
    if target.builtin:
        _declared_only(arguments, schema, request.qualified)
    # The audit digests what the agent sent; the server gets the real values when the tool is
    # one that receives them, and the conditions judge those.
    sent = request.restore(arguments) if request.restore else arguments
    _meets_conditions(request, sent, schema)
    return sent


async def perform(
    session: Session, request: CallRequest, target: Target, tools: dict[str, Any] | None = None
) -> CallOutcome:
    """Run one call on an open session; errors are captured in the outcome, not raised.

    `tools`: the session's tools by name when the caller already has them (a warm gateway
    session); otherwise they are listed first.
    """
    started = time.perf_counter()
    outcome = CallOutcome(request)
    progress = _Progress(request.qualified, events=request.events)
    try:
        if tools is None:
            tools = {t.name: t for t in await session.tools()}
        tool = tools.get(request.tool)
        if tool is None:
            raise missing_tool(request.server, request.tool, sorted(tools))
        sent = checked_arguments(outcome, tool, target)
        with (
            runner.interruptible() as scope,
            telemetry.step(
                request.call.id,
                f"tools/call {request.qualified}",
                server=request.server,
                tool=request.tool,
            ),
        ):
            request.sent = True
            outcome.result = await session.call(
                request.tool,
                sent,
                timeout=request.timeout,
                progress=request.progress or progress,
                meta=request.meta,
                rounds=request.rounds,
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


async def connect_and_call(
    target: Target,
    request: CallRequest,
    *,
    child: Child | None,
    connect_timeout: float,
    whole: float | None,
    show: Callable[[CallOutcome], None],
    options: dict[str, Any] | None = None,
    direct: bool = False,
) -> CallOutcome:
    """Connect, make one call, and `show` a successful outcome before the session closes.

    `whole` (exec --timeout) bounds everything, connecting included; without it the request's
    own timeout bounds the call and `connect_timeout` the connection. `direct`: a built-in
    server's content-only tool may run in this process without the SDK (`exec` prints the
    result; code that uses SDK objects does not ask for it).
    """

    in_process = _direct_client(target, request) if direct else None
    if in_process is not None:  # a built-in server's tool, called in this process without the SDK
        return await _call_on_session(in_process, request, target, show, remaining=whole)
    began = anyio.current_time()
    limit, option = connect_timeout, "--connect-timeout"
    if whole is not None and whole < connect_timeout:
        limit, option = whole, "--timeout"
    if direct and target.spec.transport == "stdio" and not target.builtin and not request.check:
        done = await _plain_call(
            target, request, child, deadline=(limit, option), whole=whole, show=show
        )
        if done is not None:
            return done
        # it speaks the 2026-07-28 protocol only, or runs the tool only as a task: the SDK's
        # client (which speaks both), afresh
        child = target.child = None
    async with contextlib.AsyncExitStack() as stack:
        with telemetry.step(request.call.id, f"connect {target.name}", server=target.name):
            opened = connect(
                target, connect_timeout=limit, option=option, child=child, options=options
            )
            client = await stack.enter_async_context(opened)
        remaining = None if whole is None else whole - (anyio.current_time() - began)
        return await _call_on_session(
            SdkSession(client), request, target, show, remaining=remaining
        )


async def _call_on_session(
    session: Session,
    request: CallRequest,
    target: Target,
    show: Callable[[CallOutcome], None],
    *,
    remaining: float | None,
) -> CallOutcome:
    """The call on an open session, bounded by what is `remaining` of `exec --timeout`; a
    successful outcome is shown before the session closes."""
    if remaining is not None:
        request.timeout = max(remaining, 0.001)
    outcome = await perform(session, request, target)
    if outcome.error is None:
        show(outcome)
    return outcome


async def _plain_call(
    target: Target,
    request: CallRequest,
    child: Child | None,
    *,
    deadline: tuple[float, str],
    whole: float | None,
    show: Callable[[CallOutcome], None],
) -> CallOutcome | None:
    """`connect_and_call` on a stdio server without the SDK (`plain.StdioClient`); None when the
    server refused the handshake (it was stopped), or the tool as one it runs only as a task
    (nothing ran: the SDK's client declares the extension, `mcpio/tasks.py`)."""

    began = anyio.current_time()
    started = child or start_child(target)
    limit, option = deadline
    options = {
        "root": target.root,
        "ask": ask_on_terminal if terminal_confirmer() is not None else None,
        "ended": lambda: _reaped(started),
    }
    async with (
        child_transport(started, decode=plain.decode, encode=json_line) as streams,
        plain.StdioClient.session(target, streams, **options) as client,
    ):
        try:
            with (
                anyio.move_on_after(limit) as connecting,
                telemetry.step(request.call.id, f"connect {target.name}", server=target.name),
            ):
                await client.initialize()
        except plain.Unsupported:
            return None
        if connecting.cancelled_caught:
            raise connect_timed_out(target, limit, option)
        remaining = None if whole is None else whole - (anyio.current_time() - began)
        outcome = await _call_on_session(client, request, target, show, remaining=remaining)
        if isinstance(outcome.error, ClientLacks) and needs_tasks(outcome.error.data):
            return None  # a tool its server runs only as a task: the SDK's client, afresh
        return outcome


def _reaped(child: Child, within: float = 0.5) -> None:
    """Wait a moment for a server whose stdout closed to exit, so that what it wrote to stderr
    last (why it died) is in the error message."""

    with contextlib.suppress(subprocess.TimeoutExpired):
        child.process.wait(within)


def _direct_client(target: Target, request: CallRequest) -> Any:
    """A BuiltinClient when the call is to a built-in server's content-only tool and nothing
    needs a live session (no `pin_tools` check of live definitions); else None."""
    if not target.builtin or request.check is not None:
        return None

    box = servers.toolbox(target.builtin, target.builtin_root(), target.builtin_unprotected())
    if not BuiltinClient.able(box, request.tool, target.spec.tools):
        return None
    return BuiltinClient(box, target.spec.tools)
