"""The audit log people can trust and query (issue 41): each record links to the one before it
(a hash chain that concurrent writers keep whole), `bundlectl audit verify` names the first
broken record by line, and `bundlectl audit` / `audit summary` filter and sum it up."""

from __future__ import annotations

import itertools
import json
import threading
from pathlib import Path

import pytest

from bundlectl.calls.auditchain import link
from bundlectl.calls.auditfile import AuditFile, AuditRecord
from tests.conftest import Run, write


def record(agent: str = "bot", tool: str = "read_file", outcome: str = "ok") -> AuditRecord:
    return AuditRecord(
        agent=agent,
        server="files",
        tool=tool,
        decision="allow",
        lock_digest=None,
        policy_digest=None,
        outcome=outcome,
        duration_ms=12.5,
    )


def test_writers_that_share_the_log_keep_one_unbroken_chain(tmp_path: Path, run: Run) -> None:
    log = tmp_path / "audit.jsonl"
    start = threading.Barrier(4)

    def writer(name: str) -> None:
        mine = AuditFile(log)  # its own descriptor and lock, as another process has
        start.wait()
        for _ in range(50):
            mine.write(record(agent=name))
        mine.close()

    threads = [threading.Thread(target=writer, args=(f"w{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    lines = log.read_bytes().rstrip(b"\n").split(b"\n")
    assert len(lines) == 200
    assert "prev" not in json.loads(lines[0])
    assert all(json.loads(lines[i])["prev"] == link(lines[i - 1]) for i in range(1, 200))
    checked = run("audit", "verify", str(log))
    assert checked.code == 0 and "200 record(s), each linked to the one before it" in checked.out


def test_a_log_rotated_by_size_under_concurrent_writers_loses_no_record(
    tmp_path: Path, run: Run
) -> None:
    """#41: past `max_bytes` the log becomes `NAME.1` (earlier ones shift up, `keep` of them)
    and the new one starts with a record that links to the old one's last line; four writers
    at once lose nothing and every file verifies, the chain running across them."""
    log = tmp_path / "audit.jsonl"
    start = threading.Barrier(4)

    def writer(name: str) -> None:
        mine = AuditFile(log, max_bytes=6000, keep=50)  # its own descriptor, as a process has
        start.wait()
        for number in range(60):
            mine.write(record(agent=name, tool=f"t{number}"))
        mine.close()

    threads = [threading.Thread(target=writer, args=(f"w{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    rotated = log.parent.glob("audit.jsonl.*")
    files = [log, *sorted(rotated, key=lambda p: int(p.name.rsplit(".", 1)[1]))]
    assert len(files) > 3 and all(f.stat().st_size <= 6000 for f in files)
    records = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    calls = sorted((r["agent"], r["tool"]) for r in records if "event" not in r)
    assert calls == sorted((f"w{i}", f"t{n}") for i in range(4) for n in range(60))
    for newer, older in itertools.pairwise(files):
        head = json.loads(newer.read_text().splitlines()[0])
        assert head["event"] == "log-start" and head["rotated_from"] == f"{log.name}.1"
        assert head["prev"] == link(older.read_bytes().rstrip(b"\n").rsplit(b"\n", 1)[-1])
    for f in files[:-1]:  # the oldest kept file starts the chain; the others continue one
        checked = run("audit", "verify", str(f))
        assert checked.code == 0, checked.err
    # A rotated file replaced by another breaks the link into it; `keep` bounds the files.
    files[1].write_text(files[2].read_text())
    broken = run("audit", "verify", str(log))
    assert broken.code == 1 and "does not link to the last record of audit.jsonl.1" in broken.err
    few = AuditFile(tmp_path / "small.jsonl", max_bytes=400, keep=2)
    for number in range(20):
        few.write(record(tool=f"t{number}"))
    few.close()
    assert sorted(p.name for p in tmp_path.glob("small.jsonl*")) == [
        "small.jsonl",
        "small.jsonl.1",
        "small.jsonl.2",
    ]


def test_the_log_path_names_a_file_at_every_moment_of_a_rotation(tmp_path: Path) -> None:
    """A writer that found the path empty mid-rotation created a file there, and the rotation
    then put its new file over it: what the writer had written was lost (CI lost 33 records of
    the test above). One thread rotates the log some 150 times while another looks at the
    path as fast as it can."""
    log = tmp_path / "audit.jsonl"
    writer = AuditFile(log, max_bytes=600, keep=3)
    writer.write(record(tool="first"))
    done = threading.Event()
    looks: list[bool] = []

    def look() -> None:
        while not done.is_set():
            looks.append(log.exists())

    watcher = threading.Thread(target=look)
    watcher.start()
    for number in range(300):
        writer.write(record(tool=f"t{number}"))
    done.set()
    watcher.join()
    writer.close()
    assert len(list(tmp_path.glob("audit.jsonl.*"))) == 3 and looks
    assert looks.count(False) == 0, f"the path named no file {looks.count(False)} times"


def test_a_writer_whose_log_was_removed_or_replaced_writes_to_the_new_one(tmp_path: Path) -> None:
    """A log removed (or moved away by a rotation of another writer) while a gateway holds it
    open: the next record goes to a file at the log's path, not into the removed one."""
    log = tmp_path / "audit.jsonl"
    writer = AuditFile(log)
    writer.write(record(tool="first"))
    log.unlink()
    writer.write(record(tool="second"))
    log.rename(tmp_path / "moved.jsonl")
    log.write_text("")
    writer.write(record(tool="third"))
    writer.close()
    assert [json.loads(line)["tool"] for line in log.read_text().splitlines()] == ["third"]
    moved = (tmp_path / "moved.jsonl").read_text().splitlines()
    assert [json.loads(line)["tool"] for line in moved] == ["second"]


def test_records_go_to_the_sinks_the_user_config_names(
    project: Path, run: Run, isolated_home: Path
) -> None:
    """#41: `audit.sinks` — stdout/stderr as JSON lines (a container's collector), beside the
    file or instead of it; `serve` over stdio refuses stdout, its MCP channel."""
    import subprocess
    import sys

    write(project / "bundlectl.yaml", "version: 1\nbundles: [basic]\npolicy: {default: allow}\n")
    (project / "hello.txt").write_text("hi\n")
    config = isolated_home / "config" / "config.yaml"
    log = isolated_home / "state" / "audit.jsonl"

    def exec_() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "bundlectl", "exec", "files.read_file", "path=hello.txt"],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    write(config, "audit: {sinks: [file, stderr]}\n")
    done = exec_()
    assert done.returncode == 0, done.stderr
    streamed = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    filed = log.read_text().splitlines()
    assert [r["outcome"] for r in streamed] == ["pending", "ok"]
    assert [json.loads(line) for line in filed] == streamed  # the same lines, chain included
    write(config, "audit: {sinks: [stdout]}\n")
    done = exec_()
    shown = done.stdout.splitlines()  # the record of the call let through, the result, its end
    assert shown[1] == "hi" and [json.loads(shown[i])["outcome"] for i in (0, 2)] == [
        "pending",
        "ok",
    ]
    assert len(log.read_text().splitlines()) == 2  # no file sink: nothing more in the file
    refused = run("serve")
    assert refused.code == 2 and "serve over stdio speaks MCP on stdout" in refused.err


def test_summary_draws_the_week_as_a_page(tmp_path: Path, run: Run) -> None:
    """#41: `audit summary --html FILE`: per agent a chart of its days (calls, denials, errors,
    held approvals), and the tools denied most with the rule that denied them; names escaped."""
    log = tmp_path / "audit.jsonl"
    rows = [
        ("2026-11-24", "<b>evil</b>", "ok", None),
        ("2026-11-24", "<b>evil</b>", "denied", "agents.x.deny: github.*"),
        ("2026-11-25", "<b>evil</b>", "approval-requested", None),
        ("2026-11-25", "<b>evil</b>", "over-limit", None),
        ("2026-11-25", "docs", "pending", None),
        ("2026-11-25", "docs", "tool-error", None),
    ]
    log.write_text(
        "".join(
            json.dumps(
                {"timestamp": f"{day}T10:00:00Z", "agent": agent, "server": "github",
                 "tool": "create_issue", "decision": "allow", "outcome": outcome, "rule": rule}
            ) + "\n"
            for day, agent, outcome, rule in rows
        )
    )  # fmt: skip
    page = tmp_path / "week.html"
    done = run("audit", "summary", "--file", str(log), "--html", str(page))
    assert done.code == 0, done.err
    text = page.read_text()
    assert text.count("<svg") == 2 and "<b>evil" not in text and "&lt;b&gt;evil" in text
    assert "1 ok · 1 denied · 1 over limit · 0 errors · 1 held" in text
    assert "0 ok · 0 denied · 0 over limit · 1 errors" in text
    assert "<td>agents.x.deny: github.*</td><td>1</td>" in text  # a quota is no denial
    assert "2026-11-24: 1 denied" in text  # each bar part says what it counts
    # One scale for every agent (#56): docs' one call is half as tall as evil's days of two,
    # and a quota's refusal has a colour of its own.
    assert 'height="60" fill="#b7791f"><title>2026-11-25: 1 errors' in text
    assert 'fill="#0e7490"><title>2026-11-25: 1 over limit' in text


def _log(tmp_path: Path, count: int = 6) -> tuple[Path, list[str]]:
    log = tmp_path / "audit.jsonl"
    writer = AuditFile(log)
    for number in range(count):
        writer.write(record(outcome="ok" if number % 2 else "pending"))
    writer.close()
    return log, log.read_text().splitlines()


@pytest.mark.parametrize(
    ("change", "line", "said"),
    [
        ("edit", 4, "does not link to line 3"),
        ("remove", 3, "does not link to line 2"),
        ("insert", 4, "does not link to line 3"),
        ("head", 1, "links to a record before it, and there is none"),
        ("strip", 2, "no record carries a chain"),
        ("cut", 6, "is not a JSON record"),
        ("unlink", 5, "has no `prev`: the chain ends here"),
    ],
)
def test_verify_names_the_first_broken_record(
    tmp_path: Path, run: Run, change: str, line: int, said: str
) -> None:
    log, lines = _log(tmp_path)
    if change == "edit":
        lines[2] = lines[2].replace('"ok"', '"denied"').replace('"pending"', '"denied"')
    elif change == "remove":
        del lines[2]
    elif change == "insert":
        lines.insert(3, lines[1])
    elif change == "head":
        del lines[0]
    elif change == "strip":
        lines = [json.dumps({k: v for k, v in json.loads(x).items() if k != "prev"}) for x in lines]
    elif change == "cut":
        lines[-1] = lines[-1][: len(lines[-1]) // 2]
    elif change == "unlink":
        data = json.loads(lines[4])
        del data["prev"]
        lines[4] = json.dumps(data)
    write(log, "\n".join(lines) + "\n")
    broken = run("audit", "verify", str(log))
    assert broken.code == 1
    assert f"audit.jsonl:{line}: the record {said}" in broken.err
    machine = json.loads(run("audit", "verify", str(log), "--format", "json").out)
    assert machine["broken_at"] == line


def test_a_log_from_before_the_chain_verifies_from_where_it_starts(
    tmp_path: Path, run: Run
) -> None:
    log = tmp_path / "audit.jsonl"
    old = [json.dumps({"agent": "bot", "outcome": "ok", "n": n}) for n in range(3)]
    log.write_text("\n".join(old) + "\n")
    writer = AuditFile(log)
    writer.write(record())
    writer.write(record())
    writer.close()
    checked = run("audit", "verify", str(log))
    assert checked.code == 0, checked.err
    assert "the first 3 were written before records were chained" in checked.err
    moved = tmp_path / "audit.jsonl.1"
    log.rename(moved)  # rotated by another tool: the next record starts a new file and chain
    writer = AuditFile(log)
    writer.write(record())
    writer.close()
    assert run("audit", "verify", str(log)).code == 0
    assert run("audit", "verify", str(moved)).code == 0


def test_records_are_filtered_and_summed_up(tmp_path: Path, run: Run) -> None:
    log = tmp_path / "audit.jsonl"
    writer = AuditFile(log)
    for agent, tool, outcome in [
        ("bot", "read_file", "pending"),
        ("bot", "read_file", "ok"),
        ("bot", "write_file", "denied"),
        ("ci", "read_file", "pending"),
        ("ci", "read_file", "tool-error"),
    ]:
        writer.write(record(agent, tool, outcome))
    writer.close()
    picked = run("audit", "--file", str(log), "--agent", "bot", "--format", "json")
    assert [r["outcome"] for r in json.loads(picked.out)["records"]] == ["pending", "ok", "denied"]
    by_tool = run("audit", "--file", str(log), "--tool", "files.write_*", "--format", "csv")
    header, only = by_tool.lines
    assert header == "timestamp,agent,server,tool,decision,outcome,duration_ms,via"
    assert only.split(",")[1:7] == ["bot", "files", "write_file", "allow", "denied", "12.5"]
    failed = run("audit", "--file", str(log), "--outcome", "denied,tool-error", "--since", "1h")
    assert [line.split()[1] for line in failed.lines[1:]] == ["bot", "ci"]
    assert "no records match" in run("audit", "--file", str(log), "--agent", "nobody").out
    bad = run("audit", "--file", str(log), "--since", "yesterday")
    assert bad.code == 2 and "not a duration" in bad.err
    summed = json.loads(run("audit", "summary", "--file", str(log), "--format", "json").out)
    rows = {(r["agent"], r["tool"]): r for r in summed["summary"]}
    assert (
        rows[("bot", "files.read_file")]["ok"],
        rows[("bot", "files.write_file")]["denied"],
    ) == (
        1,
        1,
    )
    assert rows[("ci", "files.read_file")]["failed"] == 1
    assert rows[("bot", "files.read_file")]["median_ms"] == 12.5
    missing = run("audit", "verify", str(tmp_path / "nothing.jsonl"))
    assert missing.code == 2 and "no audit log at" in missing.err
