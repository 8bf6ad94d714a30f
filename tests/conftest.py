"""Shared fixtures. Every test gets its own BUNDLECTL_HOME; the real home is unreachable."""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import platformdirs
import pytest
from ruamel.yaml import YAML

from bundlectl.cli.main import main

REPO = Path(__file__).resolve().parent.parent
# The MCP servers the tests start (kitchen, misbehave, conformance, ...).
TEST_SERVERS = REPO / "tests" / "servers"


def over_the_pipes(request_id: str) -> bool:
    """Whether a stdio server saw this request id from a tool call the gateway made over its
    pipes (`mcpio/pipe_session.py`), whichever door the call came in by."""
    return re.fullmatch(r"bundlectl-pipe-\d+", request_id) is not None


def admitted(
    pipeline: Any,
    agent: str,
    server: str,
    tool: str,
    arguments: dict[str, Any] | None = None,
    *,
    call: Any = None,
) -> Any:
    """The pipeline's judgement and admission of a call (`call`, a `ToolCall`: made here when
    not given), as the sequence makes them for a door whose confirmations answer at once
    (`exec`): the decision, or the refusal raised."""
    from bundlectl.calls.calldata import ToolCall
    from bundlectl.calls.confirm import run_to_end

    call = call or ToolCall(agent, server, tool, dict(arguments or {}))
    interactive = pipeline.confirm is not None or pipeline.approvals is not None
    decision = pipeline.judge(
        agent, server, tool, interactive=interactive, arguments=arguments or {}, call=call
    )
    return run_to_end(pipeline.admission(decision, call, pipeline.confirm))


@functools.cache
def tls() -> Any:
    """One TLS context for the tests' HTTP clients (httpx makes one per client, reading the
    whole CA bundle: ~60 ms each, some hundreds of clients a run)."""
    import httpx2

    return httpx2.create_ssl_context()


# A 2025-11-25 `initialize` request, for tests that speak raw JSON-RPC to a server or gateway.
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}


@pytest.fixture(autouse=True)
def _isolated_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Point every bundlectl location at a temp dir and make platformdirs unusable."""
    home = tmp_path_factory.mktemp("bundlectl-home")
    _coverage_under_the_suites_name()
    monkeypatch.setenv("BUNDLECTL_HOME", str(home))
    for var in ("BUNDLECTL_CONFIG", "BUNDLECTL_AUDIT_LOG", "BUNDLECTL_DEBUG"):
        monkeypatch.delenv(var, raising=False)

    def unreachable(*args: object, **kwargs: object) -> str:
        raise AssertionError("a test tried to use the real home directory")

    for name in ("user_config_dir", "user_data_dir", "user_state_dir", "user_cache_dir"):
        monkeypatch.setattr(platformdirs, name, unreachable)
    return home


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()

    @property
    def err_lines(self) -> list[str]:
        return self.err.splitlines()


Run = Callable[..., Result]


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Run:
    """Run the real CLI entry point in-process; returns exit code, stdout and stderr."""

    def invoke(*args: str) -> Result:
        capsys.readouterr()
        code = main(list(args))
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return invoke


@pytest.fixture(scope="session")
def mypy_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One mypy cache for the run, shared by the xdist workers: the standard library's stubs are
    analysed once (6 s of CPU), not by every test that type-checks generated code. mypy checks
    each cached module against its source file's path and hash, so nothing stale is trusted."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "mypy-cache"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty project folder that is the working directory."""
    root = tmp_path / "project"
    root.mkdir()
    monkeypatch.chdir(root)
    return root


def send_json(handler: http.server.BaseHTTPRequestHandler, value: Any) -> None:
    """Answer a request of a loopback test server with `value` as JSON."""
    data = json.dumps(value).encode()
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def make_registry(folder: Path, index: dict[str, dict[str, dict[str, Any]]]) -> Path:
    """Materialise an index (name → version → manifest fields) as a registry folder."""
    yaml = YAML(typ="safe", pure=True)
    for name, versions in index.items():
        for version, fields in versions.items():
            target = folder / name / f"{version}.yaml"
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("w") as handle:
                yaml.dump({"name": name, "version": version, **(fields or {})}, handle)
    return folder


def load_yaml(path: Path) -> Any:
    return YAML(typ="safe", pure=True).load(path.read_text())


# Where a process of the suite could write in the real home folder: bundlectl's platformdirs
# folders, and the peers' own (the Inspector keeps a catalog in ~/.mcp-inspector).
_REAL_HOME = Path.home()
_WATCHED = [
    Path(platformdirs.user_config_dir("bundlectl")),
    Path(platformdirs.user_data_dir("bundlectl")),
    Path(platformdirs.user_state_dir("bundlectl")),
    Path(platformdirs.user_cache_dir("bundlectl")),
    _REAL_HOME / ".mcp-inspector",
]
_XDG = ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME")


