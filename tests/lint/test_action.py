"""The GitHub Action at the repository root (`action.yml`, #59): its steps run here as GitHub's
runner would run them — each `run:` with bash, its `${{ }}` expressions and `if:` conditions
evaluated over the inputs, the `github` context of a pull request and earlier steps' outputs —
against a pull request that widens a grant. Two steps are not run: `install` (bundlectl is
installed in this environment already) and the `uses:` upload to code scanning (GitHub's own
action; its input, the SARIF file, is checked). `gh` is a stand-in that records the comment."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from tests.conftest import REPO

NOT_RUN = {"install"}


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
    )


def _value(expression: str, context: dict[str, Any]) -> Any:
    """A `${{ }}` expression of the kinds action.yml uses: a dotted context reference."""
    found: Any = context
    for part in expression.strip().split("."):
        found = found.get(part, "") if isinstance(found, dict) else ""
    return found


def _holds(condition: str, context: dict[str, Any]) -> bool:
    """An `if:` of `&&`-joined comparisons `reference == 'literal'`."""
    for clause in condition.split("&&"):
        reference, literal = (side.strip() for side in clause.split("=="))
        if str(_value(reference, context)) != literal.strip("'"):
            return False
    return True


def _expanded(text: str, context: dict[str, Any]) -> str:
    return re.sub(r"\$\{\{(.*?)\}\}", lambda m: str(_value(m.group(1), context)), text)


def _run_action(
    workdir: Path, inputs: dict[str, str], tmp: Path, path: str
) -> tuple[dict[str, Any], int]:
    action = YAML(typ="safe", pure=True).load((REPO / "action.yml").read_text())
    defaults = {name: spec.get("default", "") for name, spec in action["inputs"].items()}
    context: dict[str, Any] = {
        "inputs": {**defaults, **inputs},
        "github": {
            "action_path": str(REPO),
            "base_ref": "main",
            "event_name": "pull_request",
            "event": {"pull_request": {"number": 7}},
            "token": "test-token",
        },
        "steps": {},
    }
    runner = tmp / "runner"
    runner.mkdir()
    summary = tmp / "summary.md"
    summary.touch()
    for step in action["runs"]["steps"]:
        if "if" in step and not _holds(step["if"], context):
            continue
        if "uses" in step or step.get("id") in NOT_RUN:
            continue
        outputs = tmp / f"output-{step['id']}"
        outputs.touch()
        env = {
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{path}",
            "RUNNER_TEMP": str(runner),
            "GITHUB_OUTPUT": str(outputs),
            "GITHUB_STEP_SUMMARY": str(summary),
            **{k: _expanded(str(v), context) for k, v in step.get("env", {}).items()},
        }
        cwd = workdir / _expanded(step.get("working-directory", "."), context)
        done = subprocess.run(
            ["bash", "-e", "-c", _expanded(step["run"], context)],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        said = dict(line.split("=", 1) for line in outputs.read_text().splitlines() if "=" in line)
        context["steps"][step["id"]] = {"outputs": said, "stdout": done.stdout}
        if done.returncode != 0:
            return context, done.returncode
    context["summary"] = summary.read_text()
    return context, 0


def test_the_action_reviews_a_pull_request_that_widens_a_grant(tmp_path: Path) -> None:
    origin = tmp_path / "origin"
    origin.mkdir()
    for name in ("bundlectl.yaml", "bundlectl.lock"):
        shutil.copy(REPO / "examples" / "team" / name, origin / name)
    _git(origin, "init", "-q", "-b", "main")
    _git(origin, "add", "-A")
    _git(origin, "commit", "-qm", "base")
    checkout = tmp_path / "checkout"
    _git(tmp_path, "clone", "-q", str(origin), str(checkout))
    config = checkout / "bundlectl.yaml"
    config.write_text(
        config.read_text().replace("ask: [files.write_file]", "allow: [files.write_file]")
    )
    locked = subprocess.run(
        [sys.executable, "-m", "bundlectl", "lock"],
        cwd=checkout,
        capture_output=True,
        text=True,
        check=False,
    )
    assert locked.returncode == 0, locked.stderr  # the pull request brings its lock along
    # A stand-in for GitHub's CLI: it records the comment it was asked to post.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    gh = bin_dir / "gh"
    gh.write_text(
        f'#!/bin/sh\necho "$@" >> {tmp_path / "gh.log"}\ncp "$5" {tmp_path / "comment.md"}\n'
    )
    gh.chmod(0o755)
    path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"

    context, code = _run_action(checkout, {}, tmp_path, path)
    assert code == 0, context["steps"]
    steps = context["steps"]
    assert steps["lint"]["outputs"]["status"] == "0"
    sarif = json.loads(Path(steps["lint"]["outputs"]["sarif"]).read_text())
    assert sarif["version"] == "2.1.0"
    assert steps["diff"]["outputs"]["changed"] == "true"
    assert "| + | files.write_file | ask | **allow** |" in context["summary"]
    logged = (tmp_path / "gh.log").read_text()
    assert logged.startswith("pr comment 7 --body-file")
    assert "files.write_file" in (tmp_path / "comment.md").read_text()

    # A required check: the same pull request fails it, and one that changes nothing passes.
    (tmp_path / "runner").rename(tmp_path / "runner-1")
    _, code = _run_action(checkout, {"fail-on-change": "true"}, tmp_path, path)
    assert code == 1
    _git(checkout, "checkout", "-q", "--", "bundlectl.yaml", "bundlectl.lock")
    shutil.rmtree(tmp_path / "runner")
    (tmp_path / "gh.log").unlink()
    context, code = _run_action(checkout, {"fail-on-change": "true"}, tmp_path, path)
    assert code == 0 and context["steps"]["diff"]["outputs"]["changed"] == "false"
    assert "No change in who may do what." in context["summary"]
    assert not (tmp_path / "gh.log").exists()  # nothing to comment on
