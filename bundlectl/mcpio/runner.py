"""Running the async side from the CLI: SIGTERM and Ctrl-C wind the calls down cleanly.

A first signal cancels the tool calls in flight (`interruptible`), so each session still ends the
way the protocol asks: the server gets `notifications/cancelled`, a streamable-HTTP session its
DELETE, a stdio server EOF and then the signals of the shutdown sequence. When no call is in
flight (while connecting), or on a second signal, everything is cancelled at once; stdio servers
are still stopped, since that part of the shutdown is shielded.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from types import TracebackType
from typing import TypeVar

import anyio

from bundlectl.errors import BundlectlError, Interrupted
from bundlectl.mcpio.connect import leaves

T = TypeVar("T")


class _Stop:
    """Who stopped us, and the cancel scopes of the calls in flight."""

    def __init__(self, everything: anyio.CancelScope) -> None:
        self.by = ""
        self.everything = everything
        self.calls: set[anyio.CancelScope] = set()
        self.graceful: list[Callable[[], object]] = []
        self.heard: set[str] = set()  # the ways a stop came: a signal, the supervisor's word

    def fire(self, by: str, way: str = "signal") -> None:
        """A stop, `by` a signal's name: the first winds down, a second one the same `way`
        cancels everything. The same stop heard another way repeats the first (a worker of
        `serve --workers` gets the terminal's Ctrl-C, or a manager's SIGTERM to every process,
        and its supervisor's word of it)."""
        again = way in self.heard
        self.heard.add(way)
        if self.by and not again:
            return
        if not self.by and self.graceful:  # a server winds down by itself the first time
            self.by = by
            for callback in self.graceful:
                callback()
            return
        if self.by or not self.calls:
            self.everything.cancel()
        self.by = self.by or by
        for scope in self.calls:
            scope.cancel()


_STOP: ContextVar[_Stop | None] = ContextVar("bundlectl_stop", default=None)
_WORD: list[int] = []  # a worker's end of its supervisor's pipe (`obey`)


def obey(fd: int) -> None:
    """In a worker of `serve --workers`: a stop also comes as a line on `fd`, the name of the
    signal its supervisor got, or as the pipe's end (the supervisor is gone). `run` winds down
    on it as on a signal; a second word cancels everything, as a second signal does."""
    _WORD[:] = [fd]


async def _listen(fd: int, stop: _Stop) -> None:
    """The supervisor's words on `fd`, each a line, until its end."""
    said = b""
    while True:
        await anyio.wait_readable(fd)
        chunk = os.read(fd, 256)
        said += chunk
        while b"\n" in said:
            line, said = said.split(b"\n", 1)
            stop.fire(line.decode(errors="replace") or "its supervisor", "word")
        if not chunk:
            stop.fire("its supervisor's exit", "word")
            return


class interruptible:  # lower case: used as the function it was, `with interruptible() as scope`
    """A cancel scope for one call on an open session, cancelled by a stop signal.

    Check `scope.cancelled_caught` afterwards; a call that would start after the stop is cancelled
    before it sends anything. (A class, not a generator: every warm call of the gateway enters
    one, and contextlib's wrapper cost more than the scope.)
    """

    __slots__ = ("scope", "stop")

    def __init__(self) -> None:
        self.stop = _STOP.get()
        self.scope = anyio.CancelScope()

    def __enter__(self) -> anyio.CancelScope:
        scope, stop = self.scope.__enter__(), self.stop
        if stop is not None:
            if stop.by:
                scope.cancel()
            stop.calls.add(scope)
        return scope

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        if self.stop is not None:
            self.stop.calls.discard(self.scope)
        return bool(self.scope.__exit__(kind, value, traceback))


@contextlib.contextmanager
def on_stop(callback: Callable[[], object]) -> Iterator[None]:
    """While inside: the first stop signal calls `callback` (a server's graceful shutdown)
    instead of cancelling; a second one cancels everything."""
    stop = _STOP.get()
    if stop is None:
        yield
        return
    stop.graceful.append(callback)
    try:
        yield
    finally:
        stop.graceful.remove(callback)


def stopped() -> Interrupted:
    """The error for a call that a stop signal ended."""
    stop = _STOP.get()
    return Interrupted(f"stopped by {stop.by}" if stop and stop.by else "interrupted")


def long_lived() -> None:
    """For a process that now serves for hours (`serve`): what it has loaded by then — the
    modules, the MCP SDK's models, the project — is set aside from the cyclic garbage collector
    (`gc.freeze`: it never frees any of it), and the collector runs less often (a young
    collection per 50,000 new objects rather than 700). Each collection walked those objects
    again, and a busy gateway made one every few requests: 0.35-0.48 s of 7-8 s of CPU over
    1,200 calls (`bench/bench_http.py --sessions 64`, collections timed with `gc.callbacks`),
    next to nothing after."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


def run(fn: Callable[[], Awaitable[T]]) -> T:
    """Run `fn` in an event loop with SIGTERM and SIGINT turned into a clean stop."""
    box: dict[str, T] = {}
    state: dict[str, _Stop] = {}

    async def main() -> None:
        async with anyio.create_task_group() as group:
            stop = state["stop"] = _Stop(group.cancel_scope)
            _STOP.set(stop)

            async def watch() -> None:
                with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    async for signum in signals:
                        stop.fire(signal.Signals(signum).name)

            group.start_soon(watch)
            if _WORD:
                group.start_soon(_listen, _WORD[0], stop)
            box["value"] = await fn()
            group.cancel_scope.cancel()

    try:
        anyio.run(main)
    except KeyboardInterrupt:
        raise Interrupted("interrupted") from None
    except BaseExceptionGroup as group:
        raise _unwrap(group) from None
    stop = state.get("stop")
    if stop is not None and stop.by:
        raise Interrupted(f"stopped by {stop.by}")
    return box["value"]


def _unwrap(group: BaseExceptionGroup) -> BaseException:
    """The exception that matters inside task-group wrapping: ours first, then interrupts."""
    found = leaves(group)
    for kind in (BundlectlError, KeyboardInterrupt):
        for leaf in found:
            if isinstance(leaf, kind):
                return Interrupted("interrupted") if kind is KeyboardInterrupt else leaf
    return found[0] if found else group
