"""One-shot tool calls: bundlectl exec against the MCP Inspector's CLI mode, side by side.

    python bench/bench_exec.py [--runs 9]

Cases (each run interleaves all of them so machine noise hits every case alike):
  - mcp-server-time get_current_time: the MCP Inspector's CLI mode vs
    `bundlectl exec time.get_current_time timezone=UTC`. Target: bundlectl <= 0.8x Inspector.
  - files.read_file on the built-in server: the Inspector calling `bundlectl server files` over
    stdio vs `bundlectl exec files.read_file` (in-process). Target: <= 0.4x.
  - the floor: mcp-server-time called over raw pipes by a hand-written minimal client
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    bindir = Path(sys.executable).parent
    bundlectl = str(bindir / "bundlectl")
    time_server = [sys.executable, "-m", "mcp_server_time"]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "hello.txt").write_text("hello\n")
        (root / "bundlectl.yaml").write_text(
            "version: 1\nbundles: [basic]\nservers:\n  time:\n"
            f"    command: {sys.executable}\n    args: [-m, mcp_server_time]\n"
            "    tools: []\npolicy: {default: allow}\n"
        )
        env = {**os.environ, "BUNDLECTL_HOME": str(root / "home")}
        cases: dict[str, list[str]] = {
            "bundlectl exec time.get_current_time": [
                bundlectl,
                "exec",
                "time.get_current_time",
                "timezone=UTC",
            ],
            "bundlectl exec files.read_file (in-process)": [
                bundlectl,
                "exec",
                "files.read_file",
                "path=hello.txt",
            ],
            # The floor: the server itself, called by a minimal hand-written client.
            "floor: mcp-server-time over raw pipes": [
                sys.executable,
                str(Path(__file__).parent / "raw_call.py"),
                *time_server,
            ],
        }
        inspector = inspector_binary()
        if inspector:
            base = [inspector, "--cli"]
            cases["inspector: mcp-server-time get_current_time"] = [
                *base,
                *time_server,
                "--method",
                "tools/call",
                "--tool-name",
                "get_current_time",
                "--tool-arg",
                "timezone=UTC",
            ]
            cases["inspector: bundlectl server files read_file"] = [
                *base,
                bundlectl,
                "server",
                "files",
                "--method",
                "tools/call",
                "--tool-name",
                "read_file",
                "--tool-arg",
                "path=hello.txt",
            ]
        else:
            print("note: npm not found; the Inspector cases are skipped")
        for cmd in cases.values():  # warm caches (npm, manifests, bytecode)
            timed(cmd, root, env)
        samples: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.runs):
            for name, cmd in cases.items():
                samples[name].append(timed(cmd, root, env))
    medians = {name: statistics.median(values) for name, values in samples.items()}
    for name, value in medians.items():
        print(f"{name:50} {value * 1000:7.0f} ms")
    if inspector:
        pairs = [
            (
                "bundlectl exec time.get_current_time",
                "inspector: mcp-server-time get_current_time",
                0.8,
            ),
            (
                "bundlectl exec files.read_file (in-process)",
                "inspector: bundlectl server files read_file",
                0.4,
            ),
        ]
        for ours, theirs, target in pairs:
            ratio = medians[ours] / medians[theirs]
            print(f"{ours} / {theirs}: {ratio:.2f} (target <= {target})")
        floor = medians["floor: mcp-server-time over raw pipes"]
        peer = medians["inspector: mcp-server-time get_current_time"]
        print(f"the floor / the Inspector: {floor / peer:.2f} (no client can go under it)")


if __name__ == "__main__":
    main()
