"""Forward-secure sealing of the audit log (#52 item 3), after systemd-journald's Forward Secure
Sealing: a log sealed here cannot be rewritten in a past epoch by anyone who later reads the
machine's key.

`bundlectl audit seal --init` draws a random key k0, keeps it as the sealing key of epoch 0 (a
0600 file in the user state folder, one per log) and prints it once as the verification key,
for the auditor to keep elsewhere. Writers append records as before (a hash chain: each record
carries the sha256 of the line before it). Once an epoch's interval has passed, the next writer
— under the log's lock, so every writer that shares the log (`exec` beside `serve`, across a
rotation) keeps one sealed chain — appends a seal record: the HMAC-SHA256, with that epoch's
key, of the link to the line before it. That link is the hash chain's: it covers every line
before it. Then the key evolves one way, k[n+1] = HMAC-SHA256(k[n], "evolve"), and the old one
is erased (the state file replaced).

`bundlectl audit verify --key K` derives every epoch's key from k0 and checks each seal; a
record changed, removed, inserted or re-chained in a sealed epoch breaks the seal that covers
it, and one who holds only the current key k[n] cannot make a seal of an earlier epoch: seals
must run through the epochs without a gap. Records after the last seal are reported as not
sealed yet (a cut tail shows as an older last seal).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import json
import os
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from bundlectl.calls.auditchain import link
from bundlectl.config import paths
from bundlectl.errors import UsageError
from bundlectl.output import err

KEY_PREFIX = "bclseal1-"
DEFAULT_INTERVAL = 15 * 60.0  # seconds an epoch lasts unless `--every` says otherwise
UNSEALED_RECHECK = 1.0  # seconds a writer of an unsealed log goes without looking for a key
_SEAL = b"bundlectl audit seal v1"
_EVOLVE = b"bundlectl audit key evolve v1"


def evolve(key: bytes) -> bytes:
    """The next epoch's key: one way, so the last cannot be found from it."""
    return hmac.digest(key, _EVOLVE, "sha256")


def key_id(first: bytes) -> str:
    """Which initialisation a seal belongs to (not secret: a digest of the first key)."""
    return hashlib.sha256(b"bundlectl audit key id\0" + first).hexdigest()[:16]


def mac(key: bytes, ident: str, epoch: int, timestamp: str, prev: str) -> str:
    """The seal of epoch `epoch` over the chain up to the line whose link is `prev`."""
    message = b"\0".join([_SEAL, ident.encode(), str(epoch).encode(), timestamp.encode()])
    return hmac.new(key, message + b"\0" + prev.encode(), "sha256").hexdigest()


def state_path(log: Path) -> Path:
    """Where the sealing key of the log at `log` is kept (0600, in the user state folder)."""
    where = hashlib.sha256(str(log.absolute()).encode()).hexdigest()[:16]
    return paths.state_dir() / "audit-seal" / f"{where}.json"


@dataclass
class SealState:
    """The sealing key of the current epoch and when the last seal was made."""

    ident: str
    epoch: int
    key: bytes
    interval: float
    sealed_at: float

    def encoded(self) -> bytes:
        data = {
            "format_version": 1,
            "key_id": self.ident,
            "epoch": self.epoch,
            "key": self.key.hex(),
            "interval": self.interval,
            "sealed_at": self.sealed_at,
        }
        return json.dumps(data).encode()

    @classmethod
    def decoded(cls, data: bytes, where: Path) -> SealState:
        """The state in a sealing key's file (UsageError: not one, or damaged)."""
        try:
            value = json.loads(data)
            return cls(
                str(value["key_id"]),
                int(value["epoch"]),
                bytes.fromhex(value["key"]),
                float(value["interval"]),
                float(value["sealed_at"]),
            )
        except (ValueError, KeyError, TypeError):
            raise UsageError(
                f"{paths.display_path(where)} is not an audit sealing key (damaged?)",
                hint="move it aside; `bundlectl audit seal --init` starts a new one (the log's "
                "later epochs are then sealed with a new verification key)",
            ) from None

    def evolved(self, now: float) -> SealState:
        return SealState(self.ident, self.epoch + 1, evolve(self.key), self.interval, now)


def _write_secret(path: Path, data: bytes) -> None:
    """`data` in place of `path` at once, readable by the user alone (0600 in a 0700 folder)."""
    import tempfile  # noqa: PLC0415 - once an epoch, not at every start

    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def initialise(log: Path, interval: float) -> str:
    """Start sealing the log at `log`: the verification key, to be printed once."""
    where = state_path(log)
    if where.exists():
        raise UsageError(
            f"the audit log {paths.display_path(log)} is sealed already "
            f"(key id {SealState.decoded(where.read_bytes(), where).ident})",
            hint="`bundlectl audit verify --key KEY` checks it with the key printed at --init",
        )
    first = secrets.token_bytes(32)
    _write_secret(where, SealState(key_id(first), 0, first, interval, time.time()).encoded())
    return KEY_PREFIX + first.hex()


def verification_key(text: str) -> bytes:
    """The first key, from the verification key as `--init` printed it."""
    body = text.strip().removeprefix(KEY_PREFIX)
    try:
        key = bytes.fromhex(body)
    except ValueError:
        key = b""
    if not text.strip().startswith(KEY_PREFIX) or len(key) != 32:
        raise UsageError(
            "--key is not a verification key",
            hint=f"give the key `bundlectl audit seal --init` printed ({KEY_PREFIX}...)",
        )
    return key


