"""`bundlectl lock` against a remote registry of many bundles, side by side with the same
bundles in a local folder (issue 40's goals: a warm cache <= 1.2x the folder; a cold static index
on loopback <= 1 s).

    python bench/bench_remote_registry.py [--bundles 500] [--runs 7]

One run writes `--bundles` manifests (one version each, three tools each), builds a static index
(`bundlectl registry build`), serves it from a loopback HTTP server in this process, and times
`bundlectl lock` (the installed console script, as a user runs it) in three projects that
require the same ten bundles:
  - folder: `registries: [./team]`, the manifests on disk;
  - warm:   `registries: [http://127.0.0.1:PORT/]`, the mirror already in the cache (fresh);
  - cold:   the same URL with an empty cache each run (index and every manifest fetched).
Each run interleaves the cases, so machine noise hits them alike; medians are printed.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

MANIFEST = """name: {name}
version: 1.0.0
description: Bundle {name} of a large team registry.
servers:
  {name}-srv:
    command: python
    args: ["-m", "{name}_server"]
    tools:
      - {{name: read_{i}, description: Reads the thing number {i}.}}
      - {{name: write_{i}, description: Writes the thing number {i}.}}
      - {{name: list_{i}, description: Lists the things.}}
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bundles", type=int, default=500)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    bundlectl = str(Path(sys.executable).parent / "bundlectl")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        team = root / "team"
        for i in range(args.bundles):
            name = f"team-{i:04d}"
            (team / name).mkdir(parents=True)
            (team / name / "1.0.0.yaml").write_text(MANIFEST.format(name=name, i=i))
        env = {**os.environ, "BUNDLECTL_HOME": str(root / "home")}
        subprocess.run(
            [bundlectl, "registry", "build", str(team), "--out", str(root / "www")],
            check=True,
            env=env,
            stdout=subprocess.DEVNULL,
        )
        handler = functools.partial(_Quiet, directory=str(root / "www"))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        wanted = ", ".join(f"team-{i:04d}" for i in range(0, args.bundles, args.bundles // 10))
        projects = {}
        for case, registry in (("folder", "./team"), ("warm", url), ("cold", url)):
            folder = root / case
            folder.mkdir()
            if case == "folder":
                shutil.copytree(team, folder / "team")
            (folder / "bundlectl.yaml").write_text(
                f"version: 1\nregistries: ['{registry}']\nbundles: [{wanted}]\n"
            )
            projects[case] = folder
        homes = {case: root / f"home-{case}" for case in projects}
        samples: dict[str, list[float]] = {case: [] for case in projects}
        for run in range(args.runs + 1):  # the first run warms the caches; not counted
            for case, folder in projects.items():
                if case == "cold":
                    shutil.rmtree(homes[case], ignore_errors=True)
                elif case == "warm":
                    for index in homes[case].glob("cache/registries/*/.index.json"):
                        index.touch()  # fresh: the mirror is used as it is
                took = _timed(
                    [bundlectl, "lock"], folder, {**env, "BUNDLECTL_HOME": str(homes[case])}
                )
                if run:
                    samples[case].append(took)
        server.shutdown()
    medians = {case: statistics.median(values) for case, values in samples.items()}
    for case, value in medians.items():
        print(f"lock, {args.bundles}-bundle registry, {case:6} {value * 1000:7.0f} ms")
    print(f"warm / folder: {medians['warm'] / medians['folder']:.2f} (goal <= 1.2)")
    print(f"cold: {medians['cold']:.2f} s (goal <= 1 s)")


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def _timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, check=False)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} in {cwd} failed:\n{done.stderr.decode()}")
    return took


if __name__ == "__main__":
    main()
