"""One-shot tool calls: bundlectl exec against the MCP Inspector's CLI mode, side by side.

    python bench/bench_exec.py [--runs 9]

Cases (each run interleaves all of them so machine noise hits every case alike):
  - mcp-server-time get_current_time: the MCP Inspector's CLI mode vs
    `bundlectl exec time.get_current_time timezone=UTC`. Target: bundlectl <= 0.8x Inspector.
  - files.read_file on the built-in server: the Inspector calling `bundlectl server files` over
    stdio vs `bundlectl exec files.read_file` (in-process). Target: <= 0.4x.
  - the reference server-everything (Node, from tests/npm; starts in a fraction of
    mcp-server-time's time), tool `echo`: the Inspector vs `bundlectl exec everything.echo`.
    Target: <= 0.6x (issue 21's goal for exec on a stdio server).
  - `exec everything.echo` as the first call after an edit: what it costs when no earlier call
    of the same tool left its launch to start the server from (the other exec cases do).
  - the floors: each server called over raw pipes by a hand-written minimal client
    (`raw_call.py`): what the server itself costs, which no client can go under.
The peer runs the way its users run it fastest: its installed binary (`npm install` of the pinned
version into bundlectl's cache folder, once), never through `npx`, which adds about a second to
every call. The Inspector cases are skipped, with a note, when npm is not available.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

INSPECTOR = "@modelcontextprotocol/inspector@2.12.0"
EVERYTHING = (
    Path(__file__).resolve().parent.parent
    / "tests/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
)
TIME_SERVER = [sys.executable, "-m", "mcp_server_time"]
EVERYTHING_SERVER = [shutil.which("node") or "node", str(EVERYTHING), "stdio"]


def inspector_binary() -> str | None:
    """The pinned Inspector's installed CLI (installed on first use), or None without npm."""
    npm = shutil.which("npm")
    if npm is None:
        return None
    prefix = Path(tempfile.gettempdir()) / "bundlectl-bench" / INSPECTOR.replace("/", "_")
    binary = prefix / "node_modules" / ".bin" / "mcp-inspector"
    if not binary.exists():
        prefix.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [npm, "install", "--prefix", str(prefix), "--no-fund", "--no-audit", INSPECTOR],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    return str(binary)


def timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr.decode()}")
    return elapsed


def inspector_call(tool: str, argument: str) -> list[str]:
    return ["--method", "tools/call", "--tool-name", tool, "--tool-arg", argument]


def all_cases(bundlectl: str, inspector: str | None) -> dict[str, list[str]]:
    """Each case's command: ours, the floors, and the Inspector's where npm is."""
    raw_call = [sys.executable, str(Path(__file__).parent / "raw_call.py")]
    cases = {
        "bundlectl exec time.get_current_time": [
            *(bundlectl, "exec", "time.get_current_time", "timezone=UTC")
        ],
        "bundlectl exec files.read_file (in-process)": [
            *(bundlectl, "exec", "files.read_file", "path=hello.txt")
        ],
        "floor: mcp-server-time over raw pipes": [*raw_call, *TIME_SERVER],
    }
    if EVERYTHING.exists():
        cases["bundlectl exec everything.echo"] = [
            bundlectl,
            "exec",
            "everything.echo",
            "message=hi",
        ]
        cases[FIRST] = cases["bundlectl exec everything.echo"]
        cases["floor: server-everything over raw pipes"] = [
            *(*raw_call, "--call", "echo", '{"message": "hi"}', *EVERYTHING_SERVER)
        ]
    else:
        print(f"note: {EVERYTHING} not found (npm ci --prefix tests/npm); its cases skipped")
    if inspector is None:
        print("note: npm not found; the Inspector cases are skipped")
        return cases
    base = [inspector, "--cli"]
    cases["inspector: mcp-server-time get_current_time"] = [
        *(*base, *TIME_SERVER, *inspector_call("get_current_time", "timezone=UTC"))
    ]
    cases["inspector: bundlectl server files read_file"] = [
        *(*base, bundlectl, "server", "files", *inspector_call("read_file", "path=hello.txt"))
    ]
    if EVERYTHING.exists():
        cases["inspector: server-everything echo"] = [
            *(*base, *EVERYTHING_SERVER, *inspector_call("echo", "message=hi"))
        ]
    return cases


# (ours, the Inspector's, target ratio); the floors are each server's own cost
PAIRS = [
    ("bundlectl exec time.get_current_time", "inspector: mcp-server-time get_current_time", 0.8),
    (
        "bundlectl exec files.read_file (in-process)",
        "inspector: bundlectl server files read_file",
        0.4,
    ),
    ("bundlectl exec everything.echo", "inspector: server-everything echo", 0.6),
]
# the same call with nothing kept from an earlier one (the first call after an edit): the kept
# launches are removed before each of its runs, so the server starts after the project loads
FIRST = "bundlectl exec everything.echo (first call)"
# exec's own cost: what it adds to the same server called over raw pipes (start-up, policy,
# audit, shutdown), the server's own start and answer taken out
OWN = [
    ("bundlectl exec time.get_current_time", "floor: mcp-server-time over raw pipes"),
    ("bundlectl exec everything.echo", "floor: server-everything over raw pipes"),
    (FIRST, "floor: server-everything over raw pipes"),
]
FLOORS = [
    ("floor: mcp-server-time over raw pipes", "inspector: mcp-server-time get_current_time"),
    ("floor: server-everything over raw pipes", "inspector: server-everything echo"),
]


def report(medians: dict[str, float]) -> None:
    for name, value in medians.items():
        print(f"{name:50} {value * 1000:7.0f} ms")
    for ours, theirs, target in PAIRS:
        if ours in medians and theirs in medians:
            ratio = medians[ours] / medians[theirs]
            print(f"{ours} / {theirs}: {ratio:.2f} (target <= {target})")
    for ours, floor in OWN:
        if ours in medians and floor in medians:
            own = (medians[ours] - medians[floor]) * 1000
            print(f"{ours}: its own cost {own:.0f} ms over the server's floor (goal <= 150)")
    for floor, peer in FLOORS:
        if floor in medians and peer in medians:
            print(
                f"{floor} / the Inspector: {medians[floor] / medians[peer]:.2f} "
                "(no client can go under it)"
            )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    bundlectl = str(Path(sys.executable).parent / "bundlectl")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "hello.txt").write_text("hello\n")
        (root / "bundlectl.yaml").write_text(
            "version: 1\nbundles: [basic]\nservers:\n"
            f"  time: {{command: {TIME_SERVER[0]}, args: {TIME_SERVER[1:]}, tools: []}}\n"
            f"  everything: {{command: {EVERYTHING_SERVER[0]}, args: {EVERYTHING_SERVER[1:]}, "
            "tools: []}\npolicy: {default: allow}\n"
        )
        env = {**os.environ, "BUNDLECTL_HOME": str(root / "home")}
        # The first-call case keeps its state in a home of its own: removing its kept launches
        # must not remove the other cases' (one file per project holds them all).
        first_env = {**os.environ, "BUNDLECTL_HOME": str(root / "home-first")}
        cases = all_cases(bundlectl, inspector_binary())
        for name, cmd in cases.items():  # warm caches (npm, manifests, bytecode)
            timed(cmd, root, first_env if name == FIRST else env)
        samples: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.runs):
            for name, cmd in cases.items():
                if name == FIRST:
                    shutil.rmtree(root / "home-first" / "cache" / "exec", ignore_errors=True)
                samples[name].append(timed(cmd, root, first_env if name == FIRST else env))
    report({name: statistics.median(values) for name, values in samples.items()})


if __name__ == "__main__":
    main()
