"""The audit log file (SPEC 4.2, 13): one JSON line per record, each carrying the sha256 of the
line before it (a hash chain, per file); appended whole under an advisory lock by every writer
that shares it (`exec` beside `serve`), rotated by size under that lock with the new file's first
record linked to the old file's last; read back as a stream (`lines`, `records`)."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import secrets
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

from bundlectl.calls.auditchain import link
from bundlectl.calls.auditseal import Sealer
from bundlectl.config import paths, userconfig


@dataclass
class AuditRecord:
    agent: str
    server: str
    tool: str
    decision: str
    lock_digest: str | None
    policy_digest: str | None  # the effective policy that decided (SPEC 6)
    outcome: str
    rule: str | None = None
    rule_source: str | None = None
    duration_ms: float = 0.0
    arguments_sha256: str | None = None
    via: str = "exec"  # the front door: exec, or serve
    remote: str | None = None  # serve over HTTP: the address of a refused request
    repeated: int | None = None  # refused requests from `remote` not recorded one by one
    # SPEC 10: the deciding rule's argument condition, and the conditions of grants this call
    # did not meet (which rule, which part; never an argument's value)
    rule_condition: str | None = None
    conditions_failed: list[str] | None = None
    # One allowed call has two records with this id: `pending` when it is let through, then its
    # outcome; a `pending` alone is a call whose process died while the server may have acted.
    call: str | None = None
    # SPEC 11: the approval request a step of an out-of-band approval concerns, and who decided
    approval: str | None = None
    approver: str | None = None
    approver_sub: str | None = None  # SPEC 17: the approver's `sub`, when a token named them
    # SPEC 12: the subject of the verified token the call came with (`sub`), never the token
    subject: str | None = None
    # A call let through that never reached its server (`not-started`): why (#56)
    why: str | None = None
    # The agent is not listed under agents: policy.default decided, when no rule did (#56)
    unlisted: bool | None = None
    # The project whose policy decided (its folder): one user's log holds every project's (#56)
    project: str | None = None

    def as_json(self, prev: str | None = None) -> str:
        """The record as its line; `prev`: the digest of the line before it in the file (the
        hash chain, `link`), absent in the first line of a file."""
        data = {"timestamp": _timestamp(int(time.time())), **vars(self)}
        data["duration_ms"] = round(self.duration_ms, 1)
        for optional in _OPTIONAL:
            if data[optional] is None:
                del data[optional]
        if prev is not None:
            data["prev"] = prev
        return _encode(data)


# Every outcome a record can have (`bundlectl audit --outcome` takes only these).
OUTCOMES = (
    "ok",
    "tool-error",
    "pending",
    "not-started",
    "denied",
    "denied-by-user",
    "denied-by-approver",
    "invalid-call",
    "usage-error",
    "server-error",
    "timeout",
    "interrupted",
    "error",
    "over-limit",
    "asked",  # a round of a call that ended in its server's questions to the client (#58)
    "state-error",
    "unauthorized",
    "not-found",
    "approval-requested",
    "approval-used",
    "approval-withdrawn",
    "approval-refused",
    "approval-counted",
    "approved",
    "withheld",  # a tool's description withheld from a client (#60)
    "tool-changed",  # a changed tool held for a person (`pin_tools`, #60)
)


_OPTIONAL = (
    "remote",
    "repeated",
    "rule_condition",
    "conditions_failed",
    "call",
    "approval",
    "approver",
    "approver_sub",
    "subject",
    "why",
    "unlisted",
    "project",
)
_JSON = json.JSONEncoder(ensure_ascii=False).encode
# Characters that end a line for some readers (`str.splitlines`, JavaScript before ES2019, many
# log shippers): escaped, so one record is always one line whoever reads it.
_LINE_BREAKS = str.maketrans({"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"})


def _encode(data: Any) -> str:
    text = _JSON(data)
    return text.translate(_LINE_BREAKS) if not text.isascii() else text


@functools.lru_cache(maxsize=1)
def _timestamp(second: int) -> str:
    """A record's time (UTC, to the second), formatted once per second (a gateway records a
    call every millisecond or so)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(second))


def log_path(configured: str | None = None) -> Path:
    """The audit log file: $BUNDLECTL_AUDIT_LOG, the user config's `audit.path`, or the default."""
    return paths.audit_log_file(configured)


