"""Start-up cost of bundlectl commands against the bare import floor of their dependencies.

    python bench/bench_cli.py [--runs 21]

Runs each command and the floor interleaved (so machine noise hits both alike) in a fresh
temporary BUNDLECTL_HOME and prints medians: `show basic` and `list` outside any project,
`policy check` and `lint` on a small project (the `basic` bundle, two agents). The target for each
is at most 1.5x the floor.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FLOOR = "import typer, pydantic, ruamel.yaml, platformdirs, packaging.specifiers"


def timed(cmd: list[str], env: dict[str, str], cwd: str) -> float:
    start = time.perf_counter()
    subprocess.run(
        cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()
    exe = str(Path(sys.executable).with_name("bundlectl"))
    with (
        tempfile.TemporaryDirectory() as home,
        tempfile.TemporaryDirectory() as cwd,
        tempfile.TemporaryDirectory() as project,
    ):
        # Bytecode as an installed package has it (pip compiles on install): without this, a
        # PYTHONDONTWRITEBYTECODE environment recompiles bundlectl's sources on every run
        # (~25 ms) while the dependencies of the floor load theirs from site-packages.
        # User folders through the XDG variables, as a user's come through platformdirs
        # (BUNDLECTL_HOME, which the tests use, would skip platformdirs and flatter us).
        env = {k: v for k, v in os.environ.items() if k != "BUNDLECTL_HOME"}
        for kind in ("CACHE", "CONFIG", "DATA", "STATE"):
            env[f"XDG_{kind}_HOME"] = os.path.join(home, kind.lower())
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        (Path(project) / "bundlectl.yaml").write_text(
            "version: 1\nbundles: [basic]\nagents:\n  reader: {allow: [files.read_file]}\n"
            "  writer: {extends: [reader], ask: [files.write_file]}\npolicy: {default: deny}\n"
        )
        subprocess.run([exe, "lock"], env=env, cwd=project, check=True, capture_output=True)
        cases = {
            "floor (import typer, pydantic, ...)": [sys.executable, "-c", FLOOR],
            # `import pydantic` is lazy; defining any model loads the rest (context, not target).
            "floor + pydantic.BaseModel": [
                sys.executable,
                "-c",
                FLOOR + "; from pydantic import BaseModel, Field",
            ],
            "bundlectl --version": [exe, "--version"],
            "bundlectl show basic": [exe, "show", "basic"],
            "bundlectl list": [exe, "list"],
            "bundlectl policy check (project)": [
                exe,
                "policy",
                "check",
                "--agent",
                "writer",
                "--interactive",
                "files.write_file",
            ],
            "bundlectl lint (project)": [exe, "lint"],
        }
        where = {name: project if "(project)" in name else cwd for name in cases}
        for name, cmd in cases.items():  # warm the OS cache, the manifest cache, the bytecode
            timed(cmd, env, where[name])
        samples: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.runs):
            for name, cmd in cases.items():
                samples[name].append(timed(cmd, env, where[name]))
    floor = statistics.median(samples[next(iter(cases))])
    print(f"{'case':40} {'median ms':>10} {'x floor':>8}")
    for name, values in samples.items():
        median = statistics.median(values)
        print(f"{name:40} {median * 1000:10.0f} {median / floor:8.2f}")


if __name__ == "__main__":
    main()
