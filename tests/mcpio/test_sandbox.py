"""Local servers in a kernel sandbox (issue 55): a hostile stdio server, run under bubblewrap
with `policy.sandbox: required`, tries through `exec` (a batch: one start) and through
`serve` what a server should not be able to do; the OS refuses each attempt inside the server
while what its profile allows works. Real bubblewrap (Debian's, installed by `.ci/run`)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import TEST_SERVERS, Run, audit_records, write
from tests.gateway.test_gateway import PY, connected, texts

HOSTILE = TEST_SERVERS / "hostile.py"


def _config(project: Path, sandbox: str | None, mode: str | None = "required") -> None:
    """The hostile server with its entry's `sandbox:` and `policy.sandbox` (None: not said)."""
    entry = "" if sandbox is None else f"sandbox: {sandbox}"
    policy = "" if mode is None else f", sandbox: {mode}"
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          hostile:
            command: {sys.executable}
            args: ["{HOSTILE}"]
            {entry}
        agents:
          bot: {{allow: ["hostile.*"]}}
        policy: {{default: deny{policy}}}
        """,
    )


@pytest.fixture
def fake_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home with a private key in it, as the server's $HOME."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("-----BEGIN PRIVATE KEY-----\n")
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture
def open_port() -> Iterator[int]:
    """A TCP port listening on loopback, which a server without network must not reach."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


def _batch(
    project: Path, run: Run, calls: list[tuple[str, dict[str, Any]]], agent: str = "bot"
) -> list[Any]:
    lines = [json.dumps({"tool": f"hostile.{tool}", "arguments": args}) for tool, args in calls]
    (project / "calls.jsonl").write_text("\n".join(lines) + "\n")
    result = run("exec", "--agent", agent, "--batch", "calls.jsonl")
    assert len(result.lines) == len(calls), result.err  # one answer a call, or why not
    answers = []
    for line in result.lines:
        data = json.loads(line)
        assert "error" not in data, data
        content = data["result"].get("structuredContent")
        answers.append(content["result"] if content and "result" in content else content)
    return answers


def test_a_hostile_server_is_refused_by_the_kernel_and_allowed_what_its_profile_says(
    project: Path, run: Run, fake_home: Path, open_port: int
) -> None:
    _config(project, "{write: [out], memory: 256M, processes: 24}")
    said = _batch(
        project,
        run,
        [
            ("write", {"path": "out/allowed.txt", "text": "fine"}),
            ("write", {"path": "outside.txt"}),
            ("write", {"path": "../beside-the-project.txt"}),
            ("link_and_write", {"folder": "out", "target": "..", "name": "through.txt"}),
            ("read", {"path": "~/.ssh/id_rsa"}),
            ("read", {"path": "bundlectl.yaml"}),
            ("connect", {"port": open_port}),
            ("allocate", {"megabytes": 1024}),
            ("allocate", {"megabytes": 16}),
            ("processes", {}),
            ("fork", {"count": 10_000}),
            ("fork", {"count": 8}),
        ],
    )
    allowed, outside, beside, through, key, config, port, big, small, pids, bomb, few = said
    assert allowed == "ok" and (project / "out" / "allowed.txt").read_text() == "fine"
    assert outside == "refused: Read-only file system"
    assert not (project / "outside.txt").exists()
    # beside the project is the sandbox's private /tmp: what is written there never leaves it
    assert beside in ("ok", "refused: Read-only file system")
    assert not (project.parent / "beside-the-project.txt").exists()
    assert through == "refused: Read-only file system"  # a link made inside cannot widen it
    assert not (project / "through.txt").exists()
    assert key == "refused: No such file or directory"  # the home is not there
    assert config.startswith("version: 1")  # the project is readable
    assert port.startswith("refused:")  # no network, not even loopback
    assert big == "refused: MemoryError" and small == "ok"
    assert max(pids) < 10 and os.getpid() not in pids  # no other process is visible
    # a fork bomb ends at the server's process limit (its pids cgroup), not the machine's
    started = int(bomb.split(";")[0].removeprefix("started "))
    assert bomb.endswith("refused: Resource temporarily unavailable") and started < 24, bomb
    assert few == "started 8"  # what it started has ended: the limit counts what runs


