"""bundlectl exec against real servers: every exit code of SPEC 4.1 that exec can produce."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import bundlectl
from bundlectl.config import paths
from tests.conftest import TEST_SERVERS, Run, audit_records, load_yaml, write

PY = sys.executable


def kitchen_config(extra: str = "", policy: str = "allow") -> str:
    return f"""\
version: 1
bundles: [basic]
servers:
  kitchen:
    command: {PY}
    args: ["{TEST_SERVERS / "kitchen.py"}"]
    env: {{KITCHEN_STARTS: "${{KITCHEN_STARTS}}", GREETING: "${{GREETING:-hello}}",
          KITCHEN_LOG: "${{KITCHEN_LOG:-}}"}}
    timeout: 20
  crash: {{command: {PY}, args: ["{TEST_SERVERS / "misbehave.py"}", crash]}}
  hang:
    command: {PY}
    args: ["{TEST_SERVERS / "misbehave.py"}", hang]
    env: {{KITCHEN_STARTS: "${{KITCHEN_STARTS}}", HANG_LOG: "${{HANG_LOG:-}}"}}
  garbage: {{command: {PY}, args: ["{TEST_SERVERS / "misbehave.py"}", garbage]}}
  dying: {{command: {PY}, args: ["{TEST_SERVERS / "misbehave.py"}", exit-after-init]}}
  silent: {{command: {PY}, args: ["{TEST_SERVERS / "misbehave.py"}", silent-crash]}}
  spawn:
    command: {PY}
    args: ["{TEST_SERVERS / "misbehave.py"}", spawn-and-hang]
    env: {{KITCHEN_STARTS: "${{KITCHEN_STARTS}}"}}
  linger:
    command: {PY}
    args: ["{TEST_SERVERS / "misbehave.py"}", linger]
    env: {{KITCHEN_STARTS: "${{KITCHEN_STARTS}}"}}
  flood: {{command: {PY}, args: ["{TEST_SERVERS / "misbehave.py"}", flood]}}
  slow:
    command: {PY}
    args: ["{TEST_SERVERS / "misbehave.py"}", slow]
    env: {{KITCHEN_STARTS: "${{KITCHEN_STARTS}}"}}
  missing: {{command: no-such-binary-bundlectl-test}}
  off: {{command: {PY}, disabled: true}}
{extra}
agents:
  reader: {{allow: [files.read_file, files.list_directory, "kitchen.*"], deny: [kitchen.fail]}}
  writer: {{extends: [reader], ask: [files.write_file]}}
policy:
  default: {policy}
