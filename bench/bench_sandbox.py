"""What the sandbox (issue 55, `policy.sandbox`) costs a server's cold start: a server started
and answering its first line, unsandboxed and under bubblewrap, interleaved in one run — the
smallest possible server (a Python that answers one line: the start's own cost, not the
server's) and `mcp-server-time` (its handshake).

    python bench/bench_sandbox.py [--starts 30]

A third start is sandboxed with hosts to reach (`network: [example.com]`): its egress proxy
starts on the host and the bridge (a second Python) inside the sandbox, before the server.
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

from bundlectl.config.models import SandboxSpec, ServerSpec
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
    if child.egress is not None:
        child.egress.close()
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
            reaching = spec.model_copy(update={"sandbox": SandboxSpec(network=["example.com"])})
            targets = {
                "unsandboxed": Target("s", spec, Path(tmp)),
                "sandboxed": Target("s", spec, Path(tmp), sandbox_mode="required"),
                "with hosts": Target("s", reaching, Path(tmp), sandbox_mode="required"),
            }
            times: dict[str, list[float]] = {name: [] for name in targets}
            for target in targets.values():
                start(target)  # warm the file cache
            for _ in range(count):
                for name, target in targets.items():
                    times[name].append(start(target))
        medians = {name: statistics.median(found) for name, found in times.items()}
        plain = times["unsandboxed"]
        added = {
            name: statistics.median(b - p for p, b in zip(plain, times[name], strict=True))
            for name in ("sandboxed", "with hosts")
        }
        print(
            f"{label}: unsandboxed {medians['unsandboxed']:.1f} ms, sandboxed "
            f"{medians['sandboxed']:.1f} ms, with hosts {medians['with hosts']:.1f} ms to its "
            f"first answer (medians of {count}); the sandbox adds {added['sandboxed']:.1f} ms, "
            f"with hosts {added['with hosts']:.1f} ms (medians of the paired differences)"
        )


if __name__ == "__main__":
    main()