def test_a_server_writes_where_its_agents_rules_bound_the_paths_and_nowhere_else(
    project: Path, run: Run
) -> None:
    """No `write:` declared: an agent allowed `hostile.write` on `drawn/**` only gives the
    server `drawn/` to write in; a link made there cannot lead out; an agent allowed the same
    tool without a path bound gives it nothing (the project stays read-only)."""
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          hostile: {{command: {sys.executable}, args: ["{HOSTILE}"]}}
        agents:
          bounded:
            allow:
              - {{tool: hostile.write, args: {{path: {{path: "drawn/**"}}}}}}
              - hostile.link_and_write
          unbounded: {{allow: [hostile.write]}}
        policy: {{default: deny, sandbox: required}}
        """,
    )
    calls = [
        ("write", {"path": "drawn/ok.txt", "text": "fine"}),
        ("link_and_write", {"folder": "drawn", "target": "..", "name": "through.txt"}),
    ]
    written, through = _batch(project, run, calls, agent="bounded")
    assert written == "ok" and (project / "drawn" / "ok.txt").read_text() == "fine"
    assert through == "refused: Read-only file system"
    assert not (project / "through.txt").exists()
    [unbounded] = _batch(project, run, calls[:1], agent="unbounded")
    assert unbounded == "refused: Read-only file system"
    explained = run("policy", "explain", "--agent", "bounded", "hostile.write")
    assert "sandbox: writes drawn;" in explained.out, explained.out


def test_governed_files_stay_read_only_in_a_writable_project(project: Path, run: Run) -> None:
    _config(project, '{write: ["."]}')
    (project / ".mcp.json").write_text("{}")
    said = _batch(
        project,
        run,
        [
            ("write", {"path": "notes.txt", "text": "fine"}),
            ("write", {"path": "bundlectl.yaml", "text": "agents: {}"}),
            ("write", {"path": ".mcp.json", "text": "{}"}),
        ],
    )
    assert said == ["ok", "refused: Read-only file system", "refused: Read-only file system"]
    assert (project / "notes.txt").read_text() == "fine"
    assert "hostile" in (project / "bundlectl.yaml").read_text()


def _served(project: Path, home: Path) -> Any:
    """`serve` over stdio for the agent `bot` of the project, its state in `home`."""
    from mcp import StdioServerParameters

    return StdioServerParameters(
        command=PY,
        args=["-m", "bundlectl", "serve", "--agent", "bot"],
        cwd=str(project),
        env={**os.environ, "BUNDLECTL_HOME": str(home)},
    )


def test_the_gateway_runs_its_servers_in_the_same_sandbox(project: Path, tmp_path: Path) -> None:
    _config(project, "{write: [out]}")

    async def session() -> list[str]:
        async with connected(_served(project, tmp_path / "state")) as client:
            return [
                texts(await client.call_tool(name, args))[0]
                for name, args in (
                    ("hostile__write", {"path": "out/a.txt"}),
                    ("hostile__write", {"path": "b.txt"}),  # a warm call: the same process
                )
            ]

    assert anyio.run(session) == ["ok", "refused: Read-only file system"]
    assert (project / "out" / "a.txt").exists() and not (project / "b.txt").exists()


def test_without_bubblewrap_required_refuses_and_on_warns(
    project: Path, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BUNDLECTL_BWRAP", "")  # as on a machine without it
    _config(project, "{write: [out]}", mode="required")
    refused = run("exec", "--agent", "bot", "hostile.write", "path=x.txt")
    assert refused.code == 5
    assert "policy.sandbox is required and bubblewrap (bwrap) is not available" in refused.err
    assert not (project / "x.txt").exists()
    _config(project, "{write: [out]}", mode="on")
    warned = run("exec", "--agent", "bot", "hostile.write", "path=x.txt")
    assert warned.code == 0, warned.err
    assert "warning: server 'hostile' runs unsandboxed: bubblewrap (bwrap)" in warned.err
    assert (project / "x.txt").exists()


def test_a_project_silent_on_the_sandbox_runs_its_servers_in_one(
    project: Path, run: Run, fake_home: Path, isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#55 item 1: `policy.sandbox` absent is `on`. The suite's machine says off for its other
    projects (conftest.py); this one is a machine that says nothing."""
    monkeypatch.delenv("BUNDLECTL_SANDBOX")
    _config(project, None, mode=None)
    said = run("exec", "--agent", "bot", "hostile.read", "path=~/.ssh/id_rsa")
    assert said.code == 0, said.err
    assert "No such file or directory" in said.out, said.out  # the home is an empty one
    said = run("exec", "--agent", "bot", "hostile.write", "path=x.txt")
    assert "refused: Read-only file system" in said.out, said.out
    assert not (project / "x.txt").exists()
    # That bubblewrap works on this machine is asked once, and remembered until it restarts.
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert boot in (isolated_home / "cache" / "bwrap-works").read_text()
    shown = run("resolve")
    assert "sandbox: writes nothing; no network" in shown.out, shown.out
    # A client would start it outside the sandbox: its export goes through the gateway.
    exported = run("export", "claude-code", "--agent", "bot")
    assert exported.code == 0, exported.err
    assert "server 'hostile' (policy.sandbox)" in exported.err
    entry = json.loads((project / ".mcp.json").read_text())["mcpServers"]["bundlectl"]
    assert entry["args"] == ["serve", "--agent", "bot"]

    # The machine's say, for a project that says nothing: off; a project's own word stands.
    monkeypatch.setenv("BUNDLECTL_SANDBOX", "off")
    said = run("exec", "--agent", "bot", "hostile.write", "path=x.txt")
    assert said.out.strip() == "ok", said.out
    assert (project / "x.txt").exists()
    _config(project, "{}", mode="on")
    said = run("exec", "--agent", "bot", "hostile.write", "path=y.txt")
    assert "refused: Read-only file system" in said.out, said.out
    monkeypatch.setenv("BUNDLECTL_SANDBOX", "loose")
    wrong = run("exec", "--agent", "bot", "hostile.write", "path=y.txt")  # the project says on
    assert wrong.code == 0, wrong.err
    _config(project, "{}", mode=None)
    wrong = run("exec", "--agent", "bot", "hostile.write", "path=y.txt")
    assert wrong.code == 2
    assert "error: $BUNDLECTL_SANDBOX is 'loose', which is not a sandbox mode" in wrong.err
    assert "hint: set it to off, on or required" in wrong.err


