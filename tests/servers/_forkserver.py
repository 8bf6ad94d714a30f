"""A fork server for the test servers and bundlectl's own commands: each starts warm.

The suite starts a test server (kitchen, conformance, hostile, ...) some 250 times, as a real
process on real pipes, and nearly all of each start was importing the MCP SDK (~1.3 s of CPU:
a fifth of the suite's CPU). The fork server is one Python process that imported the SDK once;
conftest.py starts it for the run. A test server is still started as the gateway starts it (its
own command line, environment, folder and pipes), and `_unmeasured`, which every test server
imports first, calls `hand_over()`: that process — the launcher — passes its stdin, stdout and
stderr, arguments, folder, environment and resource limits over a Unix socket, and the fork
server forks a copy that runs the script with them. The launcher stays as the server's process
for whoever started it: a signal it gets is passed on, it exits as the server did (its code, or
the same signal), and the copy's `os.getpid()` names it. The copy is killed when the launcher
dies, however it dies.

bundlectl's commands that talk to servers (`serve`, `exec`, ...: `tests/_site/sitecustomize.py`
names them) start ~100 times each run and spent ~1.5 s of CPU a start importing the SDK, the
HTTP server and the rest before running a line of bundlectl: they are handed over the same way,
with two differences. The copy is measured by coverage like any process the suite starts (the
fork server imported the modules of bundlectl these commands start with, unmeasured: it is
started anew when a source file changes), and a signal — or the kill when the launcher dies —
goes to the copy alone, not to its process group: the servers the gateway starts must stop
because the gateway stops them, as they must when it runs on its own.

Nothing is handed over — the launcher runs the program itself, as before — when no fork server
runs, when the launcher runs with other interpreter flags, or when it is not in the fork
server's namespaces (a server in bundlectl's sandbox: bubblewrap gives it its own mounts and
processes; the copy would be outside them).

    python _forkserver.py SOCKET   # conftest.py: runs until no registered pytest process lives
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import select
import signal
import socket
import sys
import time

# A launcher imports this module in every test server and warm command the suite starts (~500
# a run): it loads nothing the interpreter has not loaded at start-up but the sockets and JSON it
# needs (`pathlib` and `typing` cost ~25 ms a start; the fork server's side imports them).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

HERE = os.path.dirname(os.path.realpath(__file__))
BUNDLECTL = os.path.join(os.path.dirname(os.path.dirname(HERE)), "bundlectl")
# The test servers that import the SDK (the others start in a few tens of milliseconds, and some
# start processes of their own, whose process group the tests follow: they start as they are).
SERVERS = frozenset(
    {"kitchen.py", "conformance.py", "oauth_server.py", "pantry.py", "named.py", "tasks_server.py"}
)
_NAMESPACES = ("mnt", "pid", "net", "user", "ipc", "uts")
_LIMITS = [getattr(resource, n) for n in dir(resource) if n.startswith("RLIMIT_")]
_FORWARDED = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)


def place() -> Path:
    """The fork server's socket for this checkout, this Python environment and bundlectl's
    sources as they are (it holds them imported: after an edit, a run gets a new one). The
    suite's processes are told it (conftest.py); others find it (~7 ms)."""
    import hashlib
    from pathlib import Path

    told = os.environ.get("BUNDLECTL_SUITE_FORKSERVER")
    if told:
        return Path(told)
    key = hashlib.sha256(f"{HERE}\0{sys.prefix}\0{_sources()}".encode()).hexdigest()[:16]
    return Path("/tmp") / f"bundlectl-forkserver-{os.getuid()}-{key}"


def _sources() -> str:
    """Each of bundlectl's source files with its size and time of change."""
    stamps = []
    for folder, dirs, files in os.walk(BUNDLECTL):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            if name.endswith(".py"):
                found = os.stat(os.path.join(folder, name))
                stamps.append(f"{folder}/{name} {found.st_mtime_ns} {found.st_size}")
    return "\n".join(sorted(stamps))


def _namespaces() -> dict[str, str]:
    found = {}
    for name in _NAMESPACES:
        try:
            found[name] = os.readlink(f"/proc/self/ns/{name}")
        except OSError:
            found[name] = "?"
    return found


def _interpreter() -> dict[str, object]:
    """What a launcher and the fork server must share for the copy to run as the launcher would:
    the namespaces always; for bundlectl also the interpreter options that change what its code
    does (a test server runs alike under all of them)."""
    flags = sys.flags
    return {
        "namespaces": _namespaces(),
        "prefix": sys.prefix,
        "options": [
            flags.optimize,
            flags.dev_mode,
            flags.utf8_mode,
            flags.bytes_warning,
            flags.safe_path,
            flags.warn_default_encoding,
            sorted(map(str, sys._xoptions.items())),
            sys.warnoptions,
        ],
    }


