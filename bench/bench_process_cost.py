"""What one more downstream process costs: `serve` runs a stdio server as one process per agent
that uses it (unless `share: true`), so each extra agent on a server pays one start and its
memory.

    python bench/bench_process_cost.py [--runs 5]

For `mcp-server-time` (a PyPI server) and the test suite's `kitchen` server: the time from
spawning the process to its tools listed (what an agent's first call waits for), and the
process's resident memory then, read from /proc (Linux). Medians of `--runs` starts.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

ROOT = Path(__file__).resolve().parent.parent


def _rss_mib(marker: str) -> float:
    """The largest resident set of the processes whose command line holds `marker`."""
    found = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            if marker not in command or "bench_process_cost" in command:
                continue
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    found = max(found, int(line.split()[1]))
        except OSError:
            continue
    return found / 1024


async def one(command: str, args: list[str], marker: str) -> tuple[float, float]:
    started = time.perf_counter()
    params = StdioServerParameters(command=command, args=args)
    async with Client(stdio_client(params)) as client:
        await client.list_tools()
        ready = time.perf_counter() - started
        return ready, _rss_mib(marker)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    time_server = shutil.which("mcp-server-time") or str(
        Path(sys.executable).parent / "mcp-server-time"
    )
    kitchen = str(ROOT / "tests" / "servers" / "kitchen.py")
    for label, command, args, marker in (
        ("mcp-server-time", time_server, [], "mcp-server-time"),
        ("kitchen (a Python MCP server)", sys.executable, [kitchen], kitchen),
    ):
        found = [anyio.run(one, command, args, marker) for _ in range(runs)]
        start = statistics.median(f[0] for f in found) * 1000
        rss = statistics.median(f[1] for f in found)
        print(f"{label}: start to tools listed {start:.0f} ms, resident memory {rss:.1f} MiB")


if __name__ == "__main__":
    main()
