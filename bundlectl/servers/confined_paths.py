"""File access that cannot leave one root folder, even while someone swaps files for symlinks.

Resolving a path and then opening it is two steps: between them a directory can be exchanged
for a symlink to `/etc`, and the open follows it. Here every component is opened relative to
the directory opened before it (`dir_fd`) with `O_NOFOLLOW`, so each step sees exactly the
object the previous one checked. A symlink met on the way is read (`readlink` at that directory)
and its target is walked the same way, from the root when absolute (only when the target is
below the root) or from the directory that holds it; a `..` pops back to the previous
directory, never above the root. This is what Linux's `openat2(RESOLVE_BENEATH)` does, in user
space, so it works on every POSIX system Python runs on.

The result is a resolved, root-relative path (its components, for the policy-file check) and
file descriptors: reads and writes go through those, never through a path string again.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

MAX_SYMLINKS = 40  # as the kernel's own limit (ELOOP)

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class Outside(Exception):
    """The path leaves the root, or cannot be resolved below it; the message says why."""


@dataclass
class Resolved:
    """A path resolved below the root: the open folder that holds it, and its name there."""

    parts: tuple[str, ...]  # the resolved path, root-relative ("" components removed)
    dir_fd: int  # the folder holding the last component (owned: close it)
    name: str  # the last component ("" for the root itself)

    @property
    def relative(self) -> str:
        return "/".join(self.parts) or "."

    def close(self) -> None:
        if self.dir_fd >= 0:
            os.close(self.dir_fd)


class Root:
    """One root folder; every access resolves below it."""

    def __init__(self, path: Path) -> None:
        self.path = path.resolve()

    def walk(self, relative: str, *, create_parents: bool = False) -> Resolved:
        """`relative` resolved below the root (the caller closes it); intermediate folders are
        made when `create_parents` (each made, then opened without following)."""
        walk = _Walk(self.path, relative, create_parents)
        try:
            return walk.run()
        except BaseException:
            walk.close()
            raise

    def reading(self, relative: str) -> str | None:
        """The root-relative path a call on `relative` would act on now — links resolved below
        the root, folders that do not exist yet taken as a write would make them — or None when
        it leads outside the root or cannot be resolved. What the policy judges a built-in
        server's path argument by (SPEC 10): the same walk the server's own calls make."""
        if not relative or os.path.isabs(relative) or relative.startswith("~"):
            return None
        walk = _Walk(self.path, relative, create_parents=False, virtual=True)
        try:
            found = walk.run()
        except (Outside, OSError, ValueError):
            walk.close()
            return None
        found.close()
        return found.relative


class _Walk:
    """One resolution: the folders opened so far (root first) and the components still to
    walk (a symlink's target is put in front of them)."""

    def __init__(
        self, root: Path, relative: str, create_parents: bool, *, virtual: bool = False
    ) -> None:
        self.root, self.relative, self.create_parents = root, relative, create_parents
        # `virtual`: a folder that does not exist is walked as if it did (fd -1), as a write
        # that makes its parents would walk it; nothing is made.
        self.virtual = virtual
        self.stack: list[tuple[int, str]] = [(os.open(root, _DIR), "")]
        self.pending = _split(relative)
        self.links = 0

    def close(self) -> None:
        for fd, _ in self.stack:
            _close(fd)
        self.stack = []

    def run(self) -> Resolved:
        while self.pending:
            part = self.pending.pop(0)
            if part == "..":
                if len(self.stack) == 1:
                    raise Outside(f"{self.relative!r} is outside the root folder")
                _close(self.stack.pop()[0])
                continue
            found = self._step(part, last=not self.pending)
            if found is not None:
                return found
        return self._found("")

    def _step(self, part: str, *, last: bool) -> Resolved | None:
        """Walk one component: the result when it is the last one, else None."""
        fd = self.stack[-1][0]
        try:
            if fd < 0:  # inside a folder that does not exist (`virtual`)
                raise FileNotFoundError(part)
            info = os.stat(part, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            if last:
                return self._found(part)
            if self.virtual:
                self.stack.append((-1, part))
                return None
            if not self.create_parents:
                raise Outside(f"{self.relative!r} does not exist") from None
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o777, dir_fd=fd)
            self.pending.insert(0, part)  # look at what is there now
            return None
        if stat.S_ISLNK(info.st_mode):
            self._follow(part, fd)
            return None
        if last:
            return self._found(part)
        if not stat.S_ISDIR(info.st_mode):
            raise Outside(f"{self.relative!r}: {part!r} is not a folder")
        try:
            child = os.open(part, _DIR, dir_fd=fd)
        except OSError as exc:  # swapped for a symlink since the stat: look again
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            self.pending.insert(0, part)
            return None
        self.stack.append((child, part))
        return None

    def _follow(self, part: str, fd: int) -> None:
        """A symlink: walk its target instead, from the root (absolute) or from here."""
        self.links += 1
        if self.links > MAX_SYMLINKS:
            raise Outside(f"{self.relative!r}: too many symbolic links")
        try:
            target = os.readlink(part, dir_fd=fd)
        except OSError as exc:  # no longer a link: look again (counted as one)
            if exc.errno not in (errno.ENOENT, errno.EINVAL):
                raise
            self.pending.insert(0, part)
            return
        if os.path.isabs(target):
            inside = _below(self.root, target)
            if inside is None:
                raise Outside(f"{self.relative!r} leads outside the root folder")
            while len(self.stack) > 1:
                _close(self.stack.pop()[0])
            target = inside
        self.pending[:0] = _split(target)

    def _found(self, name: str) -> Resolved:
        """Keep the innermost folder open, close the ones above it."""
        dir_fd = self.stack[-1][0]
        for fd, _ in self.stack[:-1]:
            _close(fd)
        parts = tuple(part for _, part in self.stack[1:]) + ((name,) if name else ())
        self.stack = []
        return Resolved(parts, dir_fd, name)


def _close(fd: int) -> None:
    if fd >= 0:  # -1: a folder walked `virtual`, never opened
        os.close(fd)


def _split(path: str) -> list[str]:
    return [part for part in path.split("/") if part not in ("", ".")]


def _below(root: Path, target: str) -> str | None:
    """An absolute symlink target as a path relative to the root, or None when it is not below
    it (compared lexically: the walk resolves whatever links the rest of it holds)."""
    normal = PurePosixPath(os.path.normpath(target))
    try:
        return str(normal.relative_to(PurePosixPath(root)))
    except ValueError:
        return None


def open_file(found: Resolved, flags: int, mode: int = 0o666) -> int:
    """Open the resolved file itself, never a symlink put in its place since."""
    if not found.name:
        raise Outside("the root folder is not a file")
    flags |= os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        return os.open(found.name, flags, mode, dir_fd=found.dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a symlink was put in its place after the walk
            raise Outside(f"{found.relative!r} changed while it was opened; try again") from None
        raise


def replace_file(found: Resolved, data: bytes) -> None:
    """Write `data` as the resolved file, atomically: a temp file made in the same open folder
    (never followed), then renamed onto the name (a rename replaces a symlink, it does not
    follow it). The file keeps its mode; a new one gets the umask's."""
    if not found.name:
        raise Outside("the root folder is not a file")
    try:
        mode = os.stat(found.name, dir_fd=found.dir_fd, follow_symlinks=False).st_mode & 0o7777
    except FileNotFoundError:
        mode = None
    for attempt in range(100):
        temp = f".{found.name[:40]}.{os.getpid()}.{attempt}.tmp"
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
            fd = os.open(temp, flags, 0o666, dir_fd=found.dir_fd)
            break
        except FileExistsError:
            continue
    else:  # pragma: no cover - a hundred stale temp files of this process id
        raise Outside(f"could not make a temporary file beside {found.relative!r}")
    try:
        with os.fdopen(fd, "wb") as handle:
            if mode is not None:  # the file keeps its mode
                os.fchmod(handle.fileno(), mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, found.name, src_dir_fd=found.dir_fd, dst_dir_fd=found.dir_fd)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=found.dir_fd)
        raise