def lines(path: Path) -> Iterator[bytes]:
    """A log's lines (without their line break), read as a stream: a log of gigabytes is never
    held in memory."""
    with path.open("rb") as handle:
        for line in handle:
            yield line.rstrip(b"\n")


_DECODE = json.JSONDecoder().decode
_PENDING = b'"outcome": "pending"'  # the key and value as written (a value's quotes are escaped)


def records(
    source: Iterable[bytes], *, pending: bool = True
) -> Iterator[tuple[int, dict[str, Any] | None]]:
    """Each call record of a log's lines with its line number (None: not a JSON record); a
    rotation's start record is no call. `pending`: with the records of calls let through and
    not yet ended, else without even parsing them."""
    for number, line in enumerate(source, start=1):
        if not pending and _PENDING in line:
            continue
        try:
            record = _DECODE(line.decode("utf-8"))
        except ValueError:  # UnicodeDecodeError is one too
            yield number, None
            continue
        if isinstance(record, dict) and "event" not in record:
            yield number, record


TAIL = 1 << 16  # bytes read back from the end of the log to find its last line


def _last_line(fd: int, size: int) -> bytes | None:
    """The last complete line of the file open on `fd` (`size` bytes long), or None."""
    if size == 0:
        return None
    start = max(0, size - TAIL)
    data = os.pread(fd, size - start, start)
    lines = data.rstrip(b"\n").rsplit(b"\n", 1)
    if len(lines) == 1 and start > 0:  # one line longer than TAIL: read it whole
        data = os.pread(fd, size, 0)
        lines = data.rstrip(b"\n").rsplit(b"\n", 1)
    return lines[-1]