def _line(sock: socket.socket) -> dict[str, object] | None:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(65536)
        if not chunk:
            return None
        data += chunk
    value = json.loads(data)
    return value if isinstance(value, dict) else None


# ---------------------------------------------------------------------------------------------
# The launcher: the test server's own process


def hand_over(run: dict[str, str] | None = None, path0: str | None = None) -> None:
    """Run this program in a copy of the fork server, and exit as it does; return (and start it
    here) when there is no fork server to hand over to.

    `run`: `{"script": PATH}` (the default: this test server's script, its signals passed to
    its process group) or `{"module": NAME}`; both with `"measure": "1"` for bundlectl, which
    the copy measures when the launcher would have, and whose signals reach the copy alone."""
    if getattr(sys, "_forkserver_copy", False):
        return  # the copy itself, running the script
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        folder = os.environ.get("BUNDLECTL_SUITE_FORKSERVER") or str(place())
        sock.connect(os.path.join(folder, "socket"))
        hello = _line(sock)
    except OSError:
        sock.close()
        return
    run = run or {"script": sys.argv[0]}
    group = "measure" not in run
    ours = _interpreter()
    if group:
        del ours["options"]
    elif any(os.isatty(fd) for fd in (0, 1, 2)):
        sock.close()
        return  # on a terminal: its own session and controlling terminal matter; start here
    if hello is None or {k: hello.get(k) for k in ours} != ours:
        sock.close()
        return  # sandboxed, other interpreter options, or a stale fork server: start here
    request = {
        "pid": os.getpid(),
        "argv": sys.argv,
        "orig_argv": sys.orig_argv,
        "executable": sys.executable,
        "run": run,
        "path0": sys.path[0] if path0 is None else path0,
        "path": [path0, *sys.path] if path0 is not None else None,  # as Python will make it
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "umask": _umask(),
        "unbuffered": bool(getattr(sys.stdout, "write_through", False)),
        "streams": [
            [s.encoding, s.errors] if s is not None else ["utf-8", "strict"]
            for s in (sys.stdin, sys.stdout, sys.stderr)
        ],
        "limits": {str(r): resource.getrlimit(r) for r in _LIMITS},
    }
    try:
        socket.send_fds(sock, [json.dumps(request).encode() + b"\n"], [0, 1, 2])
        started = _line(sock)
    except OSError:
        started = None
    if started is None or not isinstance(started.get("pid"), int):
        sock.close()
        return
    _wait_as_launcher(sock, started["pid"], group=group)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _wait_as_launcher(sock: socket.socket, pid: int, *, group: bool) -> None:
    """Stand for the copy `pid` until it ends; then end as it did — through the system's exit
    (`posix._exit`), not coverage's patched `os._exit`: this process measured nothing, and
    leaves no empty data file for the run to combine."""
    import posix

    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # the copy holds the pipes now: their ends close when it ends
        os.dup2(null, fd)
    for sig in _FORWARDED:
        signal.signal(sig, lambda number, _frame: _signal(pid, number, group=group))
    try:
        ended = _line(sock)
    except (OSError, ValueError):
        ended = None
    if ended is None:
        posix._exit(70)
    if isinstance(ended.get("signal"), int):
        number = ended["signal"]
        signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
    code = ended.get("exit")
    posix._exit(code if isinstance(code, int) else 70)


def _signal(pid: int, number: int, *, group: bool) -> None:
    with contextlib.suppress(OSError):
        if group:
            os.killpg(pid, number)  # the copy leads a process group of its own
        else:
            os.kill(pid, number)


# ---------------------------------------------------------------------------------------------
# The fork server


