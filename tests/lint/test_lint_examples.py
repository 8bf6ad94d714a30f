"""Lint example projects: tests/examples/<case>/ holds the files, `case.yaml` (CLI args, setup
steps, environment) and `expected.txt` (the exact text output). Cases are discovered here."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from tests.conftest import Run

EXAMPLES = Path(__file__).parents[1] / "examples"
CASES = sorted(p.name for p in EXAMPLES.iterdir() if (p / "bundlectl.yaml").exists())


def prepare(name: str, project: Path, run: Run, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Copy the case into the project folder, apply its environment and setup; return args."""
    source = EXAMPLES / name
    shutil.copytree(source, project, dirs_exist_ok=True)
    for leftover in ("case.yaml", "expected.txt"):
        (project / leftover).unlink(missing_ok=True)
    spec: dict[str, Any] = {}
    if (source / "case.yaml").exists():
        spec = YAML(typ="safe", pure=True).load((source / "case.yaml").read_text()) or {}
    for key, value in (spec.get("env") or {}).items():
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, str(value))
    config = project / "bundlectl.yaml"
    for step in spec.get("setup") or []:
        if isinstance(step, dict) and "replace" in step:
            old, new = step["replace"]
            config.write_text(config.read_text().replace(old, new))
        else:
            assert run(*step).code == 0, step
    return [str(a) for a in spec.get("args") or []]


@pytest.mark.parametrize("name", CASES)
def test_example(name: str, project: Path, run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    args = prepare(name, project, run, monkeypatch)
    result = run("lint", *args)
    expected = (EXAMPLES / name / "expected.txt").read_text()
    assert result.out == expected, result.err
    errors = [line for line in expected.splitlines() if " error " in line]
    assert result.code == (1 if errors else 0)
    assert "Traceback" not in result.err