@dataclass
class Sealer:
    """A writer's view of its log's sealing state, consulted and advanced under the log's lock;
    its file is looked at only when that can matter (`due`), and read again only when it
    changed."""

    log: Path
    _stamp: tuple[int, int, int] | None = None
    _state: SealState | None = None
    _looked: float = -UNSEALED_RECHECK  # when the file was last looked at (time.monotonic)

    @functools.cached_property
    def path(self) -> Path:
        """Where its sealing key is kept (found once: a digest and the state folder)."""
        return state_path(self.log)

    def current(self) -> SealState | None:
        """The sealing state (None: the log is not sealed)."""
        self._looked = time.monotonic()
        try:
            info = os.stat(self.path)
        except OSError:
            self._stamp = self._state = None
            return None
        stamp = (info.st_ino, info.st_mtime_ns, info.st_size)
        if stamp != self._stamp:
            self._stamp = stamp
            try:
                self._state = SealState.decoded(self.path.read_bytes(), self.path)
            except (UsageError, OSError) as exc:  # the records go on, chained and unsealed
                err(f"warning: the audit log is not sealed: {getattr(exc, 'message', exc)}")
                self._state = None
        return self._state

    def due(self, now: float) -> SealState | None:
        """The state whose epoch has run its interval (a seal is due), else None.

        The file is looked at (a stat; each record took one) only when the epoch this writer
        knows is over — another writer may have sealed it and evolved the key meanwhile — and,
        for a log not sealed, once a second: records written before this writer sees an
        `audit seal --init` from elsewhere are sealed by its first seal all the same, which
        seals the chain up to it."""
        known = self._state
        if known is None and time.monotonic() - self._looked < UNSEALED_RECHECK:
            return None
        if known is not None and now - known.sealed_at < known.interval:
            return None
        state = self.current()
        if state is None or now - state.sealed_at < state.interval:
            return None
        return state

    def seal_line(self, state: SealState, prev: str | None, timestamp: str) -> bytes:
        """The seal record of `state`'s epoch after the line whose link is `prev`."""
        link = prev or ""
        record = {
            "event": "seal",
            "timestamp": timestamp,
            "epoch": state.epoch,
            "key_id": state.ident,
            "seal": mac(state.key, state.ident, state.epoch, timestamp, link),
        }
        if prev is not None:
            record["prev"] = prev
        return (json.dumps(record) + "\n").encode()

    def advance(self, state: SealState, now: float) -> None:
        """The next epoch: its key derived, the last one erased."""
        _write_secret(self.path, state.evolved(now).encoded())


@dataclass
class SealReport:
    """What `audit verify --key` found of the seals."""

    seals: int = 0
    last_epoch: int | None = None
    last_time: str | None = None
    last_line: int | None = None  # of the last good seal, in the stream of lines
    after: int = 0  # records after the last good seal: not sealed yet
    problem: tuple[int, str] | None = None  # the first bad seal: its line, and what is wrong
    first_epoch: int | None = None
    keys: dict[int, bytes] = field(default_factory=dict)


def _out_of_order(
    record: dict[str, object], last: int | None, ident: str, *, rotated: bool
) -> str | None:
    """Why a seal cannot follow the last one (of epoch `last`): another key, no epoch, an
    epoch sealed before, or epochs skipped (their seals removed)."""
    epoch = record.get("epoch")
    if record.get("key_id") != ident:
        return "is a seal made with another key (another --init)"
    if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
        return "is a seal without an epoch"
    if last is None:  # the first: epoch 0, unless earlier files were rotated away
        allowed = range(epoch, epoch + 1) if rotated else range(1)
    else:  # the same epoch again (a writer died before its key evolved), or the next
        allowed = range(last, last + 2)
    if epoch in allowed:
        return None
    if last is not None and epoch < last:
        return f"is a seal of epoch {epoch}, which was sealed before"
    gap = f"{0 if last is None else last + 1}-{epoch - 1}"
    return (
        f"is a seal of epoch {epoch}, and the seals of epochs {gap} are missing: the sealed "
        "records before it were removed or rewritten"
    )


def check_seals(lines: Iterable[bytes], first: bytes, *, rotated: bool) -> SealReport:
    """Check every seal in `lines` (the log's lines, oldest first, across rotations) with the
    keys derived from `first`. `rotated`: the stream begins with a rotation's start (earlier
    files are gone), so its first seal may be of a later epoch."""
    report = SealReport()
    ident = key_id(first)
    key, key_epoch = first, 0
    before: bytes | None = None
    for number, raw in enumerate(lines, start=1):
        line, before = before, raw
        if b'"event": "seal"' not in raw:
            if b'"event": "log-start"' not in raw:
                report.after += 1
            continue
        try:
            record = json.loads(raw)
        except ValueError:
            report.problem = (number, "is a seal that is not JSON")
            break
        epoch = record.get("epoch")
        why = _out_of_order(record, report.last_epoch, ident, rotated=rotated)
        if why is not None or not isinstance(epoch, int):
            report.problem = (number, why or "is a seal without an epoch")
            break
        while key_epoch < epoch:
            key, key_epoch = evolve(key), key_epoch + 1
        prev = record.get("prev")
        actual = link(line) if line is not None else None
        wanted = mac(key, ident, epoch, str(record.get("timestamp")), prev or "")
        if prev != actual or not hmac.compare_digest(str(record.get("seal")), wanted):
            report.problem = (
                number,
                f"is the seal of epoch {epoch}, and it does not match: a record it covers "
                "was changed, removed, inserted or re-chained",
            )
            break
        report.seals += 1
        report.first_epoch = epoch if report.first_epoch is None else report.first_epoch
        report.last_epoch, report.last_line = epoch, number
        report.last_time = str(record.get("timestamp"))
        report.after = 0
    return report
