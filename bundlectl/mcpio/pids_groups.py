"""The pids cgroup a sandboxed server joins before bubblewrap starts (`sandbox.wrap`): one made
for each start, allowing the profile's number of processes (256 by default), so a fork bomb ends
at the server's limit, not the machine's. Made where the machine lets us (cgroup v1, as root; v2
where the pids controller is delegated to us); elsewhere the server is not limited and
`resolve` says so. A group is named `bundlectl-PID-N-SERVER` after the process that made it,
removed when its server ends, and swept by a later start when it could not be removed then.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
from pathlib import Path

CGROUPS = Path("/sys/fs/cgroup")
_GROUPS = itertools.count(1)  # the pids cgroups made by this process
_HELD: set[str] = set()  # those of them whose server has not ended yet (by name)


def pids_base() -> Path | None:
    """The pids cgroup this process is in, where a group for a server can be made: cgroup v1's
    pids hierarchy, or a v2 group that delegates the pids controller; None: neither (or not
    writable by us)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, where = line.split(":", 2)
        if "pids" in controllers.split(","):  # v1
            base = CGROUPS / "pids" / where.lstrip("/")
            return base if os.access(base, os.W_OK) else None
    for line in lines:
        if line.startswith("0::"):  # v2
            base = CGROUPS / line[3:].lstrip("/")
            try:
                delegated = "pids" in (base / "cgroup.subtree_control").read_text().split()
            except OSError:
                return None
            return base if delegated and os.access(base, os.W_OK) else None
    return None


def pids_group(server: str, processes: int) -> Path | None:
    """A pids cgroup for one start of `server`, allowing `processes` at once: the file its
    process writes itself into (`cgroup.procs`). Groups left empty by earlier starts — by
    processes that were killed before removing theirs — are removed first. None: no group
    can be made here; the server starts unlimited (`resolve` says so)."""
    base = pids_base()
    if base is None:
        return None
    sweep_groups(base)
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", server)[:40]
    group = base / f"bundlectl-{os.getpid()}-{next(_GROUPS)}-{name}"
    try:
        group.mkdir()
        (group / "pids.max").write_text(str(processes))
    except OSError:
        with contextlib.suppress(OSError):
            group.rmdir()
        return None
    _HELD.add(group.name)
    return group / "cgroup.procs"


def sweep_groups(base: Path) -> None:
    """Remove the empty groups under `base` that bundlectl made for servers that have ended (a
    group with a process in it cannot be removed: the kernel says busy). A group another live
    process made, or one of ours whose server has not ended, is left alone even when empty: it
    may be one just made, whose server has not joined it yet — removed, that server's start
    failed (two `exec`s at once, or a gateway starting servers while an `exec` runs). Ours that
    could not be removed when their server ended (a grandchild still in them) go here."""
    me = os.getpid()
    for found in base.glob("bundlectl-*"):
        maker = found.name.split("-")[1]
        if maker.isdigit() and (found.name in _HELD if int(maker) == me else _alive(int(maker))):
            continue
        with contextlib.suppress(OSError):
            found.rmdir()


def _alive(pid: int) -> bool:
    """Whether a process with this id exists (ours, or another user's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def release_group(procs: Path | None) -> None:
    """Remove a server's pids cgroup once it is empty (its processes ended); one that is not
    empty yet is removed by a later start's sweep."""
    if procs is not None:
        _HELD.discard(procs.parent.name)
        with contextlib.suppress(OSError):
            procs.parent.rmdir()