def serve(folder: Path) -> None:
    """Accept launchers until no registered pytest process is alive."""
    import anyio  # what the test servers import, once
    import mcp.server.elicitation
    import mcp.server.mcpserver
    import mcp.server.mcpserver.resolve
    import mcp.server.stdio
    import mcp.server.streamable_http
    import mcp_types  # noqa: F401
    import pydantic  # noqa: F401
    import rich.console  # MCPServer() imports these to log (~25 ms a start)
    import rich.logging  # noqa: F401
    import starlette.applications  # noqa: F401
    import uvicorn

    mcp.server.mcpserver.server.Settings.model_rebuild(force=True)  # built by MCPServer()

    # ... and what bundlectl's commands import besides,
    import coverage  # noqa: F401
    import cryptography.x509  # noqa: F401
    import httpx2  # noqa: F401
    import jwt  # noqa: F401
    import mcp.client.sse
    import mcp.client.streamable_http
    import packaging.version  # noqa: F401
    import platformdirs  # noqa: F401
    import ruamel.yaml  # noqa: F401
    import typer  # noqa: F401

    # ... and what they import when they first need it (measured in the copies: ~0.1 s of CPU
    # where a start needs them): anyio's event loop, the HTTP transport and server protocols,
    # schema checks, suggestions, and the stores and exporters some configurations name.
    import anyio._backends._asyncio  # noqa: F401
    import httpcore2  # noqa: F401
    import jsonschema  # noqa: F401
    import jsonschema_rs  # noqa: F401
    import rapidfuzz  # noqa: F401
    import redis  # noqa: F401
    import requests  # noqa: F401
    import uvicorn.protocols.http.auto
    import uvicorn.protocols.websockets.auto  # noqa: F401

    # ... and the modules of bundlectl that `exec` and `serve` import as they start (~0.3 s of
    # CPU a start, measured). A copy measures what it runs of them: coverage follows a
    # function by its file when it is called, whenever its module was imported; only their
    # top-level lines run here, unmeasured, and the suite imports every module measured
    # elsewhere. None reads the environment or the folder as it is imported.
    import bundlectl.calls.early_start
    import bundlectl.cli.commands.approvals
    import bundlectl.cli.commands.server
    import bundlectl.gateway.approvers
    import bundlectl.cli.commands.exec
    import bundlectl.cli.commands.exec_call
    import bundlectl.cli.commands.serve
    import bundlectl.cli.main
    import bundlectl.gateway.handlers
    import bundlectl.gateway.http
    import bundlectl.gateway.serve_stdio
    import bundlectl.mcpio.oauth
    import bundlectl.mcpio.pipe_session
    import bundlectl.mcpio.tasks  # noqa: F401

    # ... and what each such start builds before its first line of work: typer's command for
    # it (`_built`: 10-25 ms a start) and the validators of bundlectl's models, which pydantic
    # builds on first use (`defer_build`: ~40 ms a start, the project's and the lock's).
    from bundlectl.cli.main import _built

    for command in (
        "serve",
        "exec",
        "auth",
        "tools",
        "approvals",
        "server",
    ):  # sitecustomize's WARM
        _built(command)
    _models_built()
    # ... and `inspect`'s map of every loaded module's file, which coverage's start reads the
    # whole stack through (its collector keeps `short_stack()`): ~60 ms a measured start, ~1 ms
    # with the map made here.
    import inspect

    inspect.stack()

    signal.signal(signal.SIGCHLD, _reap)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    path = folder / "socket"
    temporary = folder / f"socket.{os.getpid()}"
    listener.bind(str(temporary))
    listener.listen(64)
    os.replace(temporary, path)  # whole, or not there
    interpreter = _interpreter()
    checked = 0.0
    try:
        while True:
            try:
                ready, _, _ = select.select([listener], [], [], 1.0)
            except InterruptedError:
                continue
            if ready:
                try:
                    conn, _ = listener.accept()
                except (BlockingIOError, InterruptedError):
                    continue
                if os.fork() == 0:
                    listener.close()
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    _monitor(conn, interpreter)  # never returns
                conn.close()
            if time.monotonic() - checked >= 1.0:
                checked = time.monotonic()
                if not _anyone_left(folder):
                    return
    finally:
        with contextlib.suppress(OSError):
            path.unlink()


def _anyone_left(folder: Path) -> bool:
    """Whether a registered pytest process (a file named by its pid in `users/`) lives."""
    alive = False
    for entry in (folder / "users").iterdir():
        try:
            os.kill(int(entry.name), 0)
        except (ValueError, ProcessLookupError):
            entry.unlink(missing_ok=True)
            continue
        except PermissionError:
            pass
        alive = True
    return alive


def _models_built() -> None:
    import pydantic

    models, found = [pydantic.BaseModel], []
    while models:
        model = models.pop()
        models.extend(model.__subclasses__())
        if model.__module__.startswith("bundlectl."):
            found.append(model)
    for model in found:
        with contextlib.suppress(Exception):
            model.model_rebuild(force=True)


def _reap(_number: int, _frame: object) -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _monitor(conn: socket.socket, interpreter: dict[str, object]) -> None:
    """One launcher's side of the fork server: take its request, fork the copy, report how the
    copy ended (or kill it when the launcher is gone)."""
    code = 0
    try:
        conn.sendall(json.dumps(interpreter).encode() + b"\n")
        message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        while not message.endswith(b"\n"):
            more = conn.recv(1 << 20)
            if not more:
                os._exit(0)
            message += more
        if len(fds) != 3:
            os._exit(0)
        request = json.loads(message)
        pid = os.fork()
        if pid == 0:
            conn.close()
            _run(request, fds)  # never returns
        for fd in fds:
            os.close(fd)
        conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
        group = "measure" not in request["run"]
        conn.sendall(json.dumps(_watch(conn, pid, group=group)).encode() + b"\n")
    except (OSError, ValueError):
        code = 1
    os._exit(code)


