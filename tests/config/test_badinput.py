"""Hostile and broken files: every case in tests/badinput/<case>/ goes through `resolve` and
`lint` in a fresh process, each bounded in time and memory.

A case folder holds the project's files and `expected.yaml`:

    resolve: {code: 2, errors: ["error: bundlectl.yaml:8:12: alias *b4 ..."]}   # every error: line
    lint: {code: 1, findings: ["bundlectl.yaml:8:12: BCL001"]}   # position and rule of each

The bounds are far above what a sound run needs (about 0.3 s and 60 MB here) and far below what
the defects they guard against took (an alias bomb: 17 s and 1.85 GB; deep nesting: a
RecursionError). The process also runs under an address-space limit, so a regression fails the
test instead of taking the machine with it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import load_yaml

CASES_DIR = Path(__file__).parents[1] / "badinput"
CASES = sorted(p.name for p in CASES_DIR.iterdir() if (p / "expected.yaml").exists())
SECONDS = 10.0
PEAK_MB = 250
ADDRESS_SPACE = 2 << 30

PROBE = """
import resource, sys
from bundlectl.cli.main import main
code = main(sys.argv[2:])
sys.stdout.flush()
with open(sys.argv[1], "w") as handle:
    handle.write(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))
sys.exit(code)
"""


def _limit() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def bounded(args: list[str], cwd: Path, home: Path) -> tuple[int, str, str]:
    peak_file = cwd.parent / "peak.txt"
    env = {**os.environ, "BUNDLECTL_HOME": str(home)}
    env.pop("BUNDLECTL_CONFIG", None)
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(peak_file), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=SECONDS * 3,
        preexec_fn=_limit,  # only setrlimit, between fork and exec
        check=False,
    )
    elapsed = time.monotonic() - began
    assert elapsed < SECONDS, f"{args}: {elapsed:.1f} s"
    peak_mb = int(peak_file.read_text()) / 1024
    assert peak_mb < PEAK_MB, f"{args}: {peak_mb:.0f} MB"
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize("name", CASES)
def test_bad_input(name: str, tmp_path: Path, isolated_home: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(CASES_DIR / name, project)
    (project / "expected.yaml").unlink()
    expected: dict[str, Any] = load_yaml(CASES_DIR / name / "expected.yaml")

    code, _, err = bounded(["resolve"], project, isolated_home)
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert (code, errors) == (expected["resolve"]["code"], expected["resolve"]["errors"])
    assert all(": " in line[len("error: ") :] for line in errors)  # file:line:col: message

    code, out, _ = bounded(["lint", "--format", "text"], project, isolated_home)
    findings = [
        " ".join(line.split()[:2])
        for line in out.splitlines()[:-1]
        if not line.startswith("  hint: ")
    ]
    assert (code, findings) == (expected["lint"]["code"], expected["lint"]["findings"])
