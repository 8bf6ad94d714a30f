"""The detached shutdown watchdog: stop a server's process group if it outlives the grace period.

Run as its own small process (`python -I -S watchdog.py PGID GRACE`) once bundlectl has printed a
result and exits without waiting for the server: the server already has EOF on stdin; most exit
within a few hundred milliseconds and the watchdog then finds nothing to do. Otherwise it sends
SIGTERM to the whole group, waits again, and sends SIGKILL — the MCP shutdown sequence. Plain
Python with the standard library only (never a shell: `kill -- -PGID` is not portable to dash).
"""

from __future__ import annotations

import os
import signal
import sys
import time


def group_alive(group: int) -> bool:
    """Whether any process of the group is still running.

    A process that has exited but is not yet reaped (a zombie) no longer counts: an orphaned
    member is reaped by init, which may take a second or more. Where /proc tells (Linux) it is
    asked; elsewhere a zombie counts as alive, which only makes us wait longer.
    """
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, though we may not signal it
        return True
    return _running_member(group)


def _running_member(group: int) -> bool:
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == group and fields[0] not in (b"Z", b"X"):
            return True
    return False


def wait_gone(group: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while group_alive(group):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def stop_group(group: int, grace: float) -> None:
    """Wait `grace`; then SIGTERM, wait `grace`; then SIGKILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if wait_gone(group, grace):
            return
        try:
            os.killpg(group, sig)
        except (ProcessLookupError, PermissionError):
            return


if __name__ == "__main__":
    stop_group(int(sys.argv[1]), float(sys.argv[2]))
