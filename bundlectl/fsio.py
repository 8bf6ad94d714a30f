"""Safe disk writes: same-folder temp file + os.replace, under an advisory lock."""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from bundlectl import paths


def atomic_write(path: Path, text: str) -> None:
    """Write `text` to `path` so that readers see the old file or the new one, never a torn one."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Same-folder temp file, fsync, keep the old file's mode, os.replace."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        with contextlib.suppress(FileNotFoundError):
            os.chmod(tmp, path.stat().st_mode & 0o777)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def project_lock(config: Path) -> Iterator[None]:
    """Serialise read-modify-write of one project's config and lock across processes.

    The lock file lives in the cache dir, keyed by the config's real path, so projects stay clean.
    """
    from filelock import FileLock

    key = hashlib.sha256(str(config.resolve()).encode()).hexdigest()[:16]
    lock_file = paths.cache_dir() / "locks" / f"{key}.lock"
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(lock_file), timeout=60):
        yield