def _snapshot() -> dict[str, tuple[int, int]]:
    """Every file and folder under the watched places, with its mtime and size."""
    seen: dict[str, tuple[int, int]] = {}
    for top in _WATCHED:
        for path in [top, *top.rglob("*")] if top.exists() else []:
            stat = path.lstat()
            seen[str(path)] = (stat.st_mtime_ns, stat.st_size)
    return seen


def _throwaway_home(config: pytest.Config) -> None:
    """Every process the suite starts (serve, the console script, the Node peers, whatever
    they start with a filtered environment that keeps HOME) gets a throw-away HOME."""
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist)
        config.stash[_BEFORE] = _snapshot()
    home = Path(tempfile.mkdtemp(prefix="bundlectl-suite-home-"))
    config.stash[_HOME] = home
    os.environ["HOME"] = str(home)
    for var in _XDG:
        os.environ[var] = str(home / f".{var.lower()}")


_BEFORE = pytest.StashKey[dict[str, tuple[int, int]]]()
_HOME = pytest.StashKey[Path]()


def pytest_unconfigure(config: pytest.Config) -> None:
    home = config.stash.get(_HOME, None)
    if home is not None:
        shutil.rmtree(home, ignore_errors=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The real home folder is as it was: a run that touched it fails, naming what changed."""
    before = session.config.stash.get(_BEFORE, None)
    if before is None:
        return
    after = _snapshot()
    changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    if changed:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        message = "the suite touched the real home folder: " + ", ".join(changed)
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_line(f"FAILED {message}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _coverage_under_the_suites_name() -> None:
    """The processes the suite starts find coverage's configuration under the suite's name
    (tests/_site/_untraced.py says why), each time coverage has put it back (it does when it
    starts)."""
    config = os.environ.pop("COVERAGE_PROCESS_CONFIG", None)
    if config:
        os.environ["BUNDLECTL_SUITE_COVERAGE"] = config


def pytest_configure(config: pytest.Config) -> None:
    _throwaway_home(config)
    _coverage_under_the_suites_name()
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        _fork_server()
    if not hasattr(config, "workerinput"):  # once, in the process that runs the workers
        _bytecode()
        if getattr(config.option, "numprocesses", None):
            _rewritten_tests(config)
        _precombined(config)
    # The processes the suite starts import third-party packages untraced by coverage
    # (tests/_site/sitecustomize.py says why); bundlectl in them is measured as before.
    site = str(Path(__file__).parent / "_site")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (site, os.environ.get("PYTHONPATH")) if p)
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    # `policy.sandbox` absent is `on`: the suite's projects that say nothing about the sandbox run
    # their servers as this machine's setting says, unsandboxed, so that they start warm in the
    # fork server (a sandboxed one has its own namespaces and cannot). The sandbox's tests say
    # `policy.sandbox`, and those of the default unset this (tests/mcpio/test_sandbox.py).
    os.environ["BUNDLECTL_SANDBOX"] = "off"
    if not hasattr(config, "workerinput") and getattr(config.option, "numprocesses", None):
        return  # xdist's controller runs no test: importing hypothesis (0.8 s) delays the workers
    # The same examples on every run and machine (a deterministic suite), no example database.
    from hypothesis import settings

    settings.register_profile("bundlectl", derandomize=True, database=None, deadline=None)
    settings.load_profile("bundlectl")


def _fork_server() -> None:
    """The fork server of the test servers and bundlectl's commands that talk to servers
    (tests/servers/_forkserver.py says why), one for every pytest process of this checkout and
    environment: started by the first, kept while any of them lives (each registers its pid)."""
    import fcntl

    sys.path.insert(0, str(TEST_SERVERS))
    try:
        from _forkserver import place
    finally:
        sys.path.remove(str(TEST_SERVERS))
    folder = place()
    os.environ["BUNDLECTL_SUITE_FORKSERVER"] = str(folder)  # for the processes the tests start
    (folder / "users").mkdir(parents=True, exist_ok=True)
    (folder / "users" / str(os.getpid())).touch()
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _answers(folder / "socket"):
            return  # running
        (folder / "socket").unlink(missing_ok=True)  # one whose server was killed
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("COVERAGE_") and k != "BUNDLECTL_SUITE_COVERAGE"
        }
        subprocess.run(  # it detaches at once
            [sys.executable, str(TEST_SERVERS / "_forkserver.py"), str(folder)],
            cwd=TEST_SERVERS,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            check=False,
        )
        deadline = time.monotonic() + 30  # under the lock: the other workers wait for it
        while not _answers(folder / "socket") and time.monotonic() < deadline:
            time.sleep(0.05)


def _answers(path: Path) -> bool:
    import socket

    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        probe.close()


def _rewritten_tests(config: pytest.Config) -> None:
    """The test modules with their asserts rewritten, kept once for every xdist worker: with
    PYTHONDONTWRITEBYTECODE set (as on CI machines) pytest keeps none, so each worker rewrote
    every module while collecting (5.1 s of CPU a worker; 2.1 s with them kept). pytest has no
    public call for this: its rewriting hook's own steps are used, and when they are not there
    (another pytest) the workers rewrite as before."""
    try:
        from _pytest.assertion.rewrite import (
            PYC_TAIL,
            _read_pyc,
            _rewrite_test,
            _write_pyc,
            assertstate_key,
            get_cache_dir,
        )

        state = config.stash[assertstate_key]
        found = []
        for folder_name, dirs, files in os.walk(Path(__file__).parent):
            dirs[:] = [d for d in dirs if d not in ("npm", "node_modules", "__pycache__")]
            found += [
                Path(folder_name) / f
                for f in files
                if f.endswith(".py") and (f.startswith("test_") or f == "conftest.py")
            ]
        for path in sorted(found):
            folder = get_cache_dir(path)
            pyc = folder / (path.name[:-3] + PYC_TAIL)
            if _read_pyc(path, pyc) is None:
                folder.mkdir(exist_ok=True)
                source_hash, code = _rewrite_test(path, config)
                _write_pyc(state, code, source_hash, pyc)
    except (ImportError, KeyError, AttributeError, TypeError, OSError, SyntaxError):
        return  # the workers rewrite them, as pytest does


def _bytecode() -> None:
    """bundlectl's modules compiled once, before the suite starts hundreds of processes that
    import them (`bundlectl`, `serve`, code mode): a fresh checkout has no bytecode, and with
    PYTHONDONTWRITEBYTECODE set (as on CI machines) each process compiled every module it
    imported again — a tenth of the CPU of the gateway and CLI tests (measured: 4 min 21 s of
    CPU without, 3 min 56 s with, `tests/cli tests/gateway`)."""
    import compileall

    compileall.compile_dir(REPO / "bundlectl", quiet=2)


def _precombined(config: pytest.Config) -> None:
    """Coverage's data from ended processes combined while the tests run (tests/_precombine.py
    says why), when the run measures coverage — under xdist only, by its controller, which runs
    no test: a thread beside the tests would make each `pty.fork` a fork of a threaded process
    (a DeprecationWarning on Python 3.12+, an error here)."""
    workers = getattr(config.option, "numprocesses", None)
    if not workers or not config.pluginmanager.hasplugin("_cov"):
        return
    import coverage

    current = coverage.Coverage.current()
    if current is None:
        return
    from tests._precombine import Precombiner

    precombiner = Precombiner(current.config.data_file)
    precombiner.start()
    config.stash[_PRECOMBINER] = precombiner


_PRECOMBINER = pytest.StashKey[Any]()


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtestloop(session: pytest.Session) -> Any:
    """Inside pytest-cov's wrapper: the pre-combining stops (a round under way ends) before
    pytest-cov combines what is left."""
    try:
        return (yield)
    finally:
        precombiner = session.config.stash.get(_PRECOMBINER, None)
        if precombiner is not None:
            precombiner.stop()


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """A test marked `no_cover` runs untraced. pytest-cov pauses its coverage for it, but in an
    xdist worker a second one — started by coverage's subprocess patch as the worker started —
    then takes the tracing over; this wrapper, inside pytest-cov's, lifts the tracer for the
    test and puts it back."""
    if item.get_closest_marker("no_cover") is None:
        yield
        return
    trace = sys.gettrace()
    sys.settrace(None)
    try:
        yield
    finally:
        sys.settrace(trace)


@pytest.fixture
def isolated_home(_isolated_home: Path) -> Path:
    """The temporary BUNDLECTL_HOME of this test."""
    return _isolated_home


def audit_records(path: Path) -> list[dict[str, Any]]:
    """The audit log's records of outcomes: every `pending` record (a call let through) is
    checked to be completed by a later record under the same call id, and left out."""
    import json

    records = [json.loads(line) for line in path.read_text().splitlines()]
    open_calls: set[str] = set()
    found = []
    for record in records:
        call = record.get("call")
        if record["outcome"] == "pending":
            assert call and call not in open_calls, record
            open_calls.add(call)
            continue
        if call is not None:
            assert call in open_calls, f"an outcome without its pending record: {record}"
            open_calls.discard(call)
        found.append(record)
    assert not open_calls, f"calls let through without an outcome: {open_calls}"
    return found


def _redis_server() -> str:
    found = shutil.which("redis-server") or "/usr/bin/redis-server"
    if not Path(found).exists():  # .ci/run installs Debian's redis-server
        raise AssertionError("redis-server is not installed: apt-get install redis-server")
    return found


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """A real redis-server on a Unix socket of this test (no port to race for), no disk."""
    socket_path = tmp_path / "redis.sock"
    process = subprocess.Popen(
        [
            _redis_server(),
            "--port",
            "0",
            "--unixsocket",
            str(socket_path),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"unix://{socket_path}"
    import redis

    deadline = time.monotonic() + 30
    while True:
        try:
            if redis.Redis.from_url(url).ping():
                break
        except redis.RedisError:
            pass
        assert process.poll() is None and time.monotonic() < deadline, "redis did not start"
        time.sleep(0.01)
    try:
        yield url
    finally:
        process.terminate()
        process.wait(10)
