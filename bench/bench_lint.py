"""`bundlectl lint` on a generated project: 1,000 agents, 50 servers x 100 tools.

    python bench/bench_lint.py

Target: <= 5 s here. The project is the one bench_policy.py generates (random rules with
wildcards, extends, a global deny), so most rules trigger some analysis.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_policy import matrix_policy, write_project


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_project(root, matrix_policy(random.Random(3)))
        exe = str(Path(sys.executable).with_name("bundlectl"))
        env = {**os.environ, "BUNDLECTL_HOME": str(root / "home")}
        subprocess.run([exe, "lock"], cwd=root, env=env, check=True, stdout=subprocess.DEVNULL)
        for label in ("first run", "second run"):
            start = time.perf_counter()
            done = subprocess.run(
                [exe, "lint", "--format", "json"],
                cwd=root,
                env=env,
                stdout=subprocess.PIPE,
                check=False,
            )
            elapsed = time.perf_counter() - start
            count = done.stdout.count(b'"rule":')
            print(
                f"bundlectl lint, 1,000 agents x 50 servers x 100 tools ({label}): "
                f"{elapsed:.2f} s, {count:,} findings, exit {done.returncode}"
            )


if __name__ == "__main__":
    main()
