"""CPU-bound work over every core a command may use: a list split into interleaved shares, each
share but one worked in a forked child that sends its results back pickled (`policy diff` of
3,000 agents decides a million cells; one core does half of them).

Fork shares what is already built (both resolved projects) without copying or pickling it.
Where fork is missing (Windows), unsafe (macOS frameworks; a thread running beside us) or not
worth its ~20 ms (few items, one core), the work runs here, in one piece — and so does a share
whose child failed in any way: the results are the same, only slower, and an error the work
raises is raised here, where it is reported as any other.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

T = TypeVar("T")
R = TypeVar("R")

# Items per share below which a child costs more than it saves (a fork, a pickle, a wait).
LEAST_PER_SHARE = 256
# Processes at most, however many cores: each child's copy-on-write pages add to the memory
# used, and past a few the work left in one process (loading, reporting) is most of the time.
MOST_SHARES = 4


class Spread(Protocol):
    """How a caller's work over items is run: `work(items)` gives one result per item."""

    def __call__(self, work: Callable[[Sequence[T]], list[R]], items: Sequence[T]) -> list[R]: ...


def serially(work: Callable[[Sequence[T]], list[R]], items: Sequence[T]) -> list[R]:
    """All of the work here, in one piece."""
    return work(items)


def over_cores(work: Callable[[Sequence[T]], list[R]], items: Sequence[T]) -> list[R]:
    """`work(items)`, its items shared among this process and forked children (interleaved:
    neighbouring items often cost alike), the results back in the items' order."""
    shares = min(cores(), MOST_SHARES, len(items) // LEAST_PER_SHARE)
    if shares < 2 or not _may_fork():
        return work(items)
    parts = [items[i::shares] for i in range(shares)]
    children: list[tuple[int, int]] = []
    try:
        for part in parts[1:]:
            children.append(_started(work, part))
        results = [work(parts[0])]
        for part in parts[1:]:
            pid, pipe = children.pop(0)
            found = _collected(pid, pipe, len(part))
            results.append(work(part) if found is None else found)
    finally:
        for pid, pipe in children:  # the work failed here: stop the children not yet heard
            _stopped(pid, pipe)
    ordered: list[Any] = [None] * len(items)
    for i, share in enumerate(results):
        ordered[i::shares] = share
    return ordered


def cores() -> int:
    """The CPUs this process may run on (its affinity, where the system tells)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _may_fork() -> bool:
    # A thread running beside us may hold a lock the child would inherit held; macOS's system
    # frameworks are not fork-safe.
    return hasattr(os, "fork") and sys.platform != "darwin" and threading.active_count() == 1


def _started(work: Callable[[Sequence[T]], list[R]], part: Sequence[T]) -> tuple[int, int]:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its results down the pipe, then gone without any teardown
        code = 1
        try:
            os.close(read)
            signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C ends it with the parent
            data = pickle.dumps(work(part), protocol=pickle.HIGHEST_PROTOCOL)
            with os.fdopen(write, "wb") as out:
                out.write(data)
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    return pid, read


def _collected(pid: int, pipe: int, size: int) -> list[Any] | None:
    """A child's results, or None when it failed (its share is then worked here)."""
    with os.fdopen(pipe, "rb") as source:
        data = source.read()
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        return None
    try:
        found = pickle.loads(data)
    except Exception:  # a child killed while writing leaves a short pickle
        return None
    return found if isinstance(found, list) and len(found) == size else None


def _stopped(pid: int, pipe: int) -> None:
    os.close(pipe)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
