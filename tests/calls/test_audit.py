"""The audit log: one JSON line per decision, digests instead of argument values, appended whole
by concurrent writers, and written again after the file was rotated away."""

from __future__ import annotations

import hmac
import json
import multiprocessing
from pathlib import Path

import pytest

from bundlectl.calls.audit import arguments_digest, keyed_sha256
from bundlectl.calls.auditfile import AuditFile, AuditRecord, append
from tests.conftest import TEST_SERVERS, Run, audit_records


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


def test_argument_digests_are_keyed_per_installation(isolated_home: Path) -> None:
    # An unsalted hash let a reader of the log confirm which of a few guessed e-mails a call
    # carried; without this installation's key, a guess cannot be checked.
    import hashlib
    import stat

    sent = {"to": "jane.doe@corp.example"}
    digest = arguments_digest(sent)
    assert digest is not None and digest.startswith("hmac-sha256:")
    for guess in ("jane.doe@corp.example", "john@corp.example"):
        blob = json.dumps({"to": guess}, sort_keys=True, separators=(",", ":")).encode()
        assert hashlib.sha256(blob).hexdigest() not in digest
    key_file = isolated_home / "state" / "audit.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600 and len(key_file.read_bytes()) == 32
    assert arguments_digest(sent) == digest  # the same key every time
    assert arguments_digest(sent, key=b"k" * 32) != digest  # another installation differs
    # it is HMAC-SHA256 itself, as an auditor's own tools compute it from the key
    blob = json.dumps(sent, sort_keys=True, separators=(",", ":")).encode()
    assert digest == "hmac-sha256:" + hmac.digest(key_file.read_bytes(), blob, "sha256").hex()


@pytest.mark.parametrize("length", [0, 1, 31, 32, 63, 64, 65, 200])
def test_the_keyed_digest_is_rfc_2104_hmac_for_every_key_length(length: int) -> None:
    key = bytes(range(length))
    for data in (b"", b"{}", "\u00e9\u2028".encode() * 100):
        assert keyed_sha256(key, data) == hmac.digest(key, data, "sha256")
        assert keyed_sha256(key, data) == hmac.digest(key, data, "sha256")  # its states kept


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


def test_a_record_is_one_line_for_every_reader(tmp_path: Path) -> None:
    """A raw U+2028 in a CLI argument split the file under `str.splitlines()`."""
    odd = "a\u2028b\u2029c\x85d\x1ce"
    log = append(record(agent=odd, tool=odd), tmp_path / "audit.jsonl")
    text = log.read_text()
    [line] = text.splitlines()
    assert "\u2028" not in text and "\x85" not in text
    assert json.loads(line)["agent"] == odd


def test_exec_with_line_separators_in_its_arguments_writes_whole_records(
    project: Path, run: Run, isolated_home: Path
) -> None:
    run("init")
    assert run("exec", "-a", "reader\u2028x", "files.read_file\u2029", "path=a").code == 3
    lines = (isolated_home / "state" / "audit.jsonl").read_text().splitlines()
    assert [json.loads(line)["agent"] for line in lines] == ["reader\u2028x"]


def test_a_killed_exec_leaves_the_pending_record_of_its_call(
    project: Path, isolated_home: Path
) -> None:
    """`kill -9` of exec during an allowed call left no record though the server had acted:
    the call is recorded as `pending` when it is let through, then completed by its outcome."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import write

    kitchen = TEST_SERVERS / "kitchen.py"
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          kitchen: {{command: {sys.executable}, args: ["{kitchen}"]}}
        agents:
          bot: {{allow: [kitchen.sleep, kitchen.echo]}}
        policy: {{default: deny}}
        """,
    )
    env = {**os.environ, "BUNDLECTL_HOME": str(isolated_home)}
    log = isolated_home / "state" / "audit.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "bundlectl", "exec", "-a", "bot", "kitchen.echo", "text=hi"],
        cwd=project,
        env=env,
        capture_output=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    pending, finished = (json.loads(line) for line in log.read_text().splitlines())
    assert (pending["outcome"], finished["outcome"]) == ("pending", "ok")
    assert pending["call"] == finished["call"] and pending["call"]
    argv = [sys.executable, "-m", "bundlectl", "exec", "-a", "bot", "kitchen.sleep", "seconds=20"]
    with subprocess.Popen(argv, cwd=project, env=env, stderr=subprocess.DEVNULL) as child:
        deadline = time.monotonic() + 60
        while len(log.read_text().splitlines()) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)  # polling the log for the call's record, up to a deadline
        os.kill(child.pid, signal.SIGKILL)
        child.wait(30)
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["tool"], r["outcome"]) for r in records] == [
        ("echo", "pending"),
        ("echo", "ok"),
        ("sleep", "pending"),
    ]