def test_a_bubblewrap_the_machine_does_not_let_make_a_sandbox_is_said_once(
    project: Path, run: Run, tmp_path: Path, isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A machine that forbids the namespaces bubblewrap needs (a container without privileges,
    AppArmor's restriction on Ubuntu 24.04): `on` warns with bubblewrap's own words and runs the
    server as before, `required` refuses it; neither fails on bubblewrap's error later."""
    refusing = tmp_path / "bin" / "bwrap"
    refusing.parent.mkdir()
    refusing.write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to create a new namespace' >&2\nexit 1\n"
    )
    refusing.chmod(0o755)
    monkeypatch.setenv("BUNDLECTL_BWRAP", str(refusing))
    _config(project, "{}", mode="on")
    warned = run("exec", "--agent", "bot", "hostile.write", "path=x.txt")
    assert warned.code == 0, warned.err
    assert (
        "warning: server 'hostile' runs unsandboxed: bubblewrap cannot make a sandbox here "
        "(bwrap: No permissions to create a new namespace)"
    ) in warned.err
    assert (project / "x.txt").exists()
    _config(project, "{}", mode="required")
    refused = run("exec", "--agent", "bot", "hostile.write", "path=y.txt")
    assert refused.code == 5
    assert "policy.sandbox is required and bubblewrap cannot make a sandbox here" in refused.err
    assert not (project / "y.txt").exists()
    assert not (isolated_home / "cache" / "bwrap-works").exists()  # a no is asked again


def test_a_third_party_server_works_unchanged_in_its_sandbox(project: Path, run: Run) -> None:
    write(
        project / "bundlectl.yaml",
        """
        version: 1
        servers:
          time: {command: mcp-server-time}
        agents:
          bot: {allow: [time.get_current_time]}
        policy: {default: deny, sandbox: required}
        """,
    )
    result = run("exec", "--agent", "bot", "time.get_current_time", "timezone=UTC")
    assert result.code == 0, result.err
    assert '"timezone": "UTC"' in result.out


def _container_runtime(tmp_path: Path) -> tuple[Path, Path]:
    """A `docker` on the machine: it writes the arguments its `run` was given, then runs the
    kitchen server in the foreground as `docker run -i` would (the suite has no container
    runtime; what is checked is what bundlectl asks of one)."""
    runtime, said = tmp_path / "bin" / "docker", tmp_path / "docker-argv.txt"
    runtime.parent.mkdir()
    runtime.write_text(
        f"#!/bin/sh\nprintf '%s\\n' \"$@\" > '{said}'\nexec '{sys.executable}' "
        f"'{TEST_SERVERS / 'kitchen.py'}'\n"
    )
    runtime.chmod(0o755)
    return runtime, said


@pytest.mark.parametrize("mode", ["on", "required"])
def test_a_container_keeps_its_runtimes_isolation_with_the_profile_as_its_options(
    project: Path, run: Run, tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#55 item 6: a server started by `docker run` is not put under bubblewrap (the client is
    not the server): its `run` gets no network, a read-only root with a private /tmp, the
    memory limit and the declared paths — where the configured options do not already say
    otherwise. Bubblewrap's absence changes nothing for it."""
    runtime, said = _container_runtime(tmp_path)
    (project / "docs").mkdir()
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          boxed:
            command: {runtime}
            args: [run, -i, --rm, -e, "MODE=1", mcp/kitchen, --network, inside]
            sandbox: {{write: [docs], memory: 512M}}
          declared:
            command: {runtime}
            args: [run, -it, --read-only=false, "--memory=1g", mcp/kitchen]
            sandbox: {{network: host}}
        agents:
          bot: {{allow: ["boxed.*", "declared.*"]}}
        policy: {{default: deny, sandbox: {mode}}}
        """,
    )
    monkeypatch.setenv("BUNDLECTL_BWRAP", "")  # no bubblewrap here: containers do not need it
    result = run("exec", "--agent", "bot", "boxed.echo", "text=hi")
    assert result.code == 0, result.err
    assert "hi" in result.out and "unsandboxed" not in result.err
    docs = (project / "docs").resolve()
    assert said.read_text().split("\n")[:-1] == [
        "run",
        *["--network", "none", "--read-only", "--tmpfs", "/tmp", "--memory", "512m"],
        *["--volume", f"{docs}:{docs}"],
        *["-i", "--rm", "-e", "MODE=1", "mcp/kitchen", "--network", "inside"],
    ]
    result = run("exec", "--agent", "bot", "declared.echo", "text=hi")
    assert result.code == 0, result.err
    assert said.read_text().split() == [
        *["run", "-it", "--read-only=false", "--memory=1g", "mcp/kitchen"]
    ]
    shown = run("resolve", "--format", "json")
    assert shown.code == 0, shown.err
    sandbox = json.loads(shown.out)["servers"]["boxed"]["sandbox"]
    assert sandbox["container"] is True
    assert sandbox["said"].endswith("in its container (the runtime's isolation)"), sandbox
    explained = run("policy", "explain", "--agent", "bot", "boxed.echo")  # where a call runs
    assert f"  sandbox: {sandbox['said']}" in explained.out.splitlines(), explained.out
    as_json = run("policy", "explain", "--agent", "bot", "boxed.echo", "--format", "json")
    assert json.loads(as_json.out)["sandbox"] == sandbox


def test_an_export_gives_a_sandboxed_server_to_the_gateway_and_a_container_its_options(
    project: Path, run: Run, tmp_path: Path
) -> None:
    """#55 item 5: a client that starts a server itself starts it outside bundlectl's sandbox,
    so `export` sends an agent with a sandboxed server through the gateway (and `--via direct`
    says why not); a container's entry carries the profile as its `run` options."""
    runtime, _ = _container_runtime(tmp_path)
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          hostile:
            command: {sys.executable}
            args: ["{HOSTILE}"]
          boxed:
            command: {runtime}
            args: [run, -i, --rm, mcp/kitchen]
        agents:
          bot: {{allow: ["hostile.*"]}}
          boxer: {{allow: ["boxed.*"]}}
        policy: {{default: deny, sandbox: on}}
        """,
    )
    refused = run("export", "claude-code", "--agent", "bot", "--via", "direct")
    assert refused.code != 0
    assert "server 'hostile' (policy.sandbox): a client starts its servers itself" in refused.err
    auto = run("export", "claude-code", "--agent", "bot")
    assert auto.code == 0, auto.err
    entries = json.loads((project / ".mcp.json").read_text())["mcpServers"]
    assert list(entries) == ["bundlectl"] and "outside bundlectl's sandbox" in auto.err + auto.out
    direct = run("export", "claude-code", "--agent", "boxer", "--via", "direct")
    assert direct.code == 0, direct.err
    boxed = json.loads((project / ".mcp.json").read_text())["mcpServers"]["boxed"]
    assert boxed["args"][:6] == ["run", "--network", "none", "--read-only", "--tmpfs", "/tmp"]
    assert boxed["args"][-3:] == ["-i", "--rm", "mcp/kitchen"]


def test_the_sandbox_is_under_review_in_the_lock(project: Path, run: Run) -> None:
    """Turning the sandbox off, or widening a server's, fails `lock --check` like a grant."""
    _config(project, "{write: [out]}")
    assert run("lock").code == 0
    assert run("lock", "--check").code == 0
    _config(project, "{write: [out]}", mode="off")
    off = run("lock", "--check")
    assert off.code == 1 and "policy.sandbox" in off.err
    _config(project, "{write: [out, .]}")
    widened = run("lock", "--check")
    assert widened.code == 1 and "server hostile" in widened.err, widened.err


def test_a_write_path_that_cannot_be_made_is_a_clear_error(project: Path, run: Run) -> None:
    (project / "notes").write_text("a file where the folder would go")
    _config(project, "{write: [notes/today]}")
    result = run("exec", "--agent", "bot", "hostile.write", "path=notes/today/x.txt")
    assert result.code == 5, result.err
    assert "server 'hostile' was not started: its sandbox cannot be set up" in result.err
    assert "check servers.hostile.sandbox" in result.err
    assert "Traceback" not in result.err


@pytest.fixture
def web() -> Iterator[int]:
    """A plain HTTP server on the host's loopback: what an allowed host answers."""
    import http.server
    import threading

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"hello from the host"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.mark.usefixtures("fake_home")
def test_a_server_reaches_the_hosts_its_network_lists_through_its_proxy_and_no_other(
    project: Path, run: Run, web: int, open_port: int, isolated_home: Path
) -> None:
    _config(project, f'{{network: ["127.0.0.1:{web}"]}}')
    said = _batch(
        project,
        run,
        [
            ("fetch", {"url": f"http://127.0.0.1:{web}/hello"}),  # plain HTTP, through it
            ("tunnel", {"host": "127.0.0.1", "port": web}),  # CONNECT, as TLS clients do
            ("fetch", {"url": f"http://127.0.0.1:{open_port}/"}),  # a port it was not given
            ("fetch", {"url": "http://example.invalid/"}),  # a host not on its list
            ("tunnel", {"host": "localhost.example.invalid", "port": web}),
            ("connect", {"port": web}),  # straight, past the proxy: it has no network
        ],
    )
    plain, tunnelled, other_port, other_host, other_tunnel, straight = said
    assert plain == "200 hello from the host"
    assert tunnelled == "HTTP/1.1 200 Connection Established / HTTP/1.0 200 OK"
    assert other_port == other_host == "refused: 403"
    assert other_tunnel == "HTTP/1.1 403 Forbidden"
    assert straight.startswith("refused:")
    denied = [
        r
        for r in audit_records(isolated_home / "state" / "audit.jsonl")
        if r["outcome"] == "egress-denied"
    ]
    assert [(r["server"], r["remote"]) for r in denied] == [
        ("hostile", "127.0.0.1"),
        ("hostile", "example.invalid"),
        ("hostile", "localhost.example.invalid"),
    ]
    assert all(r["decision"] == "deny" for r in denied)
    # the proxy's socket folder is gone with the server
    assert not list(Path(tempfile.gettempdir()).glob("bundlectl-egress-hostile-*"))


def test_the_gateway_gives_its_servers_the_same_way_out(
    project: Path, tmp_path: Path, web: int
) -> None:
    _config(project, f'{{network: ["127.0.0.1:{web}"]}}')
    home = tmp_path / "state"

    async def session() -> list[str]:
        async with connected(_served(project, home)) as client:
            return [
                texts(await client.call_tool("hostile__fetch", {"url": url}))[0]
                for url in (f"http://127.0.0.1:{web}/", "http://example.invalid/")
            ]

    assert anyio.run(session) == ["200 hello from the host", "refused: 403"]
    records = [
        json.loads(line) for line in (home / "state" / "audit.jsonl").read_text().splitlines()
    ]
    assert [r["remote"] for r in records if r["outcome"] == "egress-denied"] == ["example.invalid"]


@pytest.mark.parametrize(
    ("host", "port", "allowed"),
    [
        ("api.github.com", 443, True),
        ("API.GitHub.com.", 80, True),  # case and a trailing dot do not matter
        ("api.github.com", 22, False),  # a host without a port: 443 and 80 only
        ("raw.githubusercontent.com", 443, True),
        ("githubusercontent.com", 443, False),  # *.domain: below it, not the domain itself
        ("raw.githubusercontent.com", 80, False),
        ("evilgithubusercontent.com", 443, False),
        ("api.github.com.evil.example", 443, False),
        ("127.0.0.1", 8080, True),
        ("127.0.0.1", 8081, False),
    ],
)
def test_a_host_list_allows_exactly_what_it_names(host: str, port: int, allowed: bool) -> None:
    from bundlectl.config.hosts import allows

    patterns = ["api.github.com", "*.githubusercontent.com:443", "127.0.0.1:8080"]
    assert allows(patterns, host, port) is allowed


def test_a_host_that_is_no_host_is_a_positioned_error(project: Path, run: Run) -> None:
    _config(project, '{network: [api.github.com, "https://example.com/x"]}')
    result = run("resolve")
    assert result.code == 2
    assert "bundlectl.yaml:6:24: servers.hostile.sandbox.network:" in result.err, result.err
    assert "a host, not a URL" in result.err


def test_a_container_with_a_host_list_is_not_started(project: Path) -> None:
    from bundlectl.errors import ServerError
    from bundlectl.mcpio.sandbox import Profile, wrap

    profile = Profile("web", str(project), network=("api.github.com",), container=True)
    with pytest.raises(ServerError, match="a list of hosts is for servers bubblewrap runs"):
        wrap(profile, ["docker", "run", "--rm", "-i", "image"], cwd=str(project), home=None)


@pytest.mark.parametrize(
    ("target", "status"),
    [
        ("[::1]:9", {"502", "200"}),  # allowed: reached (or refused by the host: nothing there)
        ("127.0.0.1:9", {"403"}),  # another host than the one allowed
        ("*.example:443", {"400"}),  # a pattern is no host
        ("example.com", {"400"}),  # no port
    ],
)
def test_the_proxy_reads_the_host_a_request_names(target: str, status: set[str]) -> None:
    """The egress proxy on its own (no sandbox): what a CONNECT names is decided as a host."""
    from bundlectl.mcpio.egress import Egress

    refused: list[str] = []
    egress = Egress("web", ["[::1]:9"], refused.append)
    try:
        with socket.socket(socket.AF_UNIX) as conn:
            conn.connect(egress.path)
            conn.sendall(f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
            said = conn.recv(4096).split(b" ")[1].decode()
    finally:
        egress.close()
    assert said in status, said
    assert refused == (["127.0.0.1"] if said == "403" else [])


def test_a_head_start_kept_unsandboxed_is_not_taken_once_the_machine_sandboxes(
    project: Path, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`exec`'s head start runs the launch kept last time before the project loads: one kept
    while this machine said `BUNDLECTL_SANDBOX=off` must not start (unsandboxed) once it no
    longer does — the machine's say is one of the kept call's inputs."""
    recorded = project / "starts"
    recorded.mkdir()
    # Each start says so first thing (a shell, before the server's imports): a start from the
    # kept launch is stopped only once the project has loaded, well after that. (This Python's
    # environment is named as a folder, which the sandbox shows wherever it is.)
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          kitchen:
            command: sh
            args: [-c, 'echo $$ >> starts/pids.txt; exec "$1/bin/python" "$2"', sh,
                   "{sys.prefix}", "{TEST_SERVERS / "kitchen.py"}"]
            sandbox: {{write: [starts]}}
        agents:
          bot: {{allow: [kitchen.echo]}}
        policy: {{default: deny}}
        """,
    )
    assert run("exec", "--agent", "bot", "kitchen.echo", "text=a").code == 0  # kept: unsandboxed
    monkeypatch.delenv("BUNDLECTL_SANDBOX")
    again = run("exec", "--agent", "bot", "kitchen.echo", "text=b")
    assert (again.code, again.out) == (0, "b\n"), again.err
    # Two starts: the first call's, and the second's in its sandbox — none from the kept launch.
    assert len((recorded / "pids.txt").read_text().split()) == 2


def test_a_sandboxed_call_allowed_last_time_starts_in_its_sandbox_before_the_project_loads(
    project: Path, run: Run, isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`exec`'s head start (tests/cli/test_exec.py) for a server in the sandbox, the default:
    the same call again starts its server, sandboxed, before the project is loaded."""
    from tests.cli.test_exec import loaded_at_start

    monkeypatch.delenv("BUNDLECTL_SANDBOX")
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          kitchen: {{command: {sys.executable}, args: ["{TEST_SERVERS / "kitchen.py"}"]}}
          hostile: {{command: {sys.executable}, args: ["{HOSTILE}"]}}
        agents:
          bot: {{allow: [kitchen.echo, hostile.write]}}
        policy: {{default: deny}}
        """,
    )
    watched = "pydantic ruamel.yaml bundlectl.config.project bundlectl.resolve.resolved"
    args = ("-a", "bot", "kitchen.echo", "text=hi")
    assert run("exec", *args).out == "hi\n"  # kept (in this process: the project loaded first)
    assert loaded_at_start(project, isolated_home, watched, *args) == ("0",)
    for _ in range(2):  # the second from the kept launch: in its sandbox as the first
        said = run("exec", "-a", "bot", "hostile.write", "path=x.txt")
        assert "refused: Read-only file system" in said.out, said.out + said.err
    assert not (project / "x.txt").exists()


def test_the_suites_other_third_party_servers_work_in_the_default_sandbox(
    project: Path, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mcp-server-git (the code-review bundle's, as it declares) and the reference
    server-everything (Node), each in the sandbox a project silent on it gets."""
    from tests.gateway.test_gateway_everything import peer

    monkeypatch.delenv("BUNDLECTL_SANDBOX")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # node; no uvx: the git server runs from here
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        bundles: [code-review]
        servers:
          everything: {{command: {peer("mcp-server-everything")}}}
        agents:
          bot: {{allow: [git.git_status, everything.echo]}}
        policy: {{default: deny}}
        """,
    )
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    shown = run("resolve").out
    assert shown.count("    sandbox: writes nothing;") == 2, shown
    assert "unsandboxed" not in shown, shown
    status = run("exec", "-a", "bot", "git.git_status", f"repo_path={project}")
    assert status.code == 0, status.err
    assert status.out.startswith("Repository status:"), status.out
    echoed = run("exec", "-a", "bot", "everything.echo", "message=boxed")
    assert echoed.code == 0, echoed.err
    assert "boxed" in echoed.out


def test_a_group_another_live_process_just_made_is_not_swept_away(tmp_path: Path) -> None:
    """Each sandboxed start sweeps away the empty pids groups earlier starts left. A group a
    live process made a moment ago is empty too until its server joins it: swept, that start
    failed ("Exception occurred in preexec_fn", two `exec`s at once — seen in the suite). Only
    the groups of processes that have ended go, and this process's own once their server has
    ended (one left behind then, not empty yet, would otherwise stay for the process's life)."""
    from bundlectl.mcpio import pids_groups

    gone = subprocess.Popen(["true"])
    gone.wait()
    ended = gone.pid  # a process that has ended
    mine = tmp_path / f"bundlectl-{os.getpid()}-1-hostile"  # its server has not ended
    done = tmp_path / f"bundlectl-{os.getpid()}-2-hostile"  # released while still busy
    other = tmp_path / f"bundlectl-{os.getppid()}-7-kitchen"  # another live process's
    left = tmp_path / f"bundlectl-{ended}-3-hostile"
    busy = tmp_path / f"bundlectl-{ended}-4-hostile"
    for group in (mine, done, other, left, busy):
        group.mkdir()
    (busy / "cgroup.procs").write_text("")  # not empty: the kernel would say busy
    pids_groups._HELD.update({mine.name, done.name})
    (done / "cgroup.procs").write_text("")
    pids_groups.release_group(done / "cgroup.procs")  # busy: stays, no longer held
    (done / "cgroup.procs").unlink()  # its last process ended since
    try:
        pids_groups.sweep_groups(tmp_path)
    finally:
        pids_groups._HELD.discard(mine.name)
    assert mine.is_dir() and other.is_dir() and busy.is_dir()
    assert not left.exists() and not done.exists()
