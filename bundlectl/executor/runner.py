"""Running the async executor from the CLI: SIGTERM and Ctrl-C become a clean cancellation."""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from bundlectl.errors import Interrupted

T = TypeVar("T")


def run(fn: Callable[[], Awaitable[T]]) -> T:
    """Run `fn` in an event loop; a SIGTERM cancels it so every server is shut down properly."""
    box: dict[str, T] = {}
    stopped = {"by": ""}

    async def main() -> None:
        async with anyio.create_task_group() as group:

            async def watch() -> None:
                with anyio.open_signal_receiver(signal.SIGTERM) as signals:
                    async for _ in signals:
                        stopped["by"] = "SIGTERM"
                        group.cancel_scope.cancel()
                        return

            group.start_soon(watch)
            box["value"] = await fn()
            group.cancel_scope.cancel()

    try:
        anyio.run(main)
    except KeyboardInterrupt:
        raise Interrupted("interrupted") from None
    except BaseExceptionGroup as group:
        raise _unwrap(group) from None
    if stopped["by"]:
        raise Interrupted(f"stopped by {stopped['by']}")
    return box["value"]


def _unwrap(group: BaseExceptionGroup) -> BaseException:
    """The exception that matters inside task-group wrapping: ours first, then interrupts."""
    from bundlectl.errors import BundlectlError
    from bundlectl.executor.connect import leaves

    found = leaves(group)
    for kind in (BundlectlError, KeyboardInterrupt):
        for leaf in found:
            if isinstance(leaf, kind):
                return Interrupted("interrupted") if kind is KeyboardInterrupt else leaf
    return found[0] if found else group
