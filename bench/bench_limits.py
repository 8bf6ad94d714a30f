"""What a quota costs a let-through call (issue 39's goals: <= 0.1 ms with SQLite, <= 0.5 ms
with a local Redis): the pipeline's admission of one allowed call (`Pipeline.admit`: the quota
count, then the `pending` audit record), side by side with the same project without `limits:`,
in one run.

    python bench/bench_limits.py [--calls 2000]

The audit sink is a no-op so only the counting differs. SQLite in WAL mode with
synchronous=NORMAL (a commit per counted call, no fsync but at checkpoints), in a throwaway
BUNDLECTL_HOME on this machine's disk. Redis: a `redis-server` started here on a free loopback
port without persistence (skipped when the command is not installed), one round trip (a Lua
script) per counted call.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CONFIG = """version: 1
bundles: [basic]
agents:
  bot: {{allow: [files.read_file]}}
{limits}
policy: {{default: deny}}
{state}
"""
LIMITS = "limits:\n  - {agents: ['*'], tools: [files.read_file], calls: 10000000, per: 1d}"


class Discard:
    def record(self, *args: Any, **kwargs: Any) -> None:
        pass


def per_call_us(folder: Path, limits: str, calls: int, state: str = "") -> list[float]:
    from bundlectl.calls.pipeline import Pipeline
    from bundlectl.config.project import load_project
    from bundlectl.resolve.resolved import resolve_project

    project = folder / ("redis" if state else "limited" if limits else "plain")
    project.mkdir()
    (project / "bundlectl.yaml").write_text(CONFIG.format(limits=limits, state=state))
    resolution = resolve_project(load_project(project / "bundlectl.yaml"))
    pipeline = Pipeline(resolution, Discard(), None)  # type: ignore[arg-type]
    decision = pipeline.judge("bot", "files", "read_file", interactive=False)
    pipeline.admit(decision)  # opens the store, compiles the limits
    rounds = []
    for _ in range(5):
        began = time.perf_counter()
        for _ in range(calls):
            pipeline.admit(decision)
        rounds.append((time.perf_counter() - began) / calls * 1e6)
    return rounds


@contextmanager
def redis_server() -> Iterator[str | None]:
    """A throwaway redis-server on a free loopback port: its URL (None: not installed)."""
    command = shutil.which("redis-server")
    if command is None:
        yield None
        return
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [command, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.02)  # a poll within the deadline above
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.terminate()
        server.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    calls = parser.parse_args().calls
    with tempfile.TemporaryDirectory() as folder, redis_server() as redis:
        os.environ["BUNDLECTL_HOME"] = str(Path(folder) / "home")
        plain = per_call_us(Path(folder), "", calls)
        limited = per_call_us(Path(folder), LIMITS, calls)
        shared = (
            per_call_us(Path(folder), LIMITS, calls, f'state: {{url: "{redis}"}}')
            if redis
            else None
        )
    p, q = statistics.median(plain), statistics.median(limited)
    print(f"admission of one allowed call, median of 5 rounds of {calls}:")
    print(f"  no limits:            {p:7.1f} us")
    print(f"  one limit (SQLite):   {q:7.1f} us   (+{q - p:.1f} us = {(q - p) / 1000:.3f} ms)")
    if shared is None:
        print("  one limit (Redis):    not measured (no redis-server on PATH)")
        return
    r = statistics.median(shared)
    print(f"  one limit (Redis):    {r:7.1f} us   (+{r - p:.1f} us = {(r - p) / 1000:.3f} ms)")


if __name__ == "__main__":
    main()
