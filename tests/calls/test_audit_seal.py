"""Forward-secure sealing of the audit log (#52 item 3): a hash chain anyone can recompute only
catches accidents; a sealed log's past epochs cannot be rewritten by someone who reads the
machine's current sealing key — `audit verify --key` finds it, whatever the rewrite."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bundlectl.calls import auditseal
from bundlectl.calls.auditchain import link
from bundlectl.calls.auditfile import AuditFile, AuditRecord
from tests.conftest import Run


def record(agent: str = "bot", outcome: str = "ok", decision: str = "allow") -> AuditRecord:
    return AuditRecord(
        agent=agent,
        server="deploy",
        tool="apply",
        decision=decision,
        lock_digest=None,
        policy_digest=None,
        outcome=outcome,
    )


@pytest.fixture
def sealed_log(tmp_path: Path, run: Run) -> tuple[Path, str]:
    """A log sealed through epochs 0 and 1, and one record after (not sealed yet); the
    verification key. Two writers share it, as `exec` beside `serve` do."""
    log = tmp_path / "audit.jsonl"
    initialised = run("audit", "seal", "--init", str(log))
    assert initialised.code == 0, initialised.err
    key = initialised.out.strip()
    assert key.startswith("bclseal1-") and "keep it away from this machine" in initialised.err
    state = auditseal.state_path(log)
    assert state.stat().st_mode & 0o777 == 0o600
    exec_, serve = AuditFile(log), AuditFile(log)
    exec_.write(record("ci-bot", "denied", "deny"))
    serve.write(record("deployer"))
    assert run("audit", "seal", str(log)).code == 0  # epoch 0 sealed; its key erased
    serve.write(record("deployer"))
    exec_.write(record("ci-bot", "denied", "deny"))
    assert serve.seal()  # epoch 1, by the other writer
    exec_.write(record("deployer"))
    exec_.close()
    serve.close()
    return log, key


def test_a_sealed_log_verifies_and_says_what_is_sealed(
    sealed_log: tuple[Path, str], run: Run, tmp_path: Path
) -> None:
    log, key = sealed_log
    checked = run("audit", "verify", "--key", key, str(log))
    assert checked.code == 0, checked.err
    assert "sealed through epoch 1" in checked.out and "2 seal(s) of epochs 0-1" in checked.out
    assert "1 record(s) after it are not sealed yet" in checked.out
    (tmp_path / "key.txt").write_text(key + "\n")
    from_file = run("audit", "verify", "--key", f"@{tmp_path / 'key.txt'}", "--format", "json")
    assert from_file.code == 2  # the default log: none here
    as_json = run("audit", "verify", "--key", f"@{tmp_path / 'key.txt'}", str(log), "--format",
                  "json")  # fmt: skip
    sealed = json.loads(as_json.out)["sealed"]
    assert sealed["sealed_through_epoch"] == 1 and sealed["unsealed_records"] == 1
    wrong = run("audit", "verify", "--key", "bclseal1-" + "0" * 64, str(log))
    assert wrong.code == 1 and "made with another key" in wrong.err
    assert run("audit", "verify", "--key", "nonsense", str(log)).code == 2
    plain = run("audit", "verify", str(log))
    assert plain.code == 0 and "a log rewritten with its chain recomputed passes" in plain.err
    again = run("audit", "seal", "--init", str(log))
    assert again.code == 2 and "is sealed already" in again.err


def _attacker(log: Path) -> tuple[bytes, int, str]:
    """What a person who reads the machine's files has: the current key, its epoch."""
    state = json.loads(auditseal.state_path(log).read_text())
    return bytes.fromhex(state["key"]), int(state["epoch"]), str(state["key_id"])


Records = list[dict[str, Any]]
Edit = Callable[[Records, int, str], Records]


def _rewrite(log: Path, edit: Edit) -> None:
    """`edit` the records, then recompute every `prev` and re-seal each seal whose records
    changed with the keys the attacker can derive (the current one and later ones), keeping
    the others: the best a rewrite can do."""
    key, epoch, ident = _attacker(log)
    records = edit([json.loads(line) for line in log.read_text().splitlines()], epoch, ident)
    out: list[str] = []
    for data in records:
        before = data.get("prev")
        if out:
            data["prev"] = link(out[-1].encode())
        if data.get("event") == "seal" and data.get("prev") != before:  # what it covers changed
            usable = key
            for _ in range(max(0, data["epoch"] - epoch)):
                usable = auditseal.evolve(usable)
            data["seal"] = auditseal.mac(
                usable, ident, data["epoch"], data["timestamp"], data.get("prev", "")
            )
        out.append(json.dumps(data, ensure_ascii=False))
    log.write_text("\n".join(out) + "\n")


def _denied_to_ok(records: Records, epoch: int, ident: str) -> Records:
    records[0].update(outcome="ok", decision="allow", agent="deployer")
    return records


def _removed(records: Records, epoch: int, ident: str) -> Records:
    return [r for i, r in enumerate(records) if i != 3]  # a record of epoch 1


def _inserted(records: Records, epoch: int, ident: str) -> Records:
    return [*records[:1], {**records[1], "agent": "ghost"}, *records[1:]]


