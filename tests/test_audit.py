"""The audit log: one JSON line per decision, digests instead of argument values, appended whole
by concurrent writers, and written again after the file was rotated away."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

from bundlectl.executor.audit import AuditFile, AuditRecord, append, arguments_digest


def record(**fields: object) -> AuditRecord:
    values: dict[str, object] = {
        "agent": "reader",
        "server": "files",
        "tool": "read_file",
        "decision": "allow",
        "lock_digest": None,
        "policy_digest": "sha256:" + "0" * 64,
        "outcome": "ok",
    }
    return AuditRecord(**{**values, **fields})  # type: ignore[arg-type]


def test_a_record_holds_a_digest_of_the_arguments_never_their_values(tmp_path: Path) -> None:
    secret = {"path": "README.md", "token": "hunter2-very-secret"}
    log = append(record(arguments_sha256=arguments_digest(secret)), tmp_path / "audit.jsonl")
    [line] = log.read_text().splitlines()
    data = json.loads(line)
    assert "hunter2" not in line and "README" not in line
    assert data["arguments_sha256"] == arguments_digest(dict(reversed(secret.items())))
    assert data["timestamp"].endswith("Z") and "remote" not in data and "repeated" not in data
    assert arguments_digest(None) is None


def _write_many(path: str, worker: int) -> None:
    log = AuditFile(Path(path))
    for i in range(200):
        log.write(record(tool=f"w{worker}-{i}", rule_source="x" * 3000))
    log.close()


def test_concurrent_writers_never_mix_records(tmp_path: Path) -> None:
    target = tmp_path / "audit.jsonl"
    workers = [
        multiprocessing.get_context("spawn").Process(target=_write_many, args=(str(target), n))
        for n in range(3)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    lines = target.read_text().splitlines()
    assert len(lines) == 600
    assert {json.loads(line)["tool"] for line in lines} == {
        f"w{n}-{i}" for n in range(3) for i in range(200)
    }


def test_a_rotated_log_is_written_again(tmp_path: Path) -> None:
    target = tmp_path / "audit.jsonl"
    log = AuditFile(target)
    log.write(record(tool="before"))
    target.rename(tmp_path / "audit.jsonl.1")  # logrotate moves it away
    log.write(record(tool="after"))
    log.close()
    assert json.loads(target.read_text())["tool"] == "after"
    assert json.loads((tmp_path / "audit.jsonl.1").read_text())["tool"] == "before"
