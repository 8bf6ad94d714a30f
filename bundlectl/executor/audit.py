"""The audit log: one JSON line per call decision. Never argument values, never a secret."""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bundlectl import paths


def arguments_digest(arguments: dict[str, Any] | None) -> str | None:
    if arguments is None:
        return None
    blob = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(blob.encode()).hexdigest()


def lock_digest(lock_path: Path) -> str | None:
    """The policy revision: sha256 of the lock file as it is on disk."""
    try:
        return "sha256:" + hashlib.sha256(lock_path.read_bytes()).hexdigest()
    except OSError:
        return None


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

    def as_json(self) -> str:
        data = {"timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **vars(self)}
        data["duration_ms"] = round(self.duration_ms, 1)
        if self.remote is None:
            del data["remote"]
        return json.dumps(data, ensure_ascii=False, sort_keys=False)


def log_path(configured: str | None = None) -> Path:
    """The audit log file: $BUNDLECTL_AUDIT_LOG, the user config's `audit.path`, or the default."""
    return paths.audit_log_file(configured)


def append(record: AuditRecord, target: Path) -> Path:
    """Append one line atomically with respect to other writers (O_APPEND + a file lock)."""
    from filelock import FileLock

    target.parent.mkdir(parents=True, exist_ok=True)
    line = (record.as_json() + "\n").encode("utf-8")
    with FileLock(str(target) + ".lock", timeout=30):
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    return target
