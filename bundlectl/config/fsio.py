"""Safe disk writes: same-folder temp file + os.replace, under an advisory lock."""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from bundlectl.config import paths


def atomic_write(path: Path, text: str) -> None:
    """Write `text` to `path` so that readers see the old file or the new one, never a torn one."""
    atomic_write_bytes(path, text.encode("utf-8"))


def write_project_file(path: Path, text: str) -> None:
    """`atomic_write` for `bundlectl.yaml` and the lock, under `project_lock`: temp files that an
    earlier write left when it was killed halfway are removed first (safe only while we hold the
    project's lock, so no other writer's temp file is in flight)."""
    for stray in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        with contextlib.suppress(OSError):
            stray.unlink()
    atomic_write(path, text)


def atomic_write_bytes(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Same-folder temp file, fsync, os.replace. The file keeps its mode; a new file gets the
    mode the umask gives (mkstemp's 0600 is for secrets, and these files are for review).
    `durable=False`: no fsync, for a cache whose entries are checked when read (a write a
    crash cut short is found and made again, never used)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        try:
            mode = path.stat().st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o666 & ~_umask()
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    current = os.umask(0o022)  # reading the umask means setting it; put it back at once
    os.umask(current)
    return current


@contextlib.contextmanager
def project_lock(config: Path) -> Iterator[None]:
    """Serialise read-modify-write of one project's config and lock across processes.

    The lock file lives in the cache dir, keyed by the config's real path, so projects stay clean.
    """

    key = hashlib.sha256(str(config.resolve()).encode()).hexdigest()[:16]
    lock_file = paths.cache_dir() / "locks" / f"{key}.lock"
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    from filelock import FileLock

    with FileLock(str(lock_file), timeout=60):
        yield
