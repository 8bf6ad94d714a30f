"""What the sandbox (issue 55, `policy.sandbox`) costs a server's cold start: a server started
and answering its first line, unsandboxed and under bubblewrap, interleaved in one run — the
smallest possible server (a Python that answers one line: the start's own cost, not the
server's) and `mcp-server-time` (its handshake).

    python bench/bench_sandbox.py [--starts 30]

Warm calls go over the same pipes either way (the sandbox is only how the process started).
Goal: <= 30 ms more a start.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bundlectl.config.models import ServerSpec
from bundlectl.mcpio.sandbox import bwrap
from bundlectl.mcpio.stderr import StderrTee
from bundlectl.mcpio.target import Target

HELLO = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "1"},
    },
}


def start(target: Target) -> float:
    """ms from the start until the server answered its handshake; the server is then stopped."""
    began = time.perf_counter()
    child = target.launch().start(StderrTee())
    process = child.process
    assert process.stdin is not None
    assert process.stdout is not None
    process.stdin.write(json.dumps(HELLO).encode() + b"\n")
    process.stdin.flush()
    process.stdout.readline()
    took = (time.perf_counter() - began) * 1000
    process.stdin.close()
    process.wait(10)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--starts", type=int, default=30)
    starts = parser.parse_args().starts
    command = shutil.which("mcp-server-time")
    if command is None or bwrap() is None:
        raise SystemExit("needs mcp-server-time and bubblewrap (bwrap) installed")
    smallest = ServerSpec(
        command=sys.executable,
        args=["-S", "-c", "import sys; sys.stdin.readline(); print('{}', flush=True)"],
    )
    for label, spec, count in (
        ("the smallest server", smallest, starts),
        ("mcp-server-time", ServerSpec(command=command), max(5, starts // 3)),
    ):
        with tempfile.TemporaryDirectory() as tmp:
            plain = Target("s", spec, Path(tmp))
            boxed = Target("s", spec, Path(tmp), sandbox_mode="required")
            times: dict[str, list[float]] = {"unsandboxed": [], "sandboxed": []}
            start(plain), start(boxed)  # warm the file cache
            for _ in range(count):
                times["unsandboxed"].append(start(plain))
                times["sandboxed"].append(start(boxed))
        plain_ms, boxed_ms = (statistics.median(times[k]) for k in ("unsandboxed", "sandboxed"))
        paired = statistics.median(b - p for p, b in zip(*times.values(), strict=True))
        print(
            f"{label}: unsandboxed {plain_ms:.1f} ms, sandboxed {boxed_ms:.1f} ms to its first "
            f"answer (medians of {count}); the sandbox adds {paired:.1f} ms (median of the "
            "paired differences)"
        )


if __name__ == "__main__":
    main()
