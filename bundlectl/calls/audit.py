"""The audit log: one JSON line per call decision, hash-chained (`auditfile`). Never argument
values, never a secret. `AuditLog` is the sink the call pipeline records through."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

from bundlectl import telemetry
from bundlectl.calls.auditfile import AuditFile, AuditRecord
from bundlectl.config import paths, userconfig
from bundlectl.output import err

if TYPE_CHECKING:  # the sink records what the pipeline decided, of which call
    from bundlectl.calls.calldata import ToolCall
    from bundlectl.policy.rules import Decision
    from bundlectl.resolve.resolved import Resolution

KEY_BYTES = 32


def installation_key(folder: Path | None = None) -> bytes:
    """This installation's audit key (`audit.key` in the user state folder, 0600, made once):
    argument digests are keyed with it, so a reader of the log cannot confirm a guess of what
    a call was sent (three candidate e-mails, one hash each) without the key."""
    key_file = (folder or paths.state_dir()) / "audit.key"
    cached = _KEYS.get(key_file)
    if cached is not None:
        return cached
    try:
        key = key_file.read_bytes()
    except FileNotFoundError:
        key_file.parent.mkdir(parents=True, exist_ok=True)
        fresh = secrets.token_bytes(KEY_BYTES)
        try:  # made whole under a temporary name, then linked: no reader sees a partial key
            temp = key_file.with_name(f".audit.key.{os.getpid()}.tmp")
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(fresh)
            try:
                os.link(temp, key_file)  # fails if another process made it first
            finally:
                os.unlink(temp)
        except FileExistsError:
            pass
        key = key_file.read_bytes()
    if len(key) < 16:
        raise OSError(f"{key_file} is not an audit key (remove it to make a new one)")
    _KEYS[key_file] = key
    return key


_KEYS: dict[Path, bytes] = {}


def arguments_digest(arguments: dict[str, Any] | None, key: bytes | None = None) -> str | None:
    """HMAC-SHA256 of the arguments as the agent sent them, keyed by `installation_key`."""
    if arguments is None:
        return None
    blob = _CANONICAL(arguments)
    # Text that is not Unicode is refused before a call is recorded (`unencodable`); should one
    # reach here anyway, its record is still written whole ("surrogatepass": its own bytes).
    data = blob.encode("utf-8", "surrogatepass")
    return "hmac-sha256:" + keyed_sha256(key or installation_key(), data).hex()


def keyed_sha256(key: bytes, data: bytes) -> bytes:
    """HMAC-SHA256 (RFC 2104) of `data`: `hmac.digest` with the key's padded hash states made
    once per key. OpenSSL 3 sets up an HMAC from scratch on every call (a provider look-up,
    ~40,000 instructions: a twentieth of a gateway's work per call); a copy of a hash state
    made once is a few hundred."""
    pads = _PADS.get(key)
    if pads is None:
        if len(_PADS) >= 8:  # one installation key, and a test's few
            _PADS.clear()
        block = (hashlib.sha256(key).digest() if len(key) > 64 else key).ljust(64, b"\0")
        pads = _PADS[key] = (
            hashlib.sha256(block.translate(_INNER)),
            hashlib.sha256(block.translate(_OUTER)),
        )
    inner, outer = pads[0].copy(), pads[1].copy()
    inner.update(data)
    outer.update(inner.digest())
    return outer.digest()


# The arguments as one text: keys sorted, no spaces (one encoder, not one per record).
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode
_INNER = bytes(b ^ 0x36 for b in range(256))
_OUTER = bytes(b ^ 0x5C for b in range(256))
_PADS: dict[bytes, tuple[Any, Any]] = {}


def lock_digest(lock_path: Path) -> str | None:
    """The policy revision: sha256 of the lock file as it is on disk."""
    try:
        return "sha256:" + hashlib.sha256(lock_path.read_bytes()).hexdigest()
    except OSError:
        return None


class AuditSink(Protocol):
    """Where the record of each decision and its outcome goes."""

    def record(
        self,
        decision: Decision,
        outcome: str,
        duration_ms: float,
        arguments: dict[str, Any] | None,
        *,
        call: ToolCall | None = None,
        why: str | None = None,
    ) -> None: ...

    def access(
        self, agent: str, server: str, method: str, key: dict[str, Any], outcome: str
    ) -> None:
        """A resource read or a prompt fetched (`method`: resources/read, prompts/get), with the
        keyed digest of what was asked for (`key`: the URI or the prompt's name and arguments)."""

    def unauthorized(self, remote: str, *, repeated: int | None = None) -> None:
        """A request to the gateway without a valid token (no agent, no tool); `repeated`:
        that many more from `remote`, counted instead of recorded one by one."""

    def withheld(self, agent: str, server: str, tool: str, why: str) -> None:
        """A tool whose description was withheld from the agent's client (#60)."""

    def approval(self, decision: Decision, step: str, approval: str, approver: str | None) -> None:
        """A step of an out-of-band approval (SPEC 11): `approval-requested`, `-used`,
        `-withdrawn` (an approver's decision is recorded by `bundlectl approvals`)."""

    def tool_changed(self, server: str, tool: str, approval: str | None, why: str) -> None:
        """A tool whose live definition differs from the reviewed one, held for a person
        (`pin_tools`, #60): once per definition and process."""

    def egress_denied(self, server: str, host: str) -> None:
        """A sandboxed server's connection to a host its `sandbox.network` does not list,
        refused by its egress proxy (the host alone: no path, no port, nothing sent)."""


# The stream sinks of `audit.sinks`: JSON lines for a container's log collector.
STREAMS = {"stdout": 1, "stderr": 2}


_NO_LOCK = ((-1, -1), None)  # `AuditLog._lock_digest` of a project without a lock file


@dataclass
class AuditLog:
    """The audit log file (SPEC 4.2): digests of the lock, the policy and the arguments; never
    argument values. A log that cannot be written is a warning, never a failed call."""

    resolution: Resolution
    via: str = "exec"
    _lock_digest: tuple[tuple[int, int], str | None] | None = None
    _file: AuditFile | None = None  # opened on the first record, kept open
    _streams: tuple[int, ...] | None = None  # stdout/stderr sinks (file descriptors)
    _otlp: bool = False  # the `otlp` sink: each record an OpenTelemetry log record too
    _key: bytes | None = None  # the installation's audit key, read on the first digest
    # one record at a time: a sandboxed server's egress proxy writes from a thread of its own
    _writing: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def _digest(self, arguments: dict[str, Any] | None) -> str | None:
        if arguments is None:
            return None
        if self._key is None:
            try:
                self._key = installation_key()
            except OSError as exc:
                err(f"warning: no audit key, so no argument digest: {exc}")
                return None
        return arguments_digest(arguments, self._key)

    def _digest_of_lock(self) -> str | None:
        """The lock's digest, hashed again only when the file changed (a gateway makes many
        calls)."""
        path = self.resolution.project.lock_path
        if self._lock_digest == _NO_LOCK and not os.access(path, os.F_OK):
            return None  # still none (access(2): a failed stat raises, which costs more)
        try:
            stat = os.stat(path)
            key = (stat.st_mtime_ns, stat.st_size)
        except OSError:
            self._lock_digest = _NO_LOCK
            return None
        if self._lock_digest is None or self._lock_digest[0] != key:
            self._lock_digest = (key, lock_digest(path))
        return self._lock_digest[1]

    def record(
        self,
        decision: Decision,
        outcome: str,
        duration_ms: float,
        arguments: dict[str, Any] | None,
        *,
        call: ToolCall | None = None,
        why: str | None = None,
    ) -> None:
        rule = decision.rule
        self._decided(
            decision,
            outcome=outcome,
            duration_ms=duration_ms,
            arguments_sha256=self._digest(arguments),
            rule_condition=rule.condition.describe() if rule and rule.condition else None,
            conditions_failed=list(decision.failed) or None,
            call=call.id if call is not None else None,
            subject=call.subject if call is not None else None,
            why=why[:300] if why else None,
        )

    def _decided(self, decision: Decision, **fields: Any) -> None:
        """A record about one decision: who, what, and the rule that decided."""
        rule = decision.rule
        self._append(
            decision.agent,
            decision.server,
            decision.tool,
            decision=decision.effect,
            rule=rule.pattern if rule else None,
            rule_source=str(rule.origin) if rule else None,
            unlisted=None if decision.listed else True,
            **fields,
        )

    def access(
        self, agent: str, server: str, method: str, key: dict[str, Any], outcome: str
    ) -> None:
        """A resource read, prompt get or listing: denied by the policy (`outcome` denied), or
        let through, whatever the server then did (ok, not-found, server-error, timeout)."""
        decision = "deny" if outcome == "denied" else "allow"
        self._append(
            agent,
            server,
            method,
            decision=decision,
            outcome=outcome,
            arguments_sha256=self._digest(key),
        )

    def withheld(self, agent: str, server: str, tool: str, why: str) -> None:
        """A tool whose description was withheld from the agent's client (#60)."""
        self._append(agent, server, tool, decision="allow", outcome="withheld", why=why[:300])

    def approval(self, decision: Decision, step: str, approval: str, approver: str | None) -> None:
        self._decided(decision, outcome=step, approval=approval, approver=approver)

    def tool_changed(self, server: str, tool: str, approval: str | None, why: str) -> None:
        self._append(
            "-", server, tool, decision="deny", outcome="tool-changed", approval=approval, why=why
        )

    def egress_denied(self, server: str, host: str) -> None:
        self._append("-", server, "-", decision="deny", outcome="egress-denied", remote=host)

    def unauthorized(self, remote: str, *, repeated: int | None = None) -> None:
        self._append(
            "-", "-", "-", decision="deny", outcome="unauthorized", remote=remote, repeated=repeated
        )

    def _append(self, agent: str, server: str, tool: str, **fields: Any) -> None:
        entry = AuditRecord(
            agent=agent,
            server=server,
            tool=tool,
            lock_digest=self._digest_of_lock(),
            # The policy that decided: the config as loaded now, whether or not the lock is fresh.
            policy_digest=self.resolution.lock.policy_digest,
            via=self.via,
            project=str(self.resolution.project.root),
            **fields,
        )
        with self._writing:
            self._write(entry)

    def _write(self, entry: AuditRecord) -> None:
        try:
            if self._streams is None:
                sinks = userconfig.load().audit.sinks
                self._streams = tuple(fd for name, fd in STREAMS.items() if name in sinks)
                self._otlp = "otlp" in sinks
                if "file" in sinks:
                    self._file = AuditFile.configured()
            if self._file is not None:
                self._file.write(entry)
                line = self._file.written  # the line as written, with its link in the chain
            else:
                line = (entry.as_json() + "\n").encode("utf-8")
            for fd in self._streams:
                os.write(fd, line)
            if self._otlp:
                telemetry.audit(json.loads(line))
        except OSError as exc:
            err(f"warning: could not write the audit log: {exc}")
