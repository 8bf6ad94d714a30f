"""Hostile and broken files: every case in tests/badinput/<case>/ goes through `resolve` and
`lint`, one after the other in a fresh process bounded in time and memory.

A case folder holds the project's files and `expected.yaml`:

    resolve: {code: 2, errors: ["error: bundlectl.yaml:8:12: alias *b4 ..."]}   # every error: line
    lint: {code: 1, findings: ["bundlectl.yaml:8:12: BCL001"]}   # position and rule of each

The bounds are far above what a sound run needs (about 0.3 s and 60 MB here) and far below what
the defects they guard against took (an alias bomb: 17 s and 1.85 GB; deep nesting: a
RecursionError). The process also runs under an address-space limit, so a regression fails the
test instead of taking the machine with it.
"""

from __future__ import annotations

import json
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
import json, os, resource, sys, tempfile
from bundlectl.cli.main import main

said = []
for args in json.loads(sys.argv[2]):
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        kept = os.dup(1), os.dup(2)
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        try:
            code = main(args)
        except SystemExit as exc:
            code = exc.code
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(kept[0], 1)
            os.dup2(kept[1], 2)
        out.seek(0)
        err.seek(0)
        said.append([code, out.read().decode(), err.read().decode()])
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
with open(sys.argv[1], "w") as handle:
    json.dump({"peak_kb": peak, "said": said}, handle)
"""


def _limit() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def bounded(commands: list[list[str]], cwd: Path, home: Path) -> list[tuple[int, str, str]]:
    """Each command's exit code, stdout and stderr, run one after the other by one process."""
    report = cwd.parent / "report.json"
    env = {**os.environ, "BUNDLECTL_HOME": str(home)}
    env.pop("BUNDLECTL_CONFIG", None)
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(report), json.dumps(commands)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=SECONDS * 3,
        preexec_fn=_limit,  # only setrlimit, between fork and exec
        check=False,
    )
    elapsed = time.monotonic() - began
    assert elapsed < SECONDS, f"{commands}: {elapsed:.1f} s"
    assert done.returncode == 0, done.stderr[-4000:]
    found = json.loads(report.read_text())
    peak_mb = found["peak_kb"] / 1024
    assert peak_mb < PEAK_MB, f"{commands}: {peak_mb:.0f} MB"
    said = [(code, out, err) for code, out, err in found["said"]]
    for _, _, err in said:
        assert "Traceback" not in err and "internal error" not in err
    return said


@pytest.mark.parametrize("name", CASES)
def test_bad_input(name: str, tmp_path: Path, isolated_home: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(CASES_DIR / name, project)
    (project / "expected.yaml").unlink()
    expected: dict[str, Any] = load_yaml(CASES_DIR / name / "expected.yaml")

    resolved, linted = bounded([["resolve"], ["lint", "--format", "text"]], project, isolated_home)
    code, _, err = resolved
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert (code, errors) == (expected["resolve"]["code"], expected["resolve"]["errors"])
    assert all(": " in line[len("error: ") :] for line in errors)  # file:line:col: message

    code, out, _ = linted
    findings = [
        " ".join(line.split()[:2])
        for line in out.splitlines()[:-1]
        if not line.startswith("  hint: ")
    ]
    assert (code, findings) == (expected["lint"]["code"], expected["lint"]["findings"])
