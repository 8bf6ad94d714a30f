"""Memory of `bundlectl serve --transport streamable-http` over many sessions and requests: it
must stay flat (a session that ended, or a stateless request, leaves nothing behind).

    python bench/bench_gateway_memory.py [--sessions 2000] [--requests 2000]

1. Stateful: `--sessions` clients one after another, each opening a 2025-11-25 session, making
   one call through a privacy-tokenizing setup (so a token map is made) and ending the session
   with DELETE.
2. Stateless (`--stateless`): `--requests` calls, each its own HTTP request.

The gateway's RSS is read from /proc after a warm-up of 200 and again at the end; the growth per
session or request is printed. Before this change: ~25 KB per closed stateful session, ~18.6 KB
per stateless request.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2

ROOT = Path(__file__).resolve().parent.parent
KITCHEN = ROOT / "tests" / "servers" / "kitchen.py"
TOKEN = "bench-token-" + "x" * 24
HEADERS = {
    "Authorization": f"Bearer {TOKEN}",
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
}


def project(folder: Path) -> None:
    (folder / "bundlectl.yaml").write_text(
        "version: 1\n"
        "servers:\n"
        f"  kitchen: {{command: {sys.executable}, args: ['{KITCHEN}']}}\n"
        "agents:\n"
        '  bench: {token: "${BENCH_TOKEN}", allow: ["kitchen.*"]}\n'
        "policy: {default: deny}\n"
        "privacy: {tokenize: [email]}\n"
    )


def rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"VmRSS:\s+(\d+) kB", status)
    return int(found.group(1)) if found else 0


def start(folder: Path, *extra: str) -> tuple[subprocess.Popen[bytes], str]:
    env = {**os.environ, "BENCH_TOKEN": TOKEN, "BUNDLECTL_HOME": str(folder / "home")}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bundlectl",
            "serve",
            "--transport",
            "streamable-http",
            "--port",
            "0",
            *extra,
        ],
        cwd=folder,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    line = proc.stderr.readline().decode()
    found = re.search(r"on (http://\S+)/mcp", line)
    assert found, line
    return proc, found.group(1) + "/mcp"


INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "1"},
    },
}
CALL = {
    "jsonrpc": "2.0",
    "id": 2,
    "method": "tools/call",
    "params": {"name": "kitchen__people", "arguments": {}},
}


async def session(http: Any, url: str) -> None:
    """One 2025-11-25 session: initialize, one call, DELETE."""
    opened = await http.post(url, json=INIT, headers=HEADERS)
    sid = opened.headers["mcp-session-id"]
    headers = {**HEADERS, "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    await http.post(url, json=note, headers=headers)
    answer = await http.post(url, json=CALL, headers=headers)
    assert "EMAIL_1" in answer.text, answer.text[:300]
    await http.delete(url, headers=headers)


async def stateless(http: Any, url: str) -> None:
    headers = {**HEADERS, "mcp-protocol-version": "2025-11-25"}
    answer = await http.post(url, json=CALL, headers=headers)
    assert "EMAIL_1" in answer.text, answer.text[:300]


async def drive(url: str, pid: int, count: int, one: Any) -> tuple[int, int, float]:
    async with httpx2.AsyncClient(timeout=60) as http:
        for _ in range(200):  # warm-up: caches, the downstream server, the allocator
            await one(http, url)
        before = rss_kib(pid)
        began = time.perf_counter()
        for _ in range(count):
            await one(http, url)
        took = time.perf_counter() - began
        return before, rss_kib(pid), took


def measure(label: str, count: int, one: Any, *extra: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        project(folder)
        proc, url = start(folder, *extra)
        try:
            before, after, took = anyio.run(drive, url, proc.pid, count, one)
        finally:
            proc.terminate()
            proc.communicate(timeout=20)
    per = (after - before) * 1024 / count
    print(
        f"{label}: {count} in {took:.1f} s; RSS {before / 1024:.1f} -> {after / 1024:.1f} MiB "
        f"({per:+.0f} bytes each)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    measure("stateful sessions (each ended with DELETE)", args.sessions, session)
    measure("stateless requests", args.requests, stateless, "--stateless")


if __name__ == "__main__":
    main()