"""


@pytest.fixture
def starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "starts.txt"
    monkeypatch.setenv("KITCHEN_STARTS", str(path))
    return path


@pytest.fixture
def kitchen(project: Path, starts: Path) -> Path:
    write(project / "bundlectl.yaml", kitchen_config())
    (project / "hello.txt").write_text("hello\n")
    return project


def pids(starts: Path) -> list[int]:
    return [int(p) for p in starts.read_text().split()] if starts.exists() else []


def running(pid: int) -> bool:
    """Whether the process runs: an exited one that init has not reaped yet (a zombie of an
    orphan, which this machine's init reaps only now and then) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return not Path("/proc/self").exists()
    return stat[stat.rfind(b")") + 2 :][:1] not in (b"Z", b"X")


def gone(pid: int, within: float = 6.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not running(pid):
            return True
        time.sleep(0.05)
    return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def wait_for_port(port: int, within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listens on 127.0.0.1:{port}")


@contextlib.contextmanager
def listening(argv: list[str], env: dict[str, str] | None = None) -> Iterator[int]:
    """Run an HTTP server `argv + ["--port", PORT]` on a free loopback port until the block ends."""
    port = free_port()
    proc = subprocess.Popen(
        [*argv, "--port", str(port)],
        env={**os.environ, **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def remote_config(project: Path, name: str, port: int) -> None:
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          {name}: {{transport: streamable-http, url: "http://127.0.0.1:{port}/mcp"}}
        policy: {{default: allow}}
        """,
    )


def audit_lines(home: Path) -> list[dict[str, object]]:
    """The audit log's outcomes (each `pending` record checked against its outcome)."""
    path = home / "state" / "audit.jsonl"
    return audit_records(path) if path.exists() else []


# --- 0: success, over every transport ---------------------------------------------------------


def test_builtin_server_in_process(kitchen: Path, run: Run) -> None:
    result = run("exec", "--agent", "reader", "files.read_file", "path=hello.txt")
    assert (result.code, result.out) == (0, "hello\n")
    listing = run("exec", "-a", "reader", "files.list_directory")
    assert listing.lines == ["[FILE] bundlectl.yaml", "[FILE] hello.txt"]


def test_stdio_server_typed_arguments_and_env(
    kitchen: Path, run: Run, starts: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = run("exec", "-a", "reader", "kitchen.echo", "text=hi", "times=3", "loud=true")
    assert (result.code, result.out) == (0, "HI HI HI\n")
    tags = run("exec", "-a", "reader", "kitchen.tags", 'items=["a","b"]', 'meta={"k": 1}')
    assert tags.out == "a,b meta=['k']\n"
    structured = run("exec", "-a", "reader", "kitchen.add", "--args", '{"a": 2}', "b=40")
    assert json.loads(structured.out) == {"sum": 42}
    monkeypatch.setenv("UNRELATED_SECRET", "s3cr3t-value")
    keys = json.loads(run("exec", "-a", "reader", "kitchen.env_keys", "--format", "json").out)
    names = keys["result"]["structuredContent"]["result"]
    assert "UNRELATED_SECRET" not in names and "GREETING" in names and "PATH" in names
    for pid in pids(starts):
        assert gone(pid), "a server outlived its call"


def test_code_review_works_offline_without_uv(
    project: Path, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bundle's `uvx mcp-server-git==V` runs the same release from this environment."""
    import shutil

    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no uv, no uvx
    assert shutil.which("uvx") is None
    write(
        project / "bundlectl.yaml",
        "version: 1\nbundles: [code-review]\npolicy: {default: deny}\n",
    )
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    status = run("exec", "-a", "code-reviewer", "git.git_status", f"repo_path={project}")
    assert status.code == 0, status.err
    assert status.out.startswith("Repository status:")
    shown = run("show", "code-review")
    assert (
        "    needs: nothing more: mcp-server-git==2026.10.19 is installed beside bundlectl "
        "and runs offline" in shown.lines
    )


def test_the_git_extra_pins_the_release_the_bundle_runs() -> None:
    import tomllib

    from bundlectl.mcpio.launchers import pinned_uvx

    root = Path(__file__).resolve().parents[2]
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    manifest = load_yaml(root / "registry" / "code-review" / "1.0.0.yaml")
    git = manifest["servers"]["git"]
    pinned = pinned_uvx(git["command"], git["args"])
    assert pinned is not None
    assert extras["git"] == [f"{pinned.package}=={pinned.version}"]


def test_real_third_party_servers(project: Path, run: Run) -> None:
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          time: {{command: {PY}, args: [-m, mcp_server_time, --local-timezone, UTC]}}
          git: {{command: {PY}, args: [-m, mcp_server_git]}}
        policy: {{default: allow}}
    """,
    )
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    now = run("exec", "time.get_current_time", "timezone=Europe/Paris", "--format", "json")
    assert now.code == 0, now.err
    data = json.loads(now.out)
    assert data["result"]["structuredContent"]["timezone"] == "Europe/Paris"
    assert (data["agent"], data["server"], data["tool"], data["decision"]) == (
        "default",
        "time",
        "get_current_time",
        "allow",
    )
    status = run("exec", "git.git_status", f"repo_path={project}")
    assert status.code == 0, status.err
    assert "No commits yet" in status.out or "Untracked files" in status.out


@pytest.fixture
def http_server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[str, int]]:
    transport = request.param
    with listening([PY, str(TEST_SERVERS / "kitchen.py"), "--transport", transport]) as port:
        yield transport, port


@pytest.mark.parametrize("http_server", ["sse", "streamable-http"], indirect=True)
def test_http_transports(
    http_server: tuple[str, int], project: Path, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    transport, port = http_server
    path = "sse" if transport == "sse" else "mcp"
    monkeypatch.setenv("KITCHEN_TOKEN", "tok-123")
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          remote:
            transport: {transport}
            url: http://127.0.0.1:${{KITCHEN_PORT:-{port}}}/{path}
            headers: {{Authorization: "Bearer ${{KITCHEN_TOKEN}}"}}
        policy: {{default: allow}}
    """,
    )
    result = run("exec", "remote.echo", "text=over http", "times=2")
    assert (result.code, result.out, result.err) == (0, "over http over http\n", "")
    missing = run("exec", "remote.nope")
    assert missing.code == 4


def test_http_server_not_listening(project: Path, run: Run) -> None:
    port = free_port()
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          remote: {{transport: streamable-http, url: "http://127.0.0.1:{port}/mcp"}}
        policy: {{default: allow}}
    """,
    )
    result = run("exec", "remote.echo", "text=x", "--connect-timeout", "10")
    assert result.code == 5, result.err
    assert result.err_lines[0].startswith(
        "error: cannot reach server 'remote' at http://127.0.0.1:"
    )


# --- output rendering --------------------------------------------------------------------------


def test_every_content_type(kitchen: Path, run: Run, tmp_path: Path) -> None:
    out_dir = tmp_path / "media"
    result = run("exec", "-a", "reader", "kitchen.media", "--output-dir", str(out_dir))
    assert result.code == 0, result.err
    assert result.lines == [
        "here is everything",
        f"[image: {out_dir}/kitchen-media-1.png (image/png, 70 bytes)]",
        f"[audio: {out_dir}/kitchen-media-2.wav (audio/wav, 12 bytes)]",
        "[resource link: file:///tmp/report.txt (report, text/plain)]",
        "[resource: memo://note (text/markdown)]",
        "# a note",
        f"[resource: memo://blob (application/octet-stream, 3 bytes) saved to "
        f"{out_dir}/kitchen-media-3.bin]",
    ]
    assert (out_dir / "kitchen-media-1.png").read_bytes().startswith(b"\x89PNG")
    as_json = json.loads(run("exec", "-a", "reader", "kitchen.media", "--format", "json").out)
    assert [c["type"] for c in as_json["result"]["content"]] == [
        "text",
        "image",
        "audio",
        "resource_link",
        "resource",
        "resource",
    ]


def test_follow_links_reads_the_linked_resources_under_the_same_rule(
    kitchen: Path, run: Run, isolated_home: Path
) -> None:
    plain = run("exec", "-a", "reader", "kitchen.linked")
    assert plain.code == 0
    assert (
        plain.out
        == "the count is in the counter\n[resource link: kitchen://counter (counter, text/plain)]\n"
    )
    assert "--follow-links reads them (or: bundlectl read kitchen kitchen://counter)" in plain.err
    followed = run("exec", "-a", "reader", "kitchen.linked", "--follow-links")
    assert followed.code == 0, followed.err
    assert followed.lines[-1] == "0"  # the counter, read from the server
    reads = [r for r in audit_lines(isolated_home) if r.get("tool") == "resources/read"]
    assert [(r["agent"], r["server"], r["outcome"]) for r in reads] == [("reader", "kitchen", "ok")]
    refused = run("exec", "-a", "reader", "kitchen.linked", "--follow-links", "--format", "json")
    assert refused.code == 2 and "bundlectl read SERVER URI --format json" in refused.err


def test_huge_output_is_cut_in_text_mode_only(kitchen: Path, run: Run) -> None:
    text = run("exec", "-a", "reader", "kitchen.huge", "size=1500000")
    assert text.code == 0
    assert len(text.out) == 1_000_001
    assert text.err_lines[-1] == (
        "note: output cut after 1,000,000 characters (500,000 more); "
        "use --format json for everything"
    )
    full = json.loads(
        run("exec", "-a", "reader", "kitchen.huge", "size=1500000", "--format", "json").out
    )
    assert len(full["result"]["content"][0]["text"]) == 1_500_000


# --- 1: the tool reported an error -------------------------------------------------------------


def test_tool_error_exits_1(project: Path, run: Run, starts: Path) -> None:
    write(project / "bundlectl.yaml", kitchen_config())
    result = run("exec", "kitchen.fail", "message=disk full")
    assert result.code == 1
    assert result.err_lines[-2:] == [
        "error: tool kitchen.fail reported an error:",
        "Error executing tool fail: disk full",
    ]
    as_json = run("exec", "kitchen.fail", "--format", "json")
    assert as_json.code == 1 and json.loads(as_json.out)["result"]["isError"] is True


# --- 2: usage ----------------------------------------------------------------------------------


def test_usage_errors_start_nothing(kitchen: Path, run: Run, starts: Path) -> None:
    cases = [
        (["exec", "kitchen.echo", "novalue"], "error: argument 'novalue' is not KEY=VALUE"),
        (["exec", "nodot"], "error: 'nodot' is not a qualified tool name"),
        (["exec", "ghost.echo"], "error: no server 'ghost' in the resolved configuration"),
        (["exec", "off.x"], "error: server 'off' is disabled"),
        (
            ["exec", "kitchen.echo", "--args", "{oops"],
            "error: --args:1:2: invalid JSON: Expecting property name enclosed in double quotes",
        ),
        (
            ["exec", "kitchen.echo", "--args", "[1]"],
            "error: --args: the arguments must be a JSON object, not list",
        ),
        (["exec"], "error: missing SERVER.TOOL"),
    ]
    for args, first in cases:
        result = run(*args)
        assert (result.code, result.err_lines[0]) == (2, first), args
    os.environ.pop("KITCHEN_STARTS")
    unset = run("exec", "-a", "reader", "kitchen.echo", "text=x")
    assert unset.code == 2
    assert unset.err_lines[0] == (
        "error: server 'kitchen' (env.KITCHEN_STARTS) needs the "
        "environment variable KITCHEN_STARTS, which is not set"
    )
    assert not starts.exists()


# --- 3: denied by policy -----------------------------------------------------------------------


def test_denied_call_starts_nothing_and_is_audited(
    project: Path, run: Run, starts: Path, isolated_home: Path
) -> None:
    write(project / "bundlectl.yaml", kitchen_config(policy="deny"))
    result = run("exec", "--agent", "reader", "kitchen.fail")
    assert result.code == 3
    assert result.err_lines == [
        "error: agent 'reader' may not call kitchen.fail: denied by agents.reader.deny: "
        "kitchen.fail",
        "hint: bundlectl policy explain --agent reader kitchen.fail",
    ]
    assert run("exec", "--agent", "stranger", "kitchen.echo", "text=x").code == 3
    # ask without a terminal and without --yes is a deny
    asked = run("exec", "--agent", "writer", "files.write_file", "path=a.txt", "content=x")
    assert asked.code == 3
    assert not (project / "a.txt").exists()
    assert not starts.exists()
    records = audit_lines(isolated_home)
    assert [(r["agent"], r["tool"], r["decision"], r["outcome"]) for r in records] == [
        ("reader", "fail", "deny", "denied"),
        ("stranger", "echo", "deny", "denied"),
        ("writer", "write_file", "deny", "denied"),
    ]
    assert records[0]["rule"] == "kitchen.fail"
    lines = (project / "bundlectl.yaml").read_text().splitlines()
    [(row, column)] = [
        (n, line.index("kitchen.fail"))
        for n, line in enumerate(lines)
        if "deny: [kitchen.fail]" in line
    ]
    assert records[0]["rule_source"] == f"bundlectl.yaml:{row + 1}:{column + 1}"
    yes = run("exec", "--agent", "writer", "files.write_file", "path=a.txt", "content=x", "--yes")
    assert yes.code == 0 and (project / "a.txt").read_text() == "x"


def test_audit_never_holds_argument_values_or_secrets(
    kitchen: Path, run: Run, isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GREETING", "ghp_0123456789abcdefghijklmnopqrstuvwxyz")
    run("exec", "-a", "reader", "kitchen.echo", "text=my-private-text")
    raw = (isolated_home / "state" / "audit.jsonl").read_text()
    assert "my-private-text" not in raw and "ghp_" not in raw
    [record] = audit_lines(isolated_home)
    assert set(record) == {
        "timestamp",
        "agent",
        "server",
        "tool",
        "decision",
        "rule",
        "rule_source",
        "lock_digest",
        "policy_digest",
        "outcome",
        "duration_ms",
        "arguments_sha256",
        "via",
        "call",
        "project",  # the folder of the project whose policy decided (#56)
        "prev",  # the sha256 of the line before: the log's hash chain
    }
    assert record["via"] == "exec" and record["project"] == str(Path.cwd().resolve())
    assert record["outcome"] == "ok" and str(record["arguments_sha256"]).startswith("hmac-sha256:")


def test_audit_names_the_policy_that_decided(kitchen: Path, run: Run, isolated_home: Path) -> None:
    assert run("lock").code == 0
    run("exec", "-a", "reader", "files.read_file", "path=hello.txt")
    locked = load_yaml(kitchen / "bundlectl.lock")["policy_digest"]
    config = kitchen / "bundlectl.yaml"
    config.write_text(config.read_text().replace('"kitchen.*"', '"kitchen.*", files.write_file'))
    # The lock is now stale; the record still says which policy allowed the call.
    run("exec", "-a", "reader", "files.write_file", "path=w.txt", "content=x")
    first, second = audit_lines(isolated_home)
    assert first["policy_digest"] == locked
    assert second["outcome"] == "ok" and second["policy_digest"] != locked
    assert run("lock", "--check").err_lines[:2] == [
        "error: bundlectl.lock is stale:",
        "  policy changed: agents reader, writer",
    ]
    assert run("lock").code == 0
    assert load_yaml(kitchen / "bundlectl.lock")["policy_digest"] == second["policy_digest"]


# --- 4: no such tool, invalid arguments --------------------------------------------------------


def test_unknown_tool_lists_the_closest(kitchen: Path, run: Run) -> None:
    result = run("exec", "-a", "reader", "kitchen.ecko", "text=x")
    assert result.err_lines == [
        "error: server 'kitchen' has no tool 'ecko'",
        "hint: did you mean kitchen.echo?",
    ]
    assert result.code == 4


def test_every_schema_violation_is_listed(kitchen: Path, run: Run) -> None:
    result = run("exec", "-a", "reader", "kitchen.add", "--args", '{"a": "x", "c": 1}')
    assert result.code == 4
    assert result.err_lines[:3] == [
        "error: the arguments do not satisfy the input schema of kitchen.add:",
        "  (arguments): 'b' is a required property",
        "  a: 'x' is not of type 'integer'",
    ]
    typed = run("exec", "-a", "reader", "kitchen.add", "a=one", "b=2")
    assert (typed.code, typed.err_lines[0]) == (4, "error: argument a='one' is not a valid integer")


# --- 5: server failures --------------------------------------------------------------------------


def test_server_failures(kitchen: Path, run: Run) -> None:
    crash = run("exec", "crash.anything")
    assert crash.code == 5
    assert "error: server 'crash' closed the connection (it exited or crashed)" in crash.err
    assert "  | fatal: cannot open database /nonexistent.db" in crash.err_lines
    missing = run("exec", "missing.anything")
    assert missing.code == 5
    assert missing.err_lines[0] == (
        "error: could not start server 'missing': "
        "'no-such-binary-bundlectl-test': No such file or directory"
    )
    garbage = run("exec", "garbage.anything", "--connect-timeout", "10")
    assert garbage.code == 5, garbage.err
    assert (
        "error: server 'garbage' broke the protocol: its stdout has a line that is not "
        "JSON-RPC: 'this is not json-rpc'" in garbage.err_lines
    )
    dying = run("exec", "dying.anything")
    assert dying.code == 5
    assert "  | segfault imitation" in dying.err_lines


# --- 6: timeouts -------------------------------------------------------------------------------


def test_call_timeout_stops_the_server(kitchen: Path, run: Run, starts: Path) -> None:
    # `slow` has no SDK to import, so it is connected long before the timeout even on a busy
    # machine: the timeout this test sees is the call's, not the connection's.
    began = time.monotonic()
    result = run("exec", "slow.sleep", "--timeout", "3")
    assert result.code == 6, result.err
    # A line per progress update (stderr is not a terminal), then the error.
    first = result.err_lines.index("error: server 'slow' did not answer in time")
    progress = result.err_lines[:first]
    assert progress and all(line.startswith("slow.sleep: ") for line in progress)
    assert time.monotonic() - began < 20  # the server would go on for a minute
    [pid] = pids(starts)
    assert gone(pid, within=0.5)


def test_timeout_bounds_the_whole_command_of_the_console_script(
    kitchen: Path, starts: Path, tmp_path: Path
) -> None:
    """`exec --timeout 4` returned after 6.45 s: after the timeout it closed the server's
    stdin and waited the grace period (2 s) before stopping it, though nothing more was to
    come. The console script leaves at its timeout: the server is stopped right after its
    stdin ends (the grace period is the detached watchdog's, for a server still running
    after an answer)."""
    log = tmp_path / "hang.log"
    done = subprocess.run(
        [PY, "-m", "bundlectl", "exec", "hang.anything", "--timeout", "1.5"],
        cwd=kitchen,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HANG_LOG": str(log)},
        check=False,
    )
    assert done.returncode == 6, done.stderr
    [pid] = pids(starts)
    assert gone(pid, within=6.0)
    marks = dict(line.split() for line in log.read_text().splitlines())
    # before: the grace period (2 s) between the two; now a moment
    assert float(marks["term"]) - float(marks["eof"]) < 1.5, marks


def test_connect_timeout_stops_a_hung_server(kitchen: Path, run: Run, starts: Path) -> None:
    result = run("exec", "hang.anything", "--connect-timeout", "1.5")
    assert result.code == 6
    errors = [line for line in result.err_lines if line.startswith("error:")]
    assert errors == ["error: server 'hang' did not finish connecting within 1.5 s; it was stopped"]
    assert "  | hanging forever" in result.err_lines
    [pid] = pids(starts)
    assert gone(pid, within=0.5)


def test_timeout_bounds_connecting_and_the_whole_group_is_stopped(
    kitchen: Path, run: Run, starts: Path
) -> None:
    began = time.monotonic()
    result = run("exec", "spawn.anything", "--timeout", "2")
    assert result.code == 6, result.err
    assert result.err_lines[0] == (
        "error: server 'spawn' did not finish connecting within 2 s; it was stopped"
    )
    assert result.err_lines[-1] == (
        "hint: raise --timeout, or check that the server starts on its own"
    )
    assert time.monotonic() - began < 10  # was the 30 s connect timeout
    server, grandchild = pids(starts)
    # The server exits at EOF by itself; what it started must not outlive the call.
    assert gone(server, within=0.5) and gone(grandchild, within=0.5)


def test_a_stream_overflowing_line_times_out_without_a_thread_traceback(
    kitchen: Path, run: Run
) -> None:
    for _ in range(2):  # the race showed in 3 of 5 runs
        result = run("exec", "flood.anything", "--timeout", "2")
        assert result.code == 6, result.err
        assert "Traceback" not in result.err and "Exception in thread" not in result.err


def test_a_server_that_dies_silently_says_so(kitchen: Path, run: Run) -> None:
    result = run("exec", "silent.anything")
    assert result.code == 5
    assert result.err_lines == [
        "error: server 'silent' closed the connection (it exited or crashed)",
        "(it wrote nothing to stderr)",
    ]


def test_no_process_outlives_a_successful_call_of_a_server_that_ignores_eof(
    kitchen: Path, starts: Path
) -> None:
    """The console script prints and leaves; the detached watchdog stops what is left."""
    began = time.monotonic()
    done = subprocess.run(
        [PY, "-m", "bundlectl", "exec", "linger.ping"],
        cwd=kitchen,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": "/usr/bin:/bin"},  # the watchdog needs no shell from PATH
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, "pong\n"), done.stderr
    assert time.monotonic() - began < 10
    server, grandchild = pids(starts)
    assert gone(server, within=5.0) and gone(grandchild, within=5.0)


# --- 130: interrupted ---------------------------------------------------------------------------


def test_sigint_while_connecting_leaves_nothing_behind(kitchen: Path, starts: Path) -> None:
    proc = subprocess.Popen(
        [PY, "-m", "bundlectl", "exec", "spawn.anything"],
        cwd=kitchen,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 20
    while len(pids(starts)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 130, err
    server, grandchild = pids(starts)
    assert gone(server, within=0.5) and gone(grandchild, within=0.5)


def test_sigterm_shuts_down_cleanly(
    kitchen: Path, starts: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "kitchen.log"
    monkeypatch.setenv("KITCHEN_LOG", str(log))
    proc = subprocess.Popen(
        [PY, "-m", "bundlectl", "exec", "-a", "reader", "kitchen.sleep", "seconds=60"],
        cwd=kitchen,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 30
    while "sleep started" not in (log.read_text() if log.exists() else ""):  # the call is on
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 130, err
    assert b"stopped by SIGTERM" in err
    [pid] = pids(starts)
    assert gone(pid, within=0.5)
    assert "sleep cancelled" in log.read_text()  # the call ended in the server, not mid-air


def test_sigterm_during_a_streamable_http_call_cancels_it_and_ends_the_session(
    project: Path, tmp_path: Path
) -> None:
    log = tmp_path / "requests.log"
    kitchen = [PY, str(TEST_SERVERS / "kitchen.py"), "--transport", "streamable-http"]
    # The 2025-11-25 handshake: a session that the client must end with DELETE.
    with listening(kitchen, {"KITCHEN_LOG": str(log), "KITCHEN_LEGACY": "1"}) as port:
        remote_config(project, "remote", port)
        call = subprocess.Popen(
            [PY, "-m", "bundlectl", "exec", "remote.sleep", "seconds=60"],
            cwd=project,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 30
        while "sleep started" not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline and call.poll() is None
            time.sleep(0.05)
        call.send_signal(signal.SIGTERM)
        _, err = call.communicate(timeout=20)
        assert call.returncode == 130, err
        assert b"stopped by SIGTERM" in err
        deadline = time.monotonic() + 5
        wanted = {"DELETE /mcp", "sleep cancelled"}  # the server logs them in either order
        while not wanted <= set(log.read_text().splitlines()) and time.monotonic() < deadline:
            time.sleep(0.05)
        events = log.read_text().splitlines()
        assert "sleep cancelled" in events  # the server was told to stop the call
        assert "DELETE /mcp" in events  # and the session was ended


# --- batch ---------------------------------------------------------------------------------------


def test_batch_in_order_one_start_per_server(
    kitchen: Path, run: Run, starts: Path, tmp_path: Path
) -> None:
    batch = tmp_path / "calls.jsonl"
    batch.write_text(
        "\n".join(
            json.dumps(x)
            for x in [
                {"agent": "reader", "tool": "kitchen.echo", "arguments": {"text": "one"}},
                {"agent": "reader", "tool": "files.read_file", "arguments": {"path": "hello.txt"}},
                {"agent": "reader", "tool": "kitchen.fail"},
                {"agent": "reader", "tool": "kitchen.add", "arguments": {"a": 1, "b": 2}},
                {"tool": "nodot"},
            ]
        )
        + "\nnot json\n"
    )
    result = run("exec", "--batch", str(batch))
    lines = [json.loads(line) for line in result.lines]
    assert [line["line"] for line in lines] == [1, 2, 3, 4, 5, 6]
    assert lines[0]["result"]["content"][0]["text"] == "one"
    assert lines[1]["result"]["content"][0]["text"] == "hello\n"
    assert lines[2]["error"]["exit_code"] == 3 and "server" in lines[2]
    assert lines[3]["result"]["structuredContent"] == {"sum": 3}
    assert lines[4]["error"]["exit_code"] == 2
    assert lines[5]["error"]["message"].endswith("invalid JSON: Expecting value")
    assert len(pids(starts)) == 1  # the kitchen started once for two calls
    assert result.code == 3


def test_batch_line_with_a_duplicate_key_is_an_error_for_that_line(
    kitchen: Path, run: Run, starts: Path, tmp_path: Path
) -> None:
    batch = tmp_path / "calls.jsonl"
    batch.write_text(
        '{"agent": "stranger", "agent": "reader", "tool": "kitchen.echo", "arguments": {}}\n'
        '{"agent": "reader", "tool": "kitchen.echo", "arguments": {"text": "a", "text": "b"}}\n'
        '{"agent": "reader", "tool": "kitchen.echo", "arguments": {"text": "ok"}}\n'
    )
    lines = [json.loads(line) for line in run("exec", "--batch", str(batch)).lines]
    assert [line.get("error", {}).get("message") for line in lines[:2]] == [
        f"{batch}:1: key 'agent' appears twice in one object",
        f"{batch}:2: key 'text' appears twice in one object",
    ]
    assert lines[2]["result"]["content"][0]["text"] == "ok"


@pytest.mark.parametrize("value", ["0", "-1", "3601"])
def test_timeout_out_of_range_is_a_usage_error(kitchen: Path, run: Run, value: str) -> None:
    result = run("exec", "-a", "reader", "kitchen.echo", "text=x", "--timeout", value)
    assert result.code == 2
    assert "is not in the range 1<=x<=3600" in result.err


def test_repeated_argument_keys_are_a_usage_error(kitchen: Path, run: Run, starts: Path) -> None:
    result = run("exec", "-a", "reader", "files.read_file", "path=hello.txt", "path=other.txt")
    assert (result.code, result.err_lines[0]) == (2, "error: argument 'path' is given twice")
    duplicated = run("exec", "-a", "reader", "kitchen.echo", "--args", '{"text": 1, "text": 2}')
    assert duplicated.err_lines[0] == "error: --args: key 'text' appears twice in one object"
    assert not pids(starts)


def test_the_hint_for_a_badly_typed_argument_fits_its_type(kitchen: Path, run: Run) -> None:
    result = run("exec", "-a", "reader", "kitchen.add", "a=notanumber", "b=1")
    assert result.code == 4
    assert result.err_lines == [
        "error: argument a='notanumber' is not a valid integer",
        "hint: an integer is written in digits: a=10",
    ]


def test_progress_line_on_a_terminal() -> None:
    import anyio

    from bundlectl.calls.call import _Progress

    class Terminal:
        def __init__(self) -> None:
            self.text = ""

        def isatty(self) -> bool:
            return True

        def write(self, text: str) -> None:
            self.text += text

        def flush(self) -> None:
            pass

    screen = Terminal()
    old, sys.stderr = sys.stderr, screen  # type: ignore[assignment]
    try:
        progress = _Progress("kitchen.sleep")
        anyio.run(progress, 1.0, 4.0, "sleeping")
        anyio.run(progress, 4.0, 4.0, None)
        progress.done()
    finally:
        sys.stderr = old
    assert screen.text.startswith("\rkitchen.sleep: 1/4 sleeping")
    assert "\rkitchen.sleep: 4/4" in screen.text and screen.text.endswith("\n")


def test_tools_live_shows_drift_and_record_ends_it(project: Path, run: Run, starts: Path) -> None:
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        bundles: [basic]
        servers:
          kitchen:  # the test suite's own server
            command: {PY}
            args: ["{TEST_SERVERS / "kitchen.py"}"]
            tools:
              - {{name: echo, description: Repeat text., input_schema: {{type: object}}}}
              - {{name: retired, description: gone}}
          broken: {{command: {PY}, args: ["{TEST_SERVERS / "misbehave.py"}", crash]}}
    """,
    )
    result = run("tools", "--live")
    assert result.code == 5
    assert (
        result.lines[0] == "broken: could not ask it: server 'broken' closed the connection "
        "(it exited or crashed)"
    )
    assert result.lines[1] == "files: matches the declared catalog (3 tools)"
    assert result.lines[2:7] == [
        "kitchen: differs from the declared catalog",
        "  + add (offered, not declared)",
        "  + bearer_claims (offered, not declared)",
        "  + bump (offered, not declared)",
        "  + consent (offered, not declared)",
    ]
    assert "  - retired (declared, not offered)" in result.lines
    assert "  ~ echo: input schema differs" in result.lines
    only = run("tools", "--live", "--server", "files", "--format", "json")
    assert only.code == 0
    assert json.loads(only.out)["servers"]["files"]["status"] == "ok"

    # --record: the live catalog into bundlectl.yaml, comments kept, and a fresh lock
    assert run("lock").code == 0
    recorded = run("tools", "--live", "--record", "--server", "kitchen")
    assert recorded.code == 0, recorded.err
    said = recorded.err_lines[0]  # what changed, as lock says it (it said "+0 -0" for a change)
    assert (
        said.startswith("recorded ")
        and "tool(s) of kitchen (added add, bearer_claims, bump, " in said
    )
    assert "; removed retired; changed echo (input schema)" in said
    again = run("tools", "--live", "--record", "--server", "kitchen")
    assert again.err_lines[0].endswith("tool(s) of kitchen (no change)")
    text = (project / "bundlectl.yaml").read_text()
    assert "kitchen:  # the test suite's own server" in text and "retired" not in text
    assert run("tools", "--live", "--server", "kitchen").lines == [
        f"kitchen: matches the declared catalog ({text.count('- name: ')} tools)"
    ]
    assert run("lock", "--check").code == 0
    assert "consent" in run("tools", "--server", "kitchen", "--detail", "name").out
    bundled = run("tools", "--live", "--record", "--server", "files")
    assert bundled.code == 2
    assert "server 'files' comes from bundle basic@" in bundled.err
    mixed = run("tools", "--live", "--search", "echo")
    assert mixed.code == 2 and "--search cannot be used with --live" in mixed.err


def test_builtin_in_process_equals_the_subprocess_server(kitchen: Path, run: Run) -> None:
    write(
        kitchen / "bundlectl.yaml",
        f"""
        version: 1
        bundles: [basic, code-review]
        servers:
          files-sub: {{command: {PY}, args: [-m, bundlectl, server, files]}}
          review-sub: {{command: {PY}, args: [-m, bundlectl, server, review]}}
        policy: {{default: allow}}
    """,
    )
    (kitchen / "data.bin").write_bytes(b"\x00\x01binary")
    reads = [
        ("files", "read_file", {"path": "hello.txt"}),
        ("files", "read_file", {"path": "data.bin"}),
        ("files", "list_directory", {}),
        ("files", "list_directory", {"path": "hello.txt"}),
        ("files", "read_file", {"path": "../outside"}),
        ("files", "read_file", {"path": "hello.txt", "extra": "refused"}),
        ("review", "view_diff", {"base": "--evil"}),
        ("review", "complexity_metrics", {"file_path": "missing.py"}),
    ]
    # One batch: each server (and so each subprocess) started once for all its calls.
    batch = kitchen / "calls.jsonl"
    batch.write_text(
        "".join(
            json.dumps({"tool": f"{server}{kind}.{tool}", "arguments": arguments}) + "\n"
            for server, tool, arguments in reads
            for kind in ("", "-sub")
        )
    )
    lines = [json.loads(line) for line in run("exec", "--batch", str(batch)).lines]
    assert len(lines) == 2 * len(reads)
    for (server, tool, arguments), inproc, sub in zip(reads, lines[::2], lines[1::2], strict=True):
        assert (inproc["server"], sub["server"]) == (server, f"{server}-sub")
        if "extra" in arguments:  # an undeclared argument: refused by both
            # known as ours: before it is sent (exit 4); started as any server: by the server
            assert inproc["error"]["exit_code"] == 4
            assert "takes no argument 'extra'" in inproc["error"]["message"]
            assert sub["result"]["isError"], sub
            assert "Extra inputs are not permitted" in sub["result"]["content"][0]["text"]
            continue
        assert inproc["result"] == sub["result"], (tool, arguments)
        if (tool, arguments) == ("read_file", {"path": "hello.txt"}):  # bundlectl's own servers
            info = inproc["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]
            assert info == {"name": "bundlectl-files", "version": bundlectl.__version__}
    # A write, alone (a listing beside it in the batch could run before or after it).
    inproc = run("exec", "files.write_file", "path=new/note.txt", "content=hi", "--format", "json")
    sub = run("exec", "files-sub.write_file", "path=new/note.txt", "content=hi", "--format", "json")
    assert inproc.code == sub.code == 0
    assert json.loads(inproc.out)["result"] == json.loads(sub.out)["result"]


def test_builtin_tool_called_without_the_sdk(kitchen: Path, isolated_home: Path) -> None:
    """`exec` on a built-in content-only tool runs it in-process without importing the MCP SDK
    (about 0.7 s of a one-shot call); a structured-output tool still goes through the SDK."""
    write(
        kitchen / "bundlectl.yaml",
        "version: 1\nbundles: [basic, code-review]\npolicy: {default: allow}\n",
    )
    (kitchen / "tool.py").write_text("def f(x):\n    return x\n")
    _, modules = exec_importing(kitchen, isolated_home, "files.read_file", "path=hello.txt")
    assert not {"mcp", "mcp_types"} & modules
    _, modules = exec_importing(
        kitchen, isolated_home, "review.complexity_metrics", "file_path=tool.py"
    )
    assert "mcp" in modules


def loaded_at_start(project: Path, home: Path, watched: str, *args: str) -> tuple[str, ...]:
    """`bundlectl exec ARGS` in a fresh interpreter: which of the `watched` modules were loaded
    when it started its first process (its output must hold "hi")."""
    spy = (
        "import subprocess, sys\n"
        "started = []\n"
        "popen = subprocess.Popen.__init__\n"
        "def spy(self, *args, **kwargs):\n"
        "    started.append(sorted(set(sys.argv[1].split()) & set(sys.modules)))\n"
        "    popen(self, *args, **kwargs)\n"
        "subprocess.Popen.__init__ = spy\n"
        "from bundlectl.cli.main import main\n"
        "code = main(sys.argv[2:])\n"
        "print('LOADED', *started[0], code)\n"
    )
    done = subprocess.run(
        [PY, "-c", spy, watched, "exec", *args],
        cwd=project,
        env={**os.environ, "BUNDLECTL_HOME": str(home)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert "hi" in done.stdout, done.stderr
    return tuple(done.stdout.splitlines()[-1].split()[1:])


def test_a_stdio_server_starts_before_what_talks_to_it_is_imported(
    kitchen: Path, isolated_home: Path
) -> None:
    """Once the policy lets the call through, the server starts at once; asyncio, anyio, the
    transport and the SDK are imported while it starts (each costs exec's own time only when
    it is on the way to the server's start). The declared schemas of a project loaded for the
    first time are checked with jsonschema_rs (~8 ms); jsonschema (~100 ms) is never on the
    way."""
    watched = "asyncio anyio mcp jsonschema bundlectl.calls.call bundlectl.mcpio.stdio"
    assert loaded_at_start(kitchen, isolated_home, watched, "kitchen.echo", "text=hi") == ("0",)


# --- the head start: a call allowed outright last time starts before the project loads --------


def test_a_call_allowed_outright_last_time_starts_its_server_before_the_project_loads(
    kitchen: Path, isolated_home: Path
) -> None:
    """The first call loads the project (YAML, pydantic, the resolver) before it may start the
    server; the same call again, nothing it was decided from changed, starts it first."""
    watched = "pydantic ruamel.yaml bundlectl.config.project bundlectl.resolve.resolved"
    args = ("-a", "reader", "kitchen.echo", "text=hi")
    first = loaded_at_start(kitchen, isolated_home, watched, *args)
    assert first == (*sorted(watched.split()), "0")
    assert loaded_at_start(kitchen, isolated_home, watched, *args) == ("0",)


def deny_in_project(project: Path) -> None:
    write(project / "bundlectl.yaml", kitchen_config(policy="deny"))


def deny_in_user_config(project: Path) -> None:
    user = paths.user_project_file()
    assert user is not None
    write(user, "version: 1\npolicy: {deny: [kitchen.echo]}\n")


@pytest.mark.parametrize("edit", [deny_in_project, deny_in_user_config])
def test_a_call_an_edit_refuses_starts_nothing_though_it_was_allowed_before(
    kitchen: Path, run: Run, starts: Path, edit: Callable[[Path], None]
) -> None:
    assert run("exec", "-a", "nobody", "kitchen.echo", "text=hi").out == "hi\n"
    edit(kitchen)
    refused = run("exec", "-a", "nobody", "kitchen.echo", "text=hi")
    assert refused.code == 3, refused.err
    assert len(pids(starts)) == 1


def test_a_kept_launch_that_is_not_the_configured_one_is_stopped_unused(
    kitchen: Path, run: Run, starts: Path, isolated_home: Path
) -> None:
    """A kept launch is used only when it equals the configured one (a cache that is wrong
    about its inputs must not decide what runs)."""
    assert run("exec", "kitchen.echo", "text=hi").code == 0
    (kept,) = (isolated_home / "cache" / "exec").iterdir()
    data = json.loads(kept.read_text())
    (launch,) = data["calls"].values()
    launch["args"] = [str(TEST_SERVERS / "misbehave.py"), "hang"]  # never answers
    kept.write_text(json.dumps(data))
    again = run("exec", "kitchen.echo", "text=hi")
    assert (again.code, again.out) == (0, "hi\n"), again.err
    *before, used = pids(starts)  # the first call's server, the impostor (if it got to say so)
    assert not any(running(pid) for pid in before)
    assert gone(used)
    (launch,) = json.loads(kept.read_text())["calls"].values()  # and kept as configured again
    assert launch["args"] == [str(TEST_SERVERS / "kitchen.py")]


def exec_importing(project: Path, home: Path, *args: str) -> tuple[str, set[str]]:
    """`bundlectl exec ARGS` in a subprocess: its output, and the modules it imported."""
    done = subprocess.run(
        [PY, "-X", "importtime", "-m", "bundlectl", "exec", *args],
        cwd=project,
        env={**os.environ, "BUNDLECTL_HOME": str(home)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    modules = {
        line.rsplit("|", 1)[1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:")
    }
    return done.stdout, modules


def test_quiet_sends_server_stderr_to_a_log(project: Path, run: Run, isolated_home: Path) -> None:
    write(project / "bundlectl.yaml", kitchen_config())
    result = run("exec", "crash.anything", "--quiet")
    assert result.code == 5
    assert "fatal: cannot open database" not in result.err.split("last lines")[0]
    log = isolated_home / "state" / "logs" / "crash.log"
    assert "fatal: cannot open database /nonexistent.db" in log.read_text()


def test_quiet_with_a_log_that_cannot_be_written_says_which(
    kitchen: Path, run: Run, isolated_home: Path, starts: Path
) -> None:
    write(isolated_home / "state" / "logs", "a file where the logs' folder would be\n")
    result = run("exec", "kitchen.echo", "text=hi", "--quiet")
    assert result.code == 2, result.err
    assert result.err_lines[0] == (
        f"error: cannot write the server's log {isolated_home / 'state' / 'logs' / 'kitchen.log'}"
        ": File exists"
    )
    assert pids(starts) == []


def test_audit_path_from_the_user_config(
    kitchen: Path, run: Run, isolated_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "elsewhere" / "audit.jsonl"
    write(isolated_home / "config" / "config.yaml", f"audit: {{path: '{target}'}}\n")
    run("exec", "-a", "reader", "files.read_file", "path=hello.txt")
    assert [r["tool"] for r in audit_records(target)] == ["read_file"]
    override = tmp_path / "override.jsonl"
    monkeypatch.setenv("BUNDLECTL_AUDIT_LOG", str(override))
    run("exec", "-a", "reader", "files.read_file", "path=hello.txt")
    assert override.exists() and len(audit_records(target)) == 1
    write(isolated_home / "config" / "config.yaml", "audit: {pth: x}\n")
    bad = run("exec", "-a", "reader", "files.read_file", "path=hello.txt")
    assert bad.code == 2
    assert "config.yaml:1:9: audit.pth: unknown key 'pth'; did you mean 'path'?" in bad.err


def test_bundlectl_server_over_streamable_http(project: Path, run: Run, tmp_path: Path) -> None:
    served = tmp_path / "served"
    served.mkdir()
    (served / "note.txt").write_text("served over http\n")
    server = [PY, "-m", "bundlectl", "server", "files", "--root", str(served)]
    with listening([*server, "--transport", "streamable-http"]) as port:
        remote_config(project, "remote-files", port)
        result = run("exec", "remote-files.read_file", "path=note.txt")
        assert (result.code, result.out) == (0, "served over http\n")
        outside = run("exec", "remote-files.read_file", "path=../note.txt")
        assert outside.code == 1
        assert "is outside the root folder" in outside.err
    assert run("server", "nope").code == 2


def on_terminal(cwd: Path, args: list[str], script: list[tuple[bytes, str]]) -> tuple[int, bytes]:
    """`bundlectl ARGS` on a real pseudo-terminal in `cwd`: each time the output shows a
    `script` prompt (in order) its answer is typed. The exit code and everything shown."""
    import pty

    env = {k: v for k, v in os.environ.items() if k != "CI"}
    pid, fd = pty.fork()
    if pid == 0:  # the child: bundlectl with the terminal as stdin/stdout/stderr
        os.chdir(cwd)
        os.execve(PY, [PY, "-m", "bundlectl", *args], env)
    seen, answered = b"", 0  # the output up to `answered` has had its prompts answered
    deadline = time.monotonic() + 30
    for prompt, answer in script:
        while prompt not in seen[answered:] and time.monotonic() < deadline:
            try:
                seen += os.read(fd, 1024)
            except OSError:  # it ended without asking
                break
        answered = seen.find(prompt, answered) + len(prompt)
        os.write(fd, f"{answer}\n".encode())
    while True:
        try:
            chunk = os.read(fd, 1024)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), seen


@pytest.mark.parametrize(("answer", "code"), [("y", 0), ("n", 3)])
def test_ask_is_confirmed_on_a_terminal(kitchen: Path, answer: str, code: int) -> None:
    """A real pseudo-terminal: the prompt appears, and only 'y' lets the call through."""
    args = ["exec", "--agent", "writer", "files.write_file", "path=asked.txt", "content=confirmed"]
    status, seen = on_terminal(kitchen, args, [(b"Allow? [y/N/a]", answer)])
    assert b"agent 'writer' wants to call files.write_file" in seen
    assert b'path: "asked.txt"' in seen and b'content: "confirmed"' in seen  # #24 item 6
    assert status == code, seen.decode(errors="replace")
    assert (kitchen / "asked.txt").exists() == (answer == "y")


def test_exec_through_the_gateway_answers_the_servers_question(
    kitchen: Path, tmp_path: Path
) -> None:
    """`exec` → `bundlectl serve` → kitchen, all on 2026-07-28: kitchen's question reaches the
    terminal (the gateway holds the call while `exec` answers by retrying), and the answer
    reaches kitchen."""
    write(
        kitchen / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          kitchen: {{command: {PY}, args: ["{TEST_SERVERS / "kitchen.py"}"]}}
        agents:
          bot: {{allow: ["kitchen.*"]}}
        policy: {{default: deny}}
        """,
    )
    front = tmp_path / "front"
    front.mkdir()
    serve = ["-m", "bundlectl", "serve", "-c", str(kitchen / "bundlectl.yaml"), "--agent", "bot"]
    write(
        front / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          gw: {{command: {PY}, args: {json.dumps(serve)}}}
        policy: {{default: allow}}
        """,
    )
    script = [(b"(boolean) [default: true]: ", ""), (b"send this answer? [y/N]", "y")]
    status, seen = on_terminal(front, ["exec", "gw.kitchen__consent", "tag=front"], script)
    shown = seen.decode(errors="replace")
    assert "the server asks: consent of front" in shown
    assert (status, shown.splitlines()[-1].strip()) == (0, "front: accept"), shown


def test_stdio_servers_called_without_the_sdk(kitchen: Path, isolated_home: Path) -> None:
    """`exec` on a stdio server speaks MCP itself (the SDK's import costs more than most
    servers take to start); a server that refuses that handshake (2026-07-28 only) gets the
    SDK's, and the call works either way."""
    write(
        kitchen / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          kitchen: {{command: {PY}, args: ["{TEST_SERVERS / "kitchen.py"}"]}}
          modern: {{command: {PY}, args: ["{TEST_SERVERS / "modern_only.py"}"]}}
        policy: {{default: allow}}
        """,
    )
    out, modules = exec_importing(kitchen, isolated_home, "kitchen.echo", "text=hi")
    assert out == "hi\n"
    assert not {"mcp", "mcp_types"} & modules
    out, modules = exec_importing(kitchen, isolated_home, "modern.echo", "text=hi")
    assert out == "hi\n"
    assert "mcp" in modules


def test_a_message_over_the_servers_limit_fails_the_call_and_is_never_held_whole(
    run: Run, project: Path
) -> None:
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          kitchen: {{command: {PY}, args: ["{TEST_SERVERS / "kitchen.py"}"], max_message_mb: 1}}
        policy: {{default: allow}}
        """,
    )
    fine = run("exec", "kitchen.huge", "size=500000")
    assert fine.code == 0 and len(fine.out.strip()) == 500000
    big = run("exec", "kitchen.huge", "size=3000000")
    assert big.code == 5, big.err
    assert "over the limit of 1 MiB (raise servers.NAME.max_message_mb" in big.err


def test_exec_introduces_itself_as_bundlectl_over_http(run: Run, project: Path) -> None:
    from bundlectl import __version__

    kitchen = [PY, str(TEST_SERVERS / "kitchen.py"), "--transport", "streamable-http"]
    with listening(kitchen, {"KITCHEN_LEGACY": "1"}) as port:
        remote_config(project, "remote", port)
        result = run("exec", "remote.who_connected")
    assert result.code == 0, result.err
    assert result.out.strip() == f"bundlectl {__version__}"  # was "mcp 0.1.0"


def test_a_server_with_only_a_url_is_told_which_transport_to_name(run: Run, project: Path) -> None:
    write(
        project / "bundlectl.yaml",
        """
        version: 1
        servers:
          docs: {url: "https://docs.example.com/mcp"}
        """,
    )
    result = run("resolve")
    assert result.code == 2
    assert "needs 'transport: streamable-http'" in result.err
    assert "error: bundlectl.yaml:3:3: servers.docs: a server given a 'url'" in result.err
    assert "or 'sse' for an old SSE endpoint" in result.err


def test_a_server_that_answers_401_is_said_to_need_authorization(run: Run, project: Path) -> None:
    with listening([PY, str(TEST_SERVERS / "refuse.py")]) as port:
        remote_config(project, "docs", port)
        result = run("exec", "docs.search", "query=x")
    assert result.code == 5
    assert (
        "server 'docs' requires authorization (HTTP 401); bundlectl sent no headers" in result.err
    )
    assert "hint: sign in: `bundlectl auth login docs` (OAuth); or give a static" in result.err
    assert 'servers.docs.headers: {Authorization: "Bearer ${TOKEN}"}' in result.err
    assert "code -32603" not in result.err


def test_terminal_elicitation_shows_and_takes_the_schemas_defaults(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # SEP-1034: no default was shown, Enter omitted the field, and the answer was `{}`.
    import io

    from bundlectl.calls.call import ask_on_terminal

    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "default": "Ann"},
            "age": {"type": "integer", "default": 30},
            "subscribe": {"type": "boolean", "default": True},
            "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
            "note": {"type": "string"},
        },
        "required": ["name"],
    }
    monkeypatch.setattr("sys.stdin", io.StringIO("\n\nno\n\n\ny\n"))
    answer = ask_on_terminal({"message": "About you", "requestedSchema": schema})
    assert answer == {
        "action": "accept",
        "content": {"name": "Ann", "age": 30, "subscribe": False, "color": "red"},
    }
    shown = capsys.readouterr().err
    assert 'name (string) [default: "Ann"]: ' in shown
    assert "age (integer) [default: 30]: " in shown and 'color (red/blue) [default: "red"]' in shown
