"""Warm call overhead of `bundlectl serve`: the same tool call made through the gateway and made
directly with the SDK client to the same kind of downstream server, interleaved in one run.

    python bench/bench_gateway.py [--calls 300] [--rounds 5] [--baseline CHECKOUT] [--traced]

Both sessions are opened once and warmed; then calls alternate between them, in rounds (this
machine's noise moves one round's ratio by +-0.1): each round's medians are printed, and the
medians over every call. The downstream is
the test suite's `kitchen` server (a Python MCP server over stdio), tool `echo`. A third session
goes through `raw_relay.py`, a process that only copies bytes: the floor for any gateway.
Goal: gateway <= 1.15x direct and <= 2 ms added at the median.

`--traced` adds the same gateway with OpenTelemetry on (traces and metrics, exported over
OTLP/HTTP to a sink in this process that answers 200): issue 41's goal is <= 0.15 ms added.
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import ClassVar

import anyio
from mcp import Client, StdioServerParameters

ROOT = Path(__file__).resolve().parent.parent
KITCHEN = ROOT / "tests" / "servers" / "kitchen.py"
RELAY = ROOT / "bench" / "raw_relay.py"


class _Sink(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver that takes every export and keeps nothing."""

    received: ClassVar[dict[str, int]] = {}  # exports by path (/v1/traces, /v1/metrics)

    def do_POST(self) -> None:
        _Sink.received[self.path] = _Sink.received.get(self.path, 0) + 1
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def _otlp_sink() -> str:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


async def bench(calls: int, rounds: int, baseline: Path | None, traced: bool = False) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        (project / "bundlectl.yaml").write_text(
            "version: 1\nservers:\n"
            f"  kitchen: {{command: {sys.executable}, args: ['{KITCHEN}']}}\n"
            "agents:\n  bench: {allow: ['kitchen.echo']}\npolicy: {default: deny}\n"
        )
        env = {**os.environ, "BUNDLECTL_HOME": str(project / "home")}
        serve = [sys.executable, "-m", "bundlectl", "serve", "--agent", "bench"]
        sessions = {
            "gateway": (StdioServerParameters(command=serve[0], args=serve[1:], cwd=tmp, env=env)),
            "direct": StdioServerParameters(command=sys.executable, args=[str(KITCHEN)], env=env),
            "relay": StdioServerParameters(
                command=sys.executable, args=[str(RELAY), sys.executable, str(KITCHEN)], env=env
            ),
        }
        if traced:  # the same gateway exporting spans and metrics
            otel = {
                **env,
                "OTEL_EXPORTER_OTLP_ENDPOINT": _otlp_sink(),
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                "OTEL_METRIC_EXPORT_INTERVAL": "1000",
            }
            sessions["traced"] = StdioServerParameters(
                command=serve[0], args=serve[1:], cwd=tmp, env=otel
            )
        if baseline is not None:  # the same gateway from another checkout (before a change)
            sessions["baseline"] = StdioServerParameters(
                command=serve[0], args=serve[1:], cwd=tmp, env={**env, "PYTHONPATH": str(baseline)}
            )
        async with contextlib.AsyncExitStack() as stack:
            pairs = [
                (
                    await stack.enter_async_context(Client(params)),
                    "echo" if label in ("direct", "relay") else "kitchen__echo",
                )
                for label, params in sessions.items()
            ]
            for client, name in pairs:  # warm: start the downstream, list the tools
                for _ in range(5):
                    await client.call_tool(name, {"text": "warm"})
            samples: dict[str, list[float]] = {label: [] for label in sessions}
            for round_ in range(1, rounds + 1):
                start_of_round = len(samples["gateway"])
                for _ in range(calls):
                    for (client, name), label in zip(pairs, samples, strict=True):
                        start = time.perf_counter()
                        result = await client.call_tool(name, {"text": "x"})
                        samples[label].append((time.perf_counter() - start) * 1000)
                        assert not result.is_error, result
                medians = {k: statistics.median(v[start_of_round:]) for k, v in samples.items()}
                gw, dr, fl = medians["gateway"], medians["direct"], medians["relay"]
                before = (
                    f", baseline {medians['baseline'] / dr:.2f}x" if "baseline" in medians else ""
                )
                print(
                    f"round {round_}: gateway {gw:.2f}, direct {dr:.2f}, relay {fl:.2f} ms: "
                    f"{gw / dr:.2f}x (floor {fl / dr:.2f}x{before})"
                )
    medians = {k: statistics.median(v) for k, v in samples.items()}
    gw, dr, fl = medians["gateway"], medians["direct"], medians["relay"]
    p99 = {k: sorted(v)[int(len(v) * 0.99) - 1] for k, v in samples.items()}
    print(f"warm call, median of {calls * rounds}: gateway {gw:.2f} ms, direct {dr:.2f} ms")
    print(f"ratio {gw / dr:.2f} (goal <= 1.15), added {gw - dr:.2f} ms (goal <= 2)")
    print(f"floor: a relay that only copies bytes, {fl:.2f} ms, {fl / dr:.2f}x")
    print(f"bundlectl's own work: {gw - fl:.2f} ms a call ({gw / fl:.2f}x the relay)")
    if "baseline" in medians:
        before = medians["baseline"]
        print(f"baseline ({baseline}): {before:.2f} ms, {before / dr:.2f}x")
    if "traced" in medians:
        on = medians["traced"]
        print(f"with OpenTelemetry on: {on:.2f} ms, {on - gw:+.3f} ms a call (goal <= 0.15)")
        print(f"  exports received: {_Sink.received or 'none'}")
    print(f"p99: gateway {p99['gateway']:.2f} ms, direct {p99['direct']:.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300, help="calls of each kind per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--baseline",
        type=Path,
        help="a checkout of bundlectl (e.g. a `git worktree` of the commit before a change) whose "
        "`serve` is timed in the same run",
    )
    parser.add_argument(
        "--traced", action="store_true", help="also time the gateway with OpenTelemetry on"
    )
    args = parser.parse_args()
    if args.baseline is not None and not (args.baseline / "bundlectl" / "__init__.py").exists():
        parser.error(f"--baseline: {args.baseline} holds no bundlectl package")
    anyio.run(bench, args.calls, args.rounds, args.baseline, args.traced)


if __name__ == "__main__":
    main()
