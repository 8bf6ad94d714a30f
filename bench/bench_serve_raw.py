"""Warm stdio call through `bundlectl serve`, timed with a raw JSON-RPC client (a line written,
a line read: no client library's cost in the numbers), side by side in one run with the same
call made directly to the server and through `raw_relay.py` (a process that only copies bytes).

    python bench/bench_serve_raw.py [--calls 400] [--rounds 5] [--baseline CHECKOUT]

The server is `mcp-server-time` (`get_current_time`, UTC). Calls alternate between the sessions,
in rounds; each round's medians and the medians over every call are printed. `--baseline`
adds `serve` from another checkout (PYTHONPATH) in the same run. Issue 53's goal: `serve`
<= 1.5x the relay.

    python bench/bench_serve_raw.py --callgrind [--calls 200] [--baseline CHECKOUT]

counts the instructions `serve` executes per warm call instead (valgrind's callgrind, counting
from the first measured call to the last): the same on every run, so a change of a few percent
shows where timings on a shared machine cannot tell it from noise.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
RELAY = ROOT / "bench" / "raw_relay.py"
CALL = {"name": "get_current_time", "arguments": {"timezone": "UTC"}}


class Raw:
    """One MCP session over a process's pipes, by hand."""

    def __init__(self, command: list[str], cwd: str, env: dict[str, str], tool: str) -> None:
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=cwd,
            env=env,
            bufsize=0,
        )
        self.tool, self.key = tool, 0
        self.request(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"},
            },
        )
        self.write({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def write(self, message: dict[str, Any]) -> None:
        stdin = self.process.stdin
        assert stdin is not None
        stdin.write(json.dumps(message).encode() + b"\n")

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.key += 1
        self.write({"jsonrpc": "2.0", "id": self.key, "method": method, "params": params})
        stdout: IO[bytes] | None = self.process.stdout
        assert stdout is not None
        while True:
            message = json.loads(stdout.readline())
            if message.get("id") == self.key:
                if "error" in message or message["result"].get("isError"):
                    raise SystemExit(f"{self.tool}: {message}")
                return dict(message["result"])

    def call(self) -> float:
        started = time.perf_counter()
        self.request("tools/call", {**CALL, "name": self.tool})
        return (time.perf_counter() - started) * 1000

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(10)


def project(tmp: str, server: str) -> dict[str, str]:
    """The bench's project in `tmp`, and the environment that keeps its state there."""
    Path(tmp, "bundlectl.yaml").write_text(
        f"version: 1\nservers:\n  time: {{command: {json.dumps(server)}}}\n"
        "agents:\n  bench: {allow: [time.get_current_time]}\npolicy: {default: deny}\n"
    )
    return {**os.environ, "XDG_STATE_HOME": tmp, "XDG_CONFIG_HOME": tmp, "XDG_DATA_HOME": tmp}


def instructions(server: str, calls: int, checkouts: dict[str, Path]) -> None:
    """Instructions per warm call of each checkout's `serve`, under callgrind."""
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    for name, checkout in checkouts.items():
        with tempfile.TemporaryDirectory() as tmp:
            env = {**project(tmp, server), "PYTHONPATH": str(checkout.resolve())}
            out = str(Path(tmp, "callgrind.out"))
            grind = ["valgrind", "--tool=callgrind", "--instr-atstart=no"]
            serve = [sys.executable, "-m", "bundlectl", "serve", "--agent", "bench"]
            session = Raw(
                [*grind, f"--callgrind-out-file={out}", *serve], tmp, env, "time__get_current_time"
            )
            for _ in range(30):  # warm: the server started, its tools listed
                session.call()
            pid = str(session.process.pid)
            subprocess.run(["callgrind_control", "-i", "on", pid], capture_output=True, check=True)
            for _ in range(calls):
                session.call()
            subprocess.run(["callgrind_control", "-i", "off", pid], capture_output=True, check=True)
            subprocess.run(["callgrind_control", "-d", pid], capture_output=True, check=True)
            session.close()
            counted = 0
            for dump in glob.glob(out + "*"):
                for line in Path(dump).read_text().splitlines():
                    if line.startswith("totals:"):
                        counted = max(counted, int(line.split()[1]))
            print(f"{name:>9}: {counted / calls / 1e6:.3f} M instructions per call")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline", type=Path, help="another checkout's serve, same run")
    parser.add_argument("--callgrind", action="store_true", help="count instructions per call")
    options = parser.parse_args()
    server = shutil.which("mcp-server-time")
    if server is None:
        raise SystemExit("mcp-server-time is not installed (pip install mcp-server-time)")
    if options.callgrind:
        checkouts = {"serve": ROOT}
        if options.baseline is not None:
            checkouts["baseline"] = options.baseline
        instructions(server, options.calls, checkouts)
    else:
        timings(server, options)


def timings(server: str, options: argparse.Namespace) -> None:
    """Each session's calls timed, in rounds, side by side."""
    with tempfile.TemporaryDirectory() as tmp:
        env = project(tmp, server)
        serve = [sys.executable, "-m", "bundlectl", "serve", "--agent", "bench"]
        sessions = {
            "direct": Raw([server], tmp, env, "get_current_time"),
            "relay": Raw([sys.executable, str(RELAY), server], tmp, env, "get_current_time"),
            "serve": Raw(serve, tmp, {**env, "PYTHONPATH": str(ROOT)}, "time__get_current_time"),
        }
        if options.baseline is not None:
            base = {**env, "PYTHONPATH": str(options.baseline.resolve())}
            sessions["baseline"] = Raw(serve, tmp, base, "time__get_current_time")
        try:
            for session in sessions.values():
                for _ in range(20):  # warm: the server started, its tools listed
                    session.call()
            every: dict[str, list[float]] = {name: [] for name in sessions}
            for round_ in range(1, options.rounds + 1):
                times: dict[str, list[float]] = {name: [] for name in sessions}
                for _ in range(options.calls):
                    for name, session in sessions.items():
                        times[name].append(session.call())
                medians = {name: statistics.median(t) for name, t in times.items()}
                for name in sessions:
                    every[name] += times[name]
                print(
                    f"round {round_}: "
                    + ", ".join(f"{name} {m:.2f}" for name, m in medians.items())
                    + f" ms; serve {medians['serve'] / medians['relay']:.2f}x the relay"
                )
        finally:
            for session in sessions.values():
                session.close()
    medians = {name: statistics.median(t) for name, t in every.items()}
    relay = medians["relay"]
    for name, median in medians.items():
        print(f"{name:>9}: median {median:.2f} ms, {median / relay:.2f}x the relay")


if __name__ == "__main__":
    main()
