"""`bundlectl serve` at scale: `tools/list` over 5,000 allowed tools, and a load of concurrent
clients over streamable HTTP.

    python bench/bench_gateway_scale.py [--tools 5000] [--clients 50] [--calls 2000]

1. tools/list: 50 servers x 100 declared tools, all allowed, listed through the gateway over
   stdio; the median of 20 listings. Goal: <= 50 ms. Measured twice: by a plain JSON-RPC client
   (request written, whole answer read and `json.loads`-ed: the gateway's latency plus the least
   any client must do), and by the SDK's client, whose own reading and validating of 5,000 tool
   definitions is reported beside it.
2. Load: the gateway over streamable HTTP with three downstream `kitchen` servers; `--clients`
   SDK clients, each with its own session and its agent's token, make `--calls` echo calls in
   all, each with a unique text, across the three servers. Every result is checked against its
   request (lost or misattributed results are counted), latencies give p50/p99, and the
   gateway's peak RSS is read from /proc.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parent.parent
KITCHEN = ROOT / "tests" / "servers" / "kitchen.py"
TOKEN = "bench-token-" + "x" * 24
SERVE = [sys.executable, "-m", "bundlectl", "serve"]


def catalog_project(folder: Path, tools: int) -> None:
    servers = max(1, tools // 100)
    lines = ["version: 1", "servers:"]
    for s in range(servers):
        lines.append(f"  s{s}:")
        lines.append(f"    command: {sys.executable}")
        lines.append(f"    args: ['{KITCHEN}']")
        lines.append("    tools:")
        for t in range(tools // servers):
            lines.append(
                f"      - {{name: tool_{t}, description: 'Tool {t} of server {s}: does a thing.', "
                "input_schema: {type: object, properties: {path: {type: string}}}}"
            )
    lines += ["agents:", "  bench: {allow: ['*']}", "policy: {default: deny}"]
    (folder / "bundlectl.yaml").write_text("\n".join(lines) + "\n")


async def list_many(folder: Path, env: dict[str, str]) -> tuple[int, list[float], float]:
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "bundlectl", "serve", "--agent", "bench"],
        cwd=str(folder),
        env=env,
    )
    times = []
    async with Client(stdio_client(params, errlog=sys.__stderr__)) as client:
        listed = await client.list_tools()  # warm
        for _ in range(20):
            began = time.perf_counter()
            await client.list_tools()
            times.append((time.perf_counter() - began) * 1000)
    # What of it is the SDK client's own work: parsing and validating the answer.
    import mcp_types as types

    wire = json.dumps(listed.model_dump(by_alias=True, mode="json", exclude_none=True))
    parse = []
    for _ in range(5):
        began = time.perf_counter()
        types.ListToolsResult.model_validate(json.loads(wire))
        parse.append((time.perf_counter() - began) * 1000)
    return len(listed.tools), times, statistics.median(parse)


def list_raw(folder: Path, env: dict[str, str]) -> list[float]:
    """tools/list through the gateway with a plain JSON-RPC client over its stdio."""
    process = subprocess.Popen(
        [*SERVE, "--agent", "bench"],
        cwd=folder,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    stdin, stdout = process.stdin, process.stdout

    def send(message: dict[str, object]) -> None:
        stdin.write(json.dumps(message).encode() + b"\n")
        stdin.flush()

    hello = {"protocolVersion": "2025-11-25", "capabilities": {}}
    send(
        {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": hello | {"clientInfo": {"name": "bench", "version": "0"}},
        }
    )
    stdout.readline()
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    times = []
    for number in range(1, 23):
        began = time.perf_counter()
        send({"jsonrpc": "2.0", "id": number, "method": "tools/list", "params": {}})
        answer = json.loads(stdout.readline())
        if number > 2:  # the first two warm the gateway's catalog and listing cache
            times.append((time.perf_counter() - began) * 1000)
        assert len(answer["result"]["tools"]) > 0, answer
    stdin.close()
    process.wait(timeout=10)
    return times


def load_project(folder: Path) -> None:
    servers = "\n".join(
        f"  k{i}: {{command: {sys.executable}, args: ['{KITCHEN}'], concurrency: 4}}"
        for i in range(3)
    )
    (folder / "bundlectl.yaml").write_text(
        f"version: 1\nservers:\n{servers}\n"
        "agents:\n  bench: {token: '${BENCH_TOKEN}', allow: ['k0.echo', 'k1.echo', 'k2.echo']}\n"
        "policy: {default: deny}\n"
    )


async def load(url: str, clients: int, calls: int) -> tuple[int, int, list[float], list[float]]:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    latencies: list[float] = []
    warm: list[float] = []  # every call but each client's first (which opens the session)
    wrong = [0]
    done = [0]
    per_client = calls // clients

    async def one(index: int) -> None:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        timeout = httpx2.Timeout(30, read=300)
        async with (
            httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
            Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,
        ):
            for n in range(per_client):
                text = f"c{index}-n{n}"
                began = time.perf_counter()
                result = await client.call_tool(f"k{(index + n) % 3}__echo", {"text": text})
                latencies.append((time.perf_counter() - began) * 1000)
                if n:
                    warm.append(latencies[-1])
                got = result.content[0].text if result.content else None
                if result.is_error or got != text:
                    wrong[0] += 1
                done[0] += 1

    async with anyio.create_task_group() as group:
        for index in range(clients):
            group.start_soon(one, index)
    return done[0], wrong[0], latencies, warm


def peak_rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"VmHWM:\s+(\d+) kB", status)
    return int(found.group(1)) / 1024 if found else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tools", type=int, default=5000)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        env = {**os.environ, "BUNDLECTL_HOME": str(folder / "home"), "BENCH_TOKEN": TOKEN}
        catalog_project(folder, args.tools)
        raw = list_raw(folder, env)
        count, times, parse = anyio.run(list_many, folder, env)
        print(
            f"tools/list over {count} tools, median of 20, plain JSON-RPC client: "
            f"{statistics.median(raw):.1f} ms (min {min(raw):.1f}, max {max(raw):.1f}; "
            "goal <= 50 ms)"
        )
        print(
            f"  the same through the SDK's client: {statistics.median(times):.1f} ms (min "
            f"{min(times):.1f}, max {max(times):.1f}), of which its parsing and validating the "
            f"{count} tools alone: {parse:.1f} ms"
        )

        load_project(folder)
        proc = subprocess.Popen(
            [*SERVE, "--transport", "streamable-http", "--port", "0"],
            cwd=folder,
            env=env,
            stderr=subprocess.PIPE,
        )
        assert proc.stderr is not None
        line = proc.stderr.readline().decode()
        found = re.search(r"on (http://\S+)/mcp", line)
        assert found, line
        try:
            began = time.perf_counter()
            done, wrong, latencies, warm = anyio.run(load, found.group(1), args.clients, args.calls)
            took = time.perf_counter() - began
            rss = peak_rss_mib(proc.pid)
        finally:
            proc.terminate()
            proc.communicate(timeout=20)
        latencies.sort()
        warm.sort()
        p99 = latencies[int(len(latencies) * 0.99) - 1]
        warm_p99 = warm[int(len(warm) * 0.99) - 1] if warm else float("nan")
        print(
            f"load: {args.clients} clients, {done} calls over 3 servers in {took:.1f} s "
            f"({done / took:.0f} calls/s); lost or misattributed: {args.calls - done + wrong}; "
            f"latency p50 {statistics.median(latencies):.1f} ms, p99 {p99:.1f} ms "
            f"(after each client's first call: p50 {statistics.median(warm):.1f} ms, "
            f"p99 {warm_p99:.1f} ms); "
            f"gateway peak RSS {rss:.0f} MiB"
        )
        print(json.dumps({"clients": args.clients, "calls": done, "wrong": wrong}))


if __name__ == "__main__":
    main()
