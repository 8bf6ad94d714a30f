"""How long a held call waits after its approval: from the approver's decision written to the
store to the waiting `exec` saying it was approved (issue 39's goal: <= 200 ms on one machine).

    python bench/bench_approvals.py [--runs 10]

Each run starts `bundlectl exec -a writer files.write_file ...` in a throwaway project with
`policy.approvals` on (so it holds the call and waits, polling the SQLite store every 0.1 s),
waits for the pending request and a random moment, approves it through the store (as
`bundlectl approvals approve` does, without that command's start-up), and times until exec's
stderr says "approved by".
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bundlectl.state.sqlite import SqliteStore

CONFIG = """version: 1
bundles: [basic]
agents:
  writer: {allow: [files.read_file], ask: [files.write_file]}
policy:
  default: deny
  approvals: {ttl: 10m}
"""


def one(project: Path, home: Path, run: int) -> float:
    env = {**os.environ, "BUNDLECTL_HOME": str(home), "CI": "1"}
    argv = [sys.executable, "-m", "bundlectl", "exec", "-a", "writer", "files.write_file"]
    process = subprocess.Popen(
        [*argv, f"path=out{run}.txt", "content=x"],
        cwd=project,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    store = SqliteStore(home / "state" / "state.sqlite3")
    deadline = time.monotonic() + 60
    while True:
        if (home / "state" / "state.sqlite3").exists() and (pending := store.listed()):
            break
        if time.monotonic() > deadline or process.poll() is not None:
            raise SystemExit("exec never held its call")
        time.sleep(0.01)
    time.sleep(random.uniform(0, 0.2))  # an approver decides at any moment of exec's polling
    began = time.perf_counter()
    store.decide(pending[0].id, approve=True, by="bench")
    for line in process.stderr:
        if line.startswith("approved by"):
            took = time.perf_counter() - began
            break
    else:
        raise SystemExit("exec ended without saying it was approved")
    process.communicate()
    return took * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as folder:
        project, home = Path(folder) / "p", Path(folder) / "home"
        project.mkdir()
        (project / "bundlectl.yaml").write_text(CONFIG)
        times = sorted(one(project, home, run) for run in range(runs))
    print(f"approve -> held exec proceeds, {runs} runs (polling every 0.1 s):")
    print(f"  median {statistics.median(times):.0f} ms, max {times[-1]:.0f} ms")


if __name__ == "__main__":
    main()
