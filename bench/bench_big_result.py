"""Memory and time of `bundlectl exec` for one huge text result, in text and JSON mode.

    python bench/bench_big_result.py [--mb 50 100]

The test server's `huge` tool returns SIZE characters as text and again as structured content
(`{"result": text}`), so the JSON-RPC message holds 2 x SIZE characters. Each case runs in a
fresh process; the figure is that process's own peak RSS (the server's is not counted) and the
wall time, with the SDK's import (~90 MB, ~1 s) included.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBE = """
import resource, sys, time
from bundlectl.cli.main import main
began = time.perf_counter()
code = main(sys.argv[1:])
sys.stdout.flush()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"{code} {time.perf_counter() - began:.2f} {peak:.0f}", file=sys.stderr)
"""


def measure(project: Path, size: int, fmt: str) -> tuple[float, float]:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            PROBE,
            "exec",
            "kitchen.huge",
            f"size={size}",
            "--timeout",
            "600",
            "--format",
            fmt,
        ],
        cwd=project,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    code, seconds, peak = done.stderr.strip().splitlines()[-1].split()
    if code != "0":
        raise SystemExit(done.stderr)
    return float(seconds), float(peak)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, nargs="+", default=[50, 100])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        server = {"command": sys.executable, "args": [str(ROOT / "tests/servers/kitchen.py")]}
        config = {"version": 1, "servers": {"kitchen": server}, "policy": {"default": "allow"}}
        (project / "bundlectl.yaml").write_text(json.dumps(config))
        print(f"{'text MB':>8} {'format':>6} {'seconds':>8} {'peak RSS MB':>12}")
        for mb in args.mb:
            for fmt in ("text", "json"):
                seconds, peak = measure(project, mb * 1_000_000, fmt)
                print(f"{mb:>8} {fmt:>6} {seconds:>8.2f} {peak:>12.0f}")


if __name__ == "__main__":
    main()