def _watch(conn: socket.socket, pid: int, *, group: bool) -> dict[str, int]:
    """Wait for the copy to end; kill it if the launcher goes first."""
    ended = os.pidfd_open(pid)
    while True:
        ready, _, _ = select.select([conn, ended], [], [])
        if ended in ready:
            break
        if conn in ready and not conn.recv(1):
            # the launcher died (killed): the copy goes with it
            (os.killpg if group else os.kill)(pid, signal.SIGKILL)
            break
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return {"signal": os.WTERMSIG(status)}
    return {"exit": os.waitstatus_to_exitcode(status)}


def _run(request: dict[str, object], fds: list[int]) -> None:
    """The copy: become the launcher's program, and run it."""
    code, by_signal, own = 0, 0, os.getpid()
    try:
        _become(request, fds)
        run = request["run"]
        assert isinstance(run, dict)
        if "measure" in run:
            _measured()
        import runpy

        if "module" in run:
            runpy.run_module(str(run["module"]), run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(str(run["script"]), run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, int | None):
            print(exc.code, file=sys.stderr)
    except KeyboardInterrupt:
        by_signal = signal.SIGINT  # as Python ends on an unhandled one: by the signal
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    try:
        import atexit

        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass
    if by_signal:
        signal.signal(by_signal, signal.SIG_DFL)
        os.kill(own, by_signal)
    os._exit(code)


def _become(request: dict[str, object], fds: list[int]) -> None:
    """Take the launcher's pipes, signals, limits, folder, environment, streams, arguments and
    path, and its pid as this process's `os.getpid()`."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    for sig in _FORWARDED:
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.setsid()
    limits = request["limits"]
    assert isinstance(limits, dict)
    for which, (soft, hard) in limits.items():
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(int(which), (soft, hard))
    os.umask(int(request["umask"]))  # type: ignore[call-overload]
    os.chdir(str(request["cwd"]))
    env = request["env"]
    assert isinstance(env, dict)
    os.environ.clear()
    os.environ.update(env)
    streams = request.get("streams") or [["utf-8", "strict"]] * 3
    assert isinstance(streams, list)
    unbuffered = bool(request["unbuffered"])
    sys.stdin, sys.stdout, sys.stderr = (
        _stdio(fd, encoding, errors, unbuffered=unbuffered)
        for fd, (encoding, errors) in enumerate(streams)
    )
    argv = request["argv"]
    assert isinstance(argv, list)
    sys.argv = [str(a) for a in argv]
    sys.orig_argv = [str(a) for a in request.get("orig_argv") or argv]  # type: ignore[union-attr]
    sys.executable = str(request.get("executable") or sys.executable)
    if isinstance(request.get("path"), list):
        sys.path[:] = [str(p) for p in request["path"]]  # type: ignore[union-attr]
    else:
        sys.path[0] = str(request["path0"])
    sys._forkserver_copy = True  # type: ignore[attr-defined]
    # The program's process, as whoever started it knows it, is the launcher: a pid the
    # program records (KITCHEN_STARTS, a temporary file's name) is the one that is signalled,
    # and gone when it ends.
    # A process it forks (a gateway's workers) has a pid of its own, as it would have.
    launcher, real_getpid = int(request["pid"]), os.getpid  # type: ignore[call-overload]
    copy = real_getpid()
    os.getpid = lambda: launcher if real_getpid() == copy else real_getpid()


def _stdio(fd: int, encoding: str, errors: str, *, unbuffered: bool) -> Any:
    """The standard stream `fd` as Python makes it at start (pylifecycle.c, create_stdio): with
    PYTHONUNBUFFERED, stdout's and stderr's bytes unbuffered too; stderr line-buffered."""
    import io

    if fd == 0:
        return io.TextIOWrapper(open(0, "rb", closefd=False), encoding, errors)
    raw = open(fd, "wb", buffering=0 if unbuffered else -1, closefd=False)  # noqa: SIM115
    return io.TextIOWrapper(
        raw,
        encoding,
        "backslashreplace" if fd == 2 else errors,
        line_buffering=fd == 2 and not unbuffered,
        write_through=unbuffered,
    )


def _measured() -> None:
    """Start coverage in the copy as the launcher would have (`tests/_site/_untraced.py`
    reads the launcher's environment), with the suite's hook for untraced third-party
    imports."""
    site = os.path.join(os.path.dirname(HERE), "_site")
    if site in sys.path:
        import _untraced  # tests/_site

        _untraced.start_coverage()


if __name__ == "__main__":
    if os.fork() > 0:
        os._exit(0)  # detached: whoever started it does not wait for it
    from pathlib import Path

    serve(Path(sys.argv[1]))
