"""`exec --batch`: calls run concurrently across servers and one at a time per server; each
server is started once; results come out in input order, one JSON line each."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio

from bundlectl.errors import BundlectlError
from bundlectl.executor.call import CallOutcome, CallRequest, perform
from bundlectl.executor.connect import Target, connect


@dataclass
class BatchItem:
    """One input line: a request the policy allowed, or the error that stopped it early."""

    line: int
    request: CallRequest | None
    error: BundlectlError | None = None
    call: dict[str, str] | None = None  # agent/server/tool as far as the line said


async def run_batch(
    items: list[BatchItem],
    targets: dict[str, Target],
    emit: Callable[[BatchItem, CallOutcome | None], None],
    *,
    connect_timeout: float,
) -> list[CallOutcome | None]:
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
            async with connect(target, connect_timeout=connect_timeout) as client:
                for index in indexes:
                    request = items[index].request
                    assert request is not None
                    finish(index, await perform(client, request, target))
        except BundlectlError as exc:
            for index in indexes:
                if not done[index]:
                    request = items[index].request
                    assert request is not None
                    finish(index, CallOutcome(request, error=exc))

    async with anyio.create_task_group() as group:
        for server, indexes in by_server.items():
            group.start_soon(serve, server, indexes)
    return outcomes


def write_line(data: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(data, ensure_ascii=False) + "\n")
    sys.stdout.flush()