def _seals_replaced(records: Records, epoch: int, ident: str) -> Records:
    """Every seal removed, the history rewritten, one seal of the attacker's epoch added."""
    kept = [r for r in _denied_to_ok(records, epoch, ident) if r.get("event") != "seal"]
    seal = {"event": "seal", "timestamp": kept[-1]["timestamp"], "epoch": epoch,
            "key_id": ident, "seal": ""}  # fmt: skip
    return [*kept, seal]


@pytest.mark.parametrize(
    ("rewrite", "said"),
    [
        (_denied_to_ok, ":3: the record is the seal of epoch 0, and it does not match"),
        (_removed, ":5: the record is the seal of epoch 1, and it does not match"),
        (_inserted, ":4: the record is the seal of epoch 0, and it does not match"),
        (_seals_replaced, "the seals of epochs 0-1 are missing"),
    ],
)
def test_whoever_reads_the_current_key_cannot_rewrite_a_sealed_epoch(
    sealed_log: tuple[Path, str],
    run: Run,
    rewrite: Edit,
    said: str,
) -> None:
    log, key = sealed_log
    _rewrite(log, rewrite)
    assert run("audit", "verify", str(log)).code == 0  # the chain alone cannot tell
    checked = run("audit", "verify", "--key", key, str(log))
    assert checked.code == 1, checked.out
    assert said in checked.err


def test_a_cut_tail_shows_as_an_older_seal_and_its_records_as_unsealed(
    sealed_log: tuple[Path, str], run: Run
) -> None:
    log, key = sealed_log
    lines = log.read_text().splitlines()
    log.write_text("\n".join(lines[:5]) + "\n")  # the seal of epoch 1 and what follows cut
    checked = run("audit", "verify", "--key", key, str(log))
    assert checked.code == 0
    assert "sealed through epoch 0" in checked.out
    assert "2 record(s) after it are not sealed yet" in checked.out


def test_writers_seal_once_an_epoch_is_over_across_a_rotation(tmp_path: Path, run: Run) -> None:
    log = tmp_path / "audit.jsonl"
    key = run("audit", "seal", "--init", "--every", "1s", str(log)).out.strip()
    writer = AuditFile(log, max_bytes=1500)  # a rotation every few records
    began = time.monotonic()
    for number in range(12):
        writer.write(record(f"a{number}"))
        if number in (3, 8):
            time.sleep(max(0.0, 1.05 - (time.monotonic() - began)))  # the epoch ends
            began = time.monotonic()
    writer.close()
    assert log.with_name("audit.jsonl.1").exists()
    checked = run("audit", "verify", "--key", key, str(log))
    assert checked.code == 0, checked.err
    assert "2 seal(s) of epochs 0-1" in checked.out
    assert run("audit", "seal", "--every", "1s", str(log)).code == 2  # --every needs --init
    assert run("audit", "seal", "--init", "--every", "1 hour", str(tmp_path / "x")).code == 2


def test_a_log_that_is_not_sealed_says_how_to_seal_it(tmp_path: Path, run: Run) -> None:
    log = tmp_path / "audit.jsonl"
    AuditFile(log).write(record())
    refused = run("audit", "seal", str(log))
    assert refused.code == 2 and "bundlectl audit seal --init" in refused.err
    plain = run("audit", "verify", str(log))
    assert "Seal the log (`bundlectl audit seal --init`)" in plain.err


def test_a_damaged_sealing_key_is_a_warning_for_writers_and_an_error_for_seal(
    tmp_path: Path, run: Run, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "audit.jsonl"
    assert run("audit", "seal", "--init", str(log)).code == 0
    auditseal.state_path(log).write_text("{not json")
    writer = AuditFile(log)
    writer.write(record())  # the record is written, chained, unsealed
    writer.close()
    assert "warning: the audit log is not sealed" in capsys.readouterr().err
    assert len(log.read_text().splitlines()) == 1
    damaged = run("audit", "seal", str(log))
    assert damaged.code == 2 and "is not an audit sealing key" in damaged.err


def test_a_writer_running_when_the_log_is_sealed_seals_what_it_wrote_meanwhile(
    tmp_path: Path, run: Run
) -> None:
    """A gateway that writes while `audit seal --init` runs elsewhere looks for the key once a
    second, not at every record (a stat each): its first seal seals the chain behind it, the
    records it wrote before it saw the key included."""
    log = tmp_path / "audit.jsonl"
    writer = AuditFile(log)
    writer.write(record("before"))  # no key yet
    key = run("audit", "seal", "--init", "--every", "1s", str(log)).out.strip()
    writer.write(record("meanwhile"))  # within the second: the writer has not looked again
    time.sleep(1.1)
    writer.write(record("after"))  # it looks: the epoch is over, sealed before this record
    writer.close()
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    kinds = [line.get("event") or line["agent"] for line in lines]
    assert kinds == ["before", "meanwhile", "seal", "after"]
    checked = run("audit", "verify", "--key", key, str(log))
    assert checked.code == 0, checked.err
    assert "sealed through epoch 0" in checked.out
    assert "1 record(s) after it are not sealed yet" in checked.out