class AuditFile:
    """The audit log opened once for appending (a gateway writes a record per call): each
    record is one `write` on an O_APPEND descriptor, under an exclusive `flock` where the
    platform has one (elsewhere a lock file), so records of concurrent writers never mix.
    A log that was moved away (rotated) or deleted is opened again.

    Tamper-evident (`bundlectl audit verify`): each record carries in `prev` the sha256 of the
    line before it, read under the same lock — from what this writer wrote last when the file
    has not grown since, else from the file's last line (another process appended) — so a
    record changed, removed or inserted breaks the chain at the next one."""

    def __init__(self, target: Path, *, max_bytes: int = 100 << 20, keep: int = 5) -> None:
        self.target, self.max_bytes, self.keep = target, max_bytes, keep
        self._fd: int | None = None
        self._file_id = (0, 0)  # (device, inode) of the file `_fd` is open on
        self._end = -1  # the file's size after our last write
        self._last: str | None = None  # the link of the line we wrote last
        self._retired: int | None = None  # the descriptor of the file a rotation replaced
        self.written = b""  # the line of the last record written
        self.sealer = Sealer(target)  # the log's forward-secure sealing, when it has one

    @classmethod
    def configured(cls) -> AuditFile:
        """The log the user config names (`audit.path`, `max_mb`, `keep`), or the default."""
        settings = userconfig.load().audit
        target = log_path(settings.path)
        return cls(target, max_bytes=int(settings.max_mb * (1 << 20)), keep=settings.keep)

    def _open(self, *, again: bool = False) -> int:
        """The file the log's path names, opened once and kept; `again`: it is not the one we
        hold any more (rotated or removed), so open it anew. (`write` checks that under the
        lock, so the kept file is not checked here as well.)"""
        if self._fd is not None and not again:
            return self._fd
        if self._fd is not None:
            self.close()
        self.target.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.target, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        self._end, self._last = -1, None
        opened = os.fstat(self._fd)
        self._file_id = (opened.st_dev, opened.st_ino)
        return self._fd

    def write(self, record: AuditRecord) -> None:
        """Append `record`, chained (the line written is `self.written`), after the seal of
        the epoch that ended, when the log is sealed and one is due."""
        self._locked(lambda fd: self._chained(fd, record))

    def seal(self) -> bool:
        """Seal the log now (`bundlectl audit seal`): False when it is not sealed."""
        done: list[bool] = []
        self._locked(lambda fd: done.append(self._sealed(fd, time.time(), force=True)))
        return done[0]

    def _locked(self, action: Callable[[int], None]) -> None:
        """`action` on the log's descriptor under its lock, on the file its path names."""
        fd = self._open()
        if fcntl is None:  # Windows: a lock file
            from filelock import FileLock

            with FileLock(str(self.target) + ".lock", timeout=30):
                if not self._current(fd):  # rotated (or removed) since we opened it
                    fd = self._open(again=True)
                action(fd)
            if self._retired is not None:
                os.close(self._retired)
                self._retired = None
            return
        while True:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                if self._current(fd):  # not rotated away while we waited for the lock
                    action(fd)
                    return
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
                if self._retired is not None:  # this write rotated the log
                    os.close(self._retired)
                    self._retired = None
            fd = self._open(again=True)  # rotated (or removed) meanwhile: write to the new one

    def _current(self, fd: int) -> bool:
        """Whether `fd` is still the file the log's path names (false: rotated meanwhile)."""
        try:
            now = os.stat(self.target)
        except OSError:
            return False
        return (now.st_dev, now.st_ino) == self._file_id

    def _tail(self, fd: int) -> int:
        """The file's size, with `_last` the link of its last line (under the lock)."""
        size = os.fstat(fd).st_size
        if size != self._end:  # someone else wrote since (or we just opened it)
            last = _last_line(fd, size)
            self._last = link(last) if last is not None else None
        return size

    def _sealed(self, fd: int, now: float, *, force: bool = False) -> bool:
        """Append the seal of the current epoch when its interval is over (`force`: now),
        then evolve the key (`auditseal`); False: the log is not sealed, or no seal is due."""
        state = self.sealer.current() if force else self.sealer.due(now)
        if state is None:
            return False
        size = self._tail(fd)
        line = self.sealer.seal_line(state, self._last, _timestamp(int(now)))
        os.write(fd, line)
        self._end, self._last = size + len(line), link(line)
        self.sealer.advance(state, now)
        return True

    def _chained(self, fd: int, record: AuditRecord) -> None:
        """Write `record` linked to the file's last line (under the lock); a record that would
        take the file past `max_bytes` goes to a new file instead (`_rotated`)."""
        self._sealed(fd, time.time())
        size = self._tail(fd)
        line = (record.as_json(self._last) + "\n").encode("utf-8")
        if size and size + len(line) > self.max_bytes:
            self._rotated(record)
            return
        os.write(fd, line)
        self.written = line
        self._end, self._last = size + len(line), link(line)

    def _rotated(self, record: AuditRecord) -> None:
        """Under the old file's lock: a new file whose first record links to the old file's
        last line, then `record`, made whole beside the log and put in its place at once
        (writers waiting for the lock find the path renamed and reopen it); the old file
        becomes `NAME.1`, earlier ones shift up, the oldest beyond `keep` is removed."""
        name = self.target.name
        start = {
            "event": "log-start",
            "timestamp": _timestamp(int(time.time())),
            "rotated_from": f"{name}.1",
            "prev": self._last,
        }
        head = (_encode(start) + "\n").encode("utf-8")
        line = (record.as_json(link(head)) + "\n").encode("utf-8")
        self.written = line
        fresh = self.target.with_name(f".{name}.{secrets.token_hex(4)}.new")
        fd = os.open(fresh, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, head + line)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            os.unlink(fresh)
            raise
        for number in range(self.keep, 0, -1):
            older = self.target.with_name(f"{name}.{number}")
            if number == self.keep:
                with contextlib.suppress(FileNotFoundError):
                    older.unlink()
                continue
            with contextlib.suppress(FileNotFoundError):
                older.rename(self.target.with_name(f"{name}.{number + 1}"))
        # The path names a file at every moment (a writer that finds none creates one, and
        # what it wrote there would be lost): the old file gets its second name first, then
        # the new one takes the path's place in one step.
        first = self.target.with_name(f"{name}.1")
        try:
            os.link(self.target, first)
        except OSError:  # a file system without hard links: the short gap cannot be avoided
            os.rename(self.target, first)
        os.replace(fresh, self.target)
        self._retired = self._fd  # closed by `write` once its lock is released
        self._fd = fd
        opened = os.fstat(fd)
        self._file_id = (opened.st_dev, opened.st_ino)
        self._end, self._last = len(head) + len(line), link(line)

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


def append(record: AuditRecord, target: Path) -> Path:
    """Append one record (see `AuditFile`)."""
    log = AuditFile(target)
    try:
        log.write(record)
    finally:
        log.close()
    return target
