"""A server process we start ourselves, and its shutdown, apart from the transport over its
pipes (`stdio`): `exec` starts a stdio server as soon as the policy has let the call through,
before asyncio, anyio or the MCP SDK are imported, so the server's start-up and those imports
overlap. Nothing here imports an event loop until a child is stopped.

Shutdown as the MCP spec says: close stdin, wait, SIGTERM the process group, wait, SIGKILL —
with the same grace periods the SDK uses.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from bundlectl.mcpio import watchdog
from bundlectl.mcpio.pids_groups import release_group
from bundlectl.mcpio.watchdog import group_alive, stop_group

if TYPE_CHECKING:
    from bundlectl.mcpio.egress import Egress

MAX_MESSAGE = 128 * 1024 * 1024  # bytes in one message, unless a server's spec says otherwise
GRACE = 2.0  # seconds after closing stdin, and again after SIGTERM


@dataclass
class Child:
    """A started server process with pipes to its stdin and stdout."""

    process: subprocess.Popen[bytes]
    # What broke the protocol, if anything (first non-JSON-RPC line on stdout).
    violation: str | None = None
    # Set once the result is printed: the rest of the shutdown need not hold the user up.
    detach: bool = False
    max_message: int = MAX_MESSAGE  # bytes in one message (`servers.NAME.max_message_mb`)
    group: Path | None = None  # the pids cgroup it joined (`cgroup.procs`), removed when done
    egress: Egress | None = None  # its egress proxy (`sandbox.network` hosts), closed when done

    @classmethod
    def start(
        cls,
        argv: list[str],
        *,
        env: dict[str, str],
        cwd: str,
        stderr: IO[str],
        with_parent: bool = False,
        limits: dict[int, int] | None = None,
        group: Path | None = None,
        egress: Egress | None = None,
    ) -> Child:
        """Start now. A missing executable raises FileNotFoundError, as the SDK would.
        `with_parent`: on Linux the child gets SIGTERM when we die, even by SIGKILL (the
        gateway's servers; `exec` hands a finished server's shutdown to a watchdog instead)."""
        kwargs: dict[str, Any] = {}
        if sys.platform != "win32":
            kwargs["start_new_session"] = True  # its own process group: we can stop the tree
        before = parent_death_signal() if with_parent and sys.platform.startswith("linux") else None
        if limits or group is not None:
            before = _limited(limits or {}, group, before)
        if before is not None:
            kwargs["preexec_fn"] = before
        process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=env,
            cwd=cwd,
            bufsize=0,
            **kwargs,
        )
        return cls(process, group=group, egress=egress)

    async def stop(self) -> None:
        """Close stdin, wait, then terminate and kill the whole process group.

        The group is stopped even when the server itself exits at once: whatever it started
        (`sleep 600 &`) must not outlive the call. With `detach`, a server still running shortly
        after EOF is left to a detached watchdog that applies the same escalation, so bundlectl
        can exit as soon as the result is out.
        """
        try:
            await self._stop()
        finally:
            self._release()

    async def _stop(self) -> None:
        proc = self.process
        with contextlib.suppress(OSError):
            if proc.stdin is not None:
                proc.stdin.close()
        if sys.platform == "win32":
            await self._stop_windows()
            return
        exited = await self._wait(0.05 if self.detach else GRACE)
        if exited and not group_alive(proc.pid):
            return
        if self.detach:
            self._watchdog()
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            self._signal(sig)
            if await self._wait_group(GRACE):
                return

    def terminate_now(self) -> None:
        """Without an event loop (we are failing): SIGTERM the group, wait, SIGKILL."""
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.process.stdin.close()
        if sys.platform == "win32":
            self.process.terminate()
            return

        if self.process.poll() is None or group_alive(self.process.pid):
            self._signal(signal.SIGTERM)
            stop_group(self.process.pid, GRACE)
        self.process.poll()
        self._release()
        with contextlib.suppress(OSError):
            if self.process.stdout is not None:
                self.process.stdout.close()  # no one reads it any more

    def _release(self) -> None:
        """Remove its pids cgroup, once empty (a detached server's stays until the next start
        sweeps it), and stop its egress proxy."""
        release_group(self.group)
        if self.egress is not None:
            self.egress.close()

    async def _stop_windows(self) -> None:
        if await self._wait(GRACE):
            return
        self.process.terminate()
        await self._wait(GRACE)

    def _watchdog(self) -> None:
        """A detached Python process that stops the server's group if it outlives GRACE."""
        with contextlib.suppress(OSError):
            subprocess.Popen(
                [sys.executable, "-I", "-S", watchdog.__file__, str(self.process.pid), str(GRACE)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )

    async def _wait(self, seconds: float) -> bool:
        import anyio  # noqa: PLC0415 - loaded by then: a child is stopped from an event loop

        with anyio.move_on_after(seconds):
            while self.process.poll() is None:
                await anyio.sleep(0.01)
        return self.process.poll() is not None

    async def _wait_group(self, seconds: float) -> bool:
        """Until the server is reaped and nothing of its group is left."""
        import anyio  # noqa: PLC0415 - loaded by then: a child is stopped from an event loop

        with anyio.move_on_after(seconds):
            while self.process.poll() is None or group_alive(self.process.pid):
                await anyio.sleep(0.02)
            return True
        return False

    def _signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
            os.killpg(self.process.pid, sig)


@contextlib.contextmanager
def stop_on_failure(child: Child | None) -> Iterator[None]:
    """Stop `child` (and its process group) when the block fails or is interrupted."""
    try:
        yield
    except BaseException:
        if child is not None:
            child.terminate_now()
        raise


def _limited(
    limits: dict[int, int], group: Path | None, then: Callable[[], None] | None
) -> Callable[[], None]:
    """What the forked child runs before exec: joining its pids cgroup and its resource limits
    (a sandboxed server's), then `then`."""
    import resource  # noqa: PLC0415 - POSIX only, and only for a sandboxed start

    def set_limits() -> None:
        if group is not None:
            with open(group, "w") as procs:
                procs.write("0")  # this process: what it starts is counted from now on
        for which, amount in limits.items():
            resource.setrlimit(which, (amount, amount))
        if then is not None:
            then()

    return set_limits


def parent_death_signal() -> Callable[[], None] | None:
    """What the forked child runs before exec: `prctl(PR_SET_PDEATHSIG, SIGTERM)`. The libc
    function is looked up here, in the parent, so the child only makes one C call."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def set_signal() -> None:
        prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)

    return set_signal
