"""What a quota costs a let-through call (issue 39's goal: <= 0.1 ms with SQLite): the
pipeline's admission of one allowed call (`Pipeline.admit`: the quota count, then the `pending`
audit record), side by side with the same project without `limits:`, in one run.

    python bench/bench_limits.py [--calls 2000]

The audit sink is a no-op so only the counting differs. SQLite in WAL mode with
synchronous=NORMAL (a commit per counted call, no fsync but at checkpoints), in a throwaway
BUNDLECTL_HOME on this machine's disk.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

CONFIG = """version: 1
bundles: [basic]
agents:
  bot: {{allow: [files.read_file]}}
{limits}
policy: {{default: deny}}
"""
LIMITS = "limits:\n  - {agents: ['*'], tools: [files.read_file], calls: 10000000, per: 1d}"


class Discard:
    def record(self, *args: Any, **kwargs: Any) -> None:
        pass


def per_call_us(folder: Path, limits: str, calls: int) -> list[float]:
    from bundlectl.calls.pipeline import Pipeline
    from bundlectl.config.project import load_project
    from bundlectl.resolve.resolved import resolve_project

    project = folder / ("limited" if limits else "plain")
    project.mkdir()
    (project / "bundlectl.yaml").write_text(CONFIG.format(limits=limits))
    resolution = resolve_project(load_project(project / "bundlectl.yaml"))
    pipeline = Pipeline(resolution, Discard(), None)  # type: ignore[arg-type]
    decision = pipeline.judge("bot", "files", "read_file", interactive=False)
    pipeline.admit(decision)  # opens the store, compiles the limits
    rounds = []
    for _ in range(5):
        began = time.perf_counter()
        for _ in range(calls):
            pipeline.admit(decision)
        rounds.append((time.perf_counter() - began) / calls * 1e6)
    return rounds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    calls = parser.parse_args().calls
    with tempfile.TemporaryDirectory() as folder:
        os.environ["BUNDLECTL_HOME"] = str(Path(folder) / "home")
        plain = per_call_us(Path(folder), "", calls)
        limited = per_call_us(Path(folder), LIMITS, calls)
    p, q = statistics.median(plain), statistics.median(limited)
    print(f"admission of one allowed call, median of 5 rounds of {calls}:")
    print(f"  no limits:            {p:7.1f} us")
    print(f"  one limit (SQLite):   {q:7.1f} us   (+{q - p:.1f} us = {(q - p) / 1000:.3f} ms)")


if __name__ == "__main__":
    main()
