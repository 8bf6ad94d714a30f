"""`exec --batch`: calls run concurrently across servers and one at a time per server; each
server is started once; results come out in input order, one JSON line each."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from bundlectl.calls import sequence
from bundlectl.calls.arguments import DuplicateKeyError, loads_strict
from bundlectl.calls.call import client_capabilities, perform
from bundlectl.calls.calldata import CallOutcome, CallRequest, ToolCall
from bundlectl.calls.confirm import AnswerLater
from bundlectl.calls.pipeline import Pipeline
from bundlectl.calls.render import result_json
from bundlectl.calls.sequence import Door
from bundlectl.config.bounded_read import read_bounded
from bundlectl.errors import BundlectlError, UsageError
from bundlectl.mcpio.connect import connect
from bundlectl.mcpio.session import SdkSession
from bundlectl.mcpio.target import Target
from bundlectl.output import write
from bundlectl.policy.patterns import parse_tool_name
from bundlectl.policy.rules import Decision, default_agent


@dataclass
class BatchItem:
    """One input line: a call to make, or the error that stopped the line early."""

    line: int
    call: ToolCall | None
    error: BundlectlError | None = None
    named: dict[str, str] | None = None  # agent/server/tool as far as the line said


class _BatchDoor(Door[CallOutcome]):
    """A batch's door: no one confirms an `ask` (calls run concurrently: none may hold the
    terminal), only `--yes` or an approver; one connection per server, opened for its first
    call that is let through and shared by its calls, one at a time."""

    def __init__(self, target: Target, stack: contextlib.AsyncExitStack, timeout: float | None):
        self.target, self.stack, self.timeout = target, stack, timeout
        self.connect_timeout = 30.0
        self.session: SdkSession | None = None
        self.broken: BundlectlError | None = None  # the connection that could not be made

    def request(self, pipeline: Pipeline, call: ToolCall, decision: Decision) -> CallRequest:
        request = super().request(pipeline, call, decision)
        spec = self.target.spec
        request.timeout = self.timeout if self.timeout is not None else float(spec.timeout)
        return request

    async def perform(self, request: CallRequest) -> CallOutcome:
        if self.broken is not None:  # no connection: each call left ends with its error
            raise self.broken
        if self.session is None:
            options = client_capabilities(self.target.root, ask=False)
            opened = connect(self.target, connect_timeout=self.connect_timeout, options=options)
            try:
                self.session = SdkSession(await self.stack.enter_async_context(opened))
            except BundlectlError as exc:
                self.broken = exc
                raise
        return await perform(self.session, request, self.target)

    async def present(self, outcome: CallOutcome) -> CallOutcome:
        return outcome


async def run_items(
    pipeline: Pipeline,
    items: list[BatchItem],
    targets: dict[str, Target],
    emit: Callable[[BatchItem, CallOutcome | None], None],
    *,
    connect_timeout: float,
    timeout: float | None = None,
) -> list[CallOutcome | None]:
    """Run each line's call through the sequence, concurrently across servers and one at a
    time per server; `emit` each line's outcome in input order (a refused line's error is its
    item's)."""
    outcomes: list[CallOutcome | None] = [None] * len(items)
    done = [False] * len(items)
    state = {"next": 0}

    def ended_line(index: int, outcome: CallOutcome | None) -> None:
        outcomes[index] = outcome
        done[index] = True
        while state["next"] < len(items) and done[state["next"]]:
            emit(items[state["next"]], outcomes[state["next"]])
            state["next"] += 1

    by_server: dict[str, list[int]] = {}
    for index, item in enumerate(items):
        if item.call is None:
            ended_line(index, None)
        else:
            by_server.setdefault(item.call.server, []).append(index)

    async def serve(server: str, indexes: list[int]) -> None:
        async with contextlib.AsyncExitStack() as stack:
            door = _BatchDoor(targets[server], stack, timeout)
            door.connect_timeout = connect_timeout
            for index in indexes:
                item = items[index]
                assert item.call is not None
                try:
                    ended = await sequence.run(pipeline, door, item.call)
                except BundlectlError as exc:  # refused (audited): the line's error
                    item.error = exc
                    ended_line(index, None)
                    continue
                assert not isinstance(ended, AnswerLater)  # a held call is refused with its id
                ended_line(index, ended)

    async with anyio.create_task_group() as group:
        for server, indexes in by_server.items():
            group.start_soon(serve, server, indexes)
    return outcomes


def write_line(data: dict[str, Any]) -> None:
    write(json.dumps(data, ensure_ascii=False) + "\n")


def read_batch(
    path: Path, pipeline: Pipeline, *, agent: str | None, quiet: bool
) -> tuple[list[BatchItem], dict[str, Target]]:
    """Each line read into a call (the sequence judges it when its turn comes); a bad line is
    an error for that line only (with its number), never for the batch."""
    try:
        lines = read_bounded(path).decode("utf-8").splitlines()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    items: list[BatchItem] = []
    targets: dict[str, Target] = {}
    callers: dict[str, set[str]] = {}  # per server, the agents whose calls it serves
    for number, line in enumerate(lines, start=1):
        if line.strip():
            item = _item((path, number), line, pipeline, targets, agent=agent, quiet=quiet)
            items.append(item)
            if item.call is not None and item.call.agent not in callers.get(item.call.server, ()):
                server = item.call.server  # one process for its calls: their agents' sandbox
                callers.setdefault(server, set()).add(item.call.agent)
                agents = sorted(callers[server])
                targets[server] = pipeline.target(server, quiet=quiet, agents=agents)
    return items, targets


def _item(
    where: tuple[Path, int],
    line: str,
    pipeline: Pipeline,
    targets: dict[str, Target],
    *,
    agent: str | None,
    quiet: bool,
) -> BatchItem:
    path, number = where
    named: dict[str, str] | None = None
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
        named = {"agent": who, "server": server, "tool": name}
        if server not in targets:
            targets[server] = pipeline.target(server, quiet=quiet)
        return BatchItem(number, ToolCall(who, server, name, arguments), named=named)
    except json.JSONDecodeError as exc:
        error = UsageError(f"{path}:{number}:{exc.colno}: invalid JSON: {exc.msg}")
        return BatchItem(number, None, error)
    except DuplicateKeyError as exc:
        return BatchItem(number, None, UsageError(f"{path}:{number}: {exc}"))
    except BundlectlError as exc:
        return BatchItem(number, None, exc, named)


def batch_line(item: BatchItem, outcome: CallOutcome | None) -> tuple[dict[str, Any], int]:
    """One output line of a batch, and its exit code."""
    error = item.error if outcome is None else outcome.error
    data: dict[str, Any] = {"line": item.line, **(item.named or {})}
    if outcome is not None:
        req = outcome.request
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
