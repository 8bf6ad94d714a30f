"""The pre-commit hooks at the repository root (`.pre-commit-hooks.yaml`, #59), run by pre-commit
itself on an example project in its own git repository, from a `.pre-commit-config.yaml` as a
user writes it. pre-commit installs the hooks as it does for a user — a virtualenv and
`pip install` of this repository (`language: python`) — from a commit of this checkout with its
uncommitted changes, made as `pre-commit try-repo` makes one. (`try-repo` itself installs the
hooks afresh for every call, ~5 s each; the config installs them once for the three runs here.)

One thing differs from a user's machine, to keep the suite offline and quick: the hooks'
environment finds bundlectl's dependencies on `PYTHONPATH` (this environment's site-packages) and
builds bundlectl with this environment's hatchling instead of fetching both from PyPI. The hooks'
bundlectl is still the one pip installs from the repository into pre-commit's environment."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from tests.conftest import REPO, Run


def _git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run(
        ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
        env=env,
    ).stdout.strip()


def _this_checkout(shadow: Path) -> str:
    """A clone of this repository whose last commit holds the working tree's changes to tracked
    files (what `pre-commit try-repo` does for a repository with uncommitted changes)."""
    _git(REPO, "clone", "-q", str(REPO), str(shadow))
    into_shadow = dict(
        os.environ,
        GIT_INDEX_FILE=_git(shadow, "rev-parse", "--absolute-git-dir") + "/index",
        GIT_OBJECT_DIRECTORY=_git(shadow, "rev-parse", "--absolute-git-dir") + "/objects",
    )
    staged = _git(REPO, "diff", "--cached", "--name-only", "--diff-filter=d").splitlines()
    if staged:  # new files added to the index, as pre-commit takes them
        _git(REPO, "add", "--", *staged, env=into_shadow)
    _git(REPO, "add", "-u", env=into_shadow)
    _git(shadow, "commit", "-q", "--allow-empty", "-m", "the working tree")
    return _git(shadow, "rev-parse", "HEAD")


def _pre_commit(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(
        os.environ,
        PRE_COMMIT_HOME=str(project.parent / "pre-commit-home"),
        PYTHONPATH=sysconfig.get_paths()["purelib"],
        PIP_NO_BUILD_ISOLATION="0",  # pip reads this variable inverted: "0" turns isolation off
        PIP_NO_INPUT="1",
        # the hook's environment needs pip alone (hatchling comes from PYTHONPATH)
        VIRTUALENV_NO_SETUPTOOLS="1",
        VIRTUALENV_NO_WHEEL="1",
    )
    env.pop("VIRTUAL_ENV", None)
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", "run", *args],
        check=False,
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def _hook_lines(output: str) -> dict[str, str]:
    """Each hook's status line: its name → Passed, Failed or Skipped."""
    lines = {}
    for line in output.splitlines():
        for status in ("Passed", "Failed", "Skipped"):
            if line.endswith(status) and line.startswith("bundlectl"):
                lines[line.split(".")[0].removesuffix("(no files to check)")] = status
    return lines


def test_the_hooks_run_under_pre_commit_on_a_project(tmp_path: Path, run: Run) -> None:
    rev = _this_checkout(tmp_path / "hooks")
    project = tmp_path / "project"
    shutil.copytree(REPO / "examples" / "minimal", project)
    os.chdir(project)
    assert run("export", "claude-code", "--agent", "reader").code == 0
    (project / "README.md").write_text("# a project\n")
    (project / ".pre-commit-config.yaml").write_text(
        "repos:\n"
        f"  - repo: {tmp_path / 'hooks'}\n"
        f"    rev: {rev}\n"
        "    hooks:\n"
        "      - id: bundlectl-lint\n"
        "      - id: bundlectl-lock-check\n"
        "      - id: bundlectl-export-check\n"
        "        args: [claude-code, --agent, reader]\n"
    )
    _git(project, "init", "-q")
    _git(project, "add", "-A")
    _git(project, "commit", "-qm", "start")

    clean = _pre_commit(project, "--all-files")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert _hook_lines(clean.stdout) == {
        "bundlectl lint": "Passed",
        "bundlectl lock --check": "Passed",
        "bundlectl export --check": "Passed",
    }, clean.stdout

    # A commit that touches none of the files the hooks read runs none of them (their `files:`).
    (project / "README.md").write_text("# a project\n\nmore\n")
    _git(project, "add", "README.md")
    unrelated = _pre_commit(project)
    assert unrelated.returncode == 0, unrelated.stdout + unrelated.stderr
    assert set(_hook_lines(unrelated.stdout).values()) == {"Skipped"}, unrelated.stdout

    # The reader loses a tool without a new lock or a new export: every hook fails, saying why.
    config = project / "bundlectl.yaml"
    config.write_text(
        config.read_text().replace("[files.read_file, files.list_directory]", "[files.read_file]")
    )
    _git(project, "add", "bundlectl.yaml")
    changed = _pre_commit(project)
    assert changed.returncode == 1, changed.stdout + changed.stderr
    assert set(_hook_lines(changed.stdout).values()) == {"Failed"}, changed.stdout
    assert "BCL103 error stale lock: policy changed: agents reader" in changed.stdout
    assert "bundlectl.lock is stale" in changed.stdout
    assert "run `bundlectl lock`" in changed.stdout
    assert ".mcp.json" in changed.stdout
