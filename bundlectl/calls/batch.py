"""`exec --batch`: calls run concurrently across servers and one at a time per server; each
server is started once; results come out in input order, one JSON line each."""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from bundlectl.calls.arguments import DuplicateKeyError, loads_strict
from bundlectl.calls.call import (
    CallOutcome,
    CallRequest,
    client_capabilities,
    completed,
    perform,
)
from bundlectl.calls.pipeline import Pipeline
from bundlectl.calls.render import result_json
from bundlectl.config.bounded import read_bounded
from bundlectl.errors import BundlectlError, UsageError
from bundlectl.mcpio.connect import connect
from bundlectl.mcpio.session import SdkSession
from bundlectl.mcpio.target import Target
from bundlectl.output import write
from bundlectl.policy.patterns import parse_tool_name
from bundlectl.policy.rules import default_agent


@dataclass
class BatchItem:
    """One input line: a request the policy allowed, or the error that stopped it early."""

    line: int
    request: CallRequest | None
    error: BundlectlError | None = None
    call: dict[str, str] | None = None  # agent/server/tool as far as the line said


async def run_items(
    pipeline: Pipeline,
    items: list[BatchItem],
    targets: dict[str, Target],
    emit: Callable[[BatchItem, CallOutcome | None], None],
    *,
    connect_timeout: float,
) -> list[CallOutcome | None]:
    """Run the allowed calls (each finished by `completed`), concurrently across servers and
    one at a time per server; `emit` each line's outcome in input order."""
    outcomes: list[CallOutcome | None] = [None] * len(items)
    done = [False] * len(items)
    state = {"next": 0}

    def finish(index: int, outcome: CallOutcome | None) -> None:
        outcomes[index] = outcome
        done[index] = True
        while state["next"] < len(items) and done[state["next"]]:
            emit(items[state["next"]], outcomes[state["next"]])
            state["next"] += 1

    by_server: dict[str, list[int]] = {}
    for index, item in enumerate(items):
        if item.request is None:
            finish(index, None)
        else:
            by_server.setdefault(item.request.server, []).append(index)

    async def serve(server: str, indexes: list[int]) -> None:
        target = targets[server]
        try:
            # Calls run concurrently: none of them may hold the terminal for a question.
            options = client_capabilities(target.root, ask=False)
            async with connect(target, connect_timeout=connect_timeout, options=options) as client:
                for index in indexes:
                    request = items[index].request
                    assert request is not None
                    session = SdkSession(client)
                    made = functools.partial(perform, session, request, target)
                    finish(index, (await completed(pipeline, request, made))[0])
        except BundlectlError as exc:  # no connection: each call left ends with its error
            for index in indexes:
                if not done[index]:
                    request = items[index].request
                    assert request is not None
                    finish(index, (await completed(pipeline, request, _raise(exc)))[0])

    async with anyio.create_task_group() as group:
        for server, indexes in by_server.items():
            group.start_soon(serve, server, indexes)
    return outcomes


def _raise(error: BundlectlError) -> Callable[[], Awaitable[CallOutcome]]:
    async def failed() -> CallOutcome:
        raise error

    return failed


def write_line(data: dict[str, Any]) -> None:
    write(json.dumps(data, ensure_ascii=False) + "\n")


def read_batch(
    path: Path, pipeline: Pipeline, *, agent: str | None, timeout: float | None, quiet: bool
) -> tuple[list[BatchItem], dict[str, Target]]:
    """Each line decided by the policy now; what is allowed becomes a request. A bad line is an
    error for that line only (with its number), never for the batch."""
    try:
        lines = read_bounded(path).decode("utf-8").splitlines()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    items: list[BatchItem] = []
    targets: dict[str, Target] = {}
    for number, line in enumerate(lines, start=1):
        if line.strip():
            where = (path, number)
            items.append(
                _item(where, line, pipeline, targets, agent=agent, timeout=timeout, quiet=quiet)
            )
    return items, targets


def _item(
    where: tuple[Path, int],
    line: str,
    pipeline: Pipeline,
    targets: dict[str, Target],
    *,
    agent: str | None,
    timeout: float | None,
    quiet: bool,
) -> BatchItem:
    path, number = where
    call: dict[str, str] | None = None
    try:
        try:
            entry = loads_strict(line)
        except RecursionError:
            raise UsageError("the line's JSON nests too deeply") from None
        if not isinstance(entry, dict) or not isinstance(entry.get("tool"), str):
            raise UsageError('each line must be an object with a "tool"')
        arguments = entry.get("arguments") or {}
        if not isinstance(arguments, dict):
            raise UsageError('"arguments" must be an object')
        who = default_agent(entry.get("agent") or agent)
        server, name = parse_tool_name(entry["tool"])
        call = {"agent": who, "server": server, "tool": name}
        if server not in targets:
            targets[server] = pipeline.target(server, quiet=quiet)
        decision = pipeline.decide(who, server, name, arguments)
        limit = timeout if timeout is not None else float(targets[server].spec.timeout)
        check = pipeline.pin_check(server)
        request = CallRequest(who, server, name, decision, [], arguments, limit, check=check)
        return BatchItem(number, request)
    except json.JSONDecodeError as exc:
        error = UsageError(f"{path}:{number}:{exc.colno}: invalid JSON: {exc.msg}")
        return BatchItem(number, None, error)
    except DuplicateKeyError as exc:
        return BatchItem(number, None, UsageError(f"{path}:{number}: {exc}"))
    except BundlectlError as exc:
        return BatchItem(number, None, exc, call)


def batch_line(item: BatchItem, outcome: CallOutcome | None) -> tuple[dict[str, Any], int]:
    """One output line of a batch, and its exit code."""
    error = item.error if outcome is None else outcome.error
    data: dict[str, Any] = {"line": item.line, **(item.call or {})}
    if item.request is not None:
        req = item.request
        data.update(
            agent=req.agent,
            server=req.server,
            tool=req.tool,
            decision=req.decision.effect,
            rule=req.decision.rule.pattern if req.decision.rule else None,
        )
    if outcome is not None:
        data["duration_ms"] = round(outcome.duration_ms, 1)
    if error is not None:
        data["error"] = {"exit_code": error.exit_code, "message": error.message}
        return data, error.exit_code
    assert outcome is not None
    assert outcome.result is not None  # no error: an answer
    data["result"] = result_json(outcome.result)
    return data, 1 if outcome.result.is_error else 0