def test_a_call_that_never_reached_its_server_says_so_and_why(
    project: Path, run: Run, isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#56 item 1: an admitted call that failed before its server started (an unset variable
    of its launch) or could be reached left a lone `pending`, which means "the process died,
    the server may have acted". It records `not-started`, with why; a filter value that is no
    outcome is an error with a did-you-mean (#56 item 2)."""
    import socket

    from tests.conftest import audit_records, write

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.delenv("DEPLOY_TOKEN", raising=False)
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          deploy:
            command: python
            env: {{DEPLOY_TOKEN: "${{DEPLOY_TOKEN}}"}}
            tools: [{{name: apply}}]
          remote:
            transport: streamable-http
            url: http://127.0.0.1:{port}/mcp
            tools: [{{name: status}}]
        agents:
          ops: {{allow: [deploy.apply, remote.status]}}
        policy: {{default: deny}}
        """,
    )
    assert run("exec", "-a", "ops", "deploy.apply").code == 2
    assert run("exec", "-a", "ops", "remote.status", "--connect-timeout", "5").code == 5
    records = audit_records(isolated_home / "state" / "audit.jsonl")  # no call left open
    assert [(r["tool"], r["outcome"]) for r in records] == [
        ("apply", "not-started"),
        ("status", "not-started"),
    ]
    assert "needs the environment variable DEPLOY_TOKEN" in records[0]["why"]
    listed = run("audit", "--outcome", "not-started", "--format", "json")
    assert len(json.loads(listed.out)["records"]) == 2
    typo = run("audit", "--outcome", "deniedd")
    assert typo.code == 2 and "did you mean 'denied'?" in typo.err


def test_every_record_names_its_project_and_audit_filters_by_it(
    tmp_path: Path, run: Run, isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One user's log holds every project's records: each names its project's folder, and
    `audit --project` (`audit summary --project`) keeps one project's (#56)."""
    folders = [tmp_path / "shop", tmp_path / "blog"]
    for folder in folders:
        folder.mkdir()
        monkeypatch.chdir(folder)
        assert run("init").code == 0
        (folder / "hello.txt").write_text("hi\n")
        assert run("exec", "--agent", "reader", "files.read_file", "path=hello.txt").code == 0
        assert run("exec", "--agent", "reader", "files.write_file", "path=x", "content=y").code == 3
    every = json.loads(run("audit", "--format", "json").out)["records"]
    assert {r["project"] for r in every} == {str(f.resolve()) for f in folders}
    monkeypatch.chdir(folders[1])
    mine = json.loads(run("audit", "--project", ".", "--format", "json").out)["records"]
    assert [(r["tool"], r["outcome"]) for r in mine] == [
        ("read_file", "pending"), ("read_file", "ok"), ("write_file", "denied")
    ]  # fmt: skip
    assert {r["project"] for r in mine} == {str(folders[1].resolve())}
    summed = json.loads(run("audit", "summary", "--project", "../shop", "--format", "json").out)
    assert [(r["tool"], r["records"]) for r in summed["summary"]] == [
        ("files.read_file", 1), ("files.write_file", 1)
    ]  # fmt: skip


def test_a_lock_written_while_a_gateway_runs_is_named_by_its_next_record(
    tmp_path: Path, isolated_home: Path
) -> None:
    """A project without a lock: its records name none; `bundlectl lock` runs beside the
    long-lived writer, whose next record names the lock by its digest (the writer looks for a
    missing lock with access(2), not a failed stat, on every record)."""
    from bundlectl.calls.audit import AuditLog, lock_digest
    from bundlectl.config.project import load_project
    from bundlectl.resolve.resolved import resolve_project

    (tmp_path / "bundlectl.yaml").write_text("version: 1\nbundles: [basic]\n")
    resolution = resolve_project(load_project(tmp_path / "bundlectl.yaml"))
    log = AuditLog(resolution, via="serve")
    decision = resolution.policy.agent("reader").decide("files", "read_file", interactive=False)
    log.record(decision, "ok", 1.0, {})
    resolution.write_lock()
    log.record(decision, "ok", 1.0, {})
    named = [r["lock_digest"] for r in audit_records(isolated_home / "state" / "audit.jsonl")]
    assert named == [None, lock_digest(tmp_path / "bundlectl.lock")]
    assert named[1] is not None
