"""Resolution over a synthetic registry: 200 bundles x 10 versions, each requiring a few others.

    python bench/bench_resolve.py

Two figures: the resolver alone over an in-memory index, and a whole `bundlectl lock` over the
same registry written to disk (parsing, validation, merge, lock). Target: under 1 s.
"""

from __future__ import annotations

import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from packaging.version import Version

from bundlectl.resolve.versions import constraint, resolve

BUNDLES, VERSIONS = 200, 10


def synthetic(seed: int = 7) -> dict[str, dict[str, list[str]]]:
    """name → version → requires. Bundle i may require bundles with a larger index (no cycles),
    with ranges that exclude the newest versions now and then, so backtracking happens."""
    rng = random.Random(seed)
    index: dict[str, dict[str, list[str]]] = {}
    for i in range(BUNDLES):
        versions: dict[str, list[str]] = {}
        for v in range(VERSIONS):
            requires = []
            for j in rng.sample(range(i + 1, BUNDLES), k=min(3, BUNDLES - i - 1)):
                low = rng.randint(0, 4)
                high = rng.randint(low + 3, VERSIONS + 1)
                requires.append(f"b{j:03d}>={low}.0,<{high}.0")
            versions[f"{v}.0.0"] = requires
        index[f"b{i:03d}"] = versions
    return index


class Index:
    def __init__(self, data: dict[str, dict[str, list[str]]]) -> None:
        self.data = data
        self.parsed = {n: [Version(v) for v in vs] for n, vs in data.items()}

    def names(self) -> list[str]:
        return list(self.data)

    def versions(self, name: str) -> Sequence[Version]:
        return self.parsed.get(name, [])

    def requires(self, name: str, version: Version) -> Sequence[str]:
        return self.data[name][str(version)]


def main() -> None:
    data = synthetic()
    roots = [f"b{i:03d}" for i in range(0, BUNDLES, 10)]
    index = Index(data)
    times = []
    for _ in range(7):
        start = time.perf_counter()
        result = resolve([constraint(r, "bench") for r in roots], index)
        times.append(time.perf_counter() - start)
    print(
        f"resolver only: {len(result)} bundles resolved, median "
        f"{statistics.median(times) * 1000:.0f} ms"
    )

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name, versions in data.items():
            folder = root / "bundles" / name
            folder.mkdir(parents=True)
            for version, requires in versions.items():
                body = f"name: {name}\nversion: {version}\nrequires: {requires!r}\n"
                body += f"servers:\n  s-{name}:\n    command: server-{name}\n"
                (folder / f"{version}.yaml").write_text(body)
        (root / "bundlectl.yaml").write_text(
            "version: 1\nregistries: [bundles]\nbundles: [" + ", ".join(roots) + "]\n"
        )
        env = {**os.environ, "BUNDLECTL_HOME": str(root / "home")}
        exe = str(Path(sys.executable).with_name("bundlectl"))
        runs = []
        for attempt in range(4):
            (root / "bundlectl.lock").unlink(missing_ok=True)
            start = time.perf_counter()
            subprocess.run([exe, "lock"], cwd=root, env=env, check=True, stdout=subprocess.DEVNULL)
            runs.append(time.perf_counter() - start)
            label = "cold cache" if attempt == 0 else "warm"
            print(f"bundlectl lock over 200x10 on disk ({label}): {runs[-1] * 1000:.0f} ms")


if __name__ == "__main__":
    main()
