"""Every hint we print must run as printed (issue: what a new user trips on, 6): the error paths
a new user meets are run, the commands their hints name are collected and run in turn, and none
may be a usage error (exit 2) or a crash (70)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.conftest import Run, write

CONFIG = """
version: 1
bundles: [basic]
agents:
  reader: {allow: [files.read_file, files.list_directory]}
  writer: {allow: [files.read_file], ask: [files.write_file]}
  docs:
    allow:
      - {tool: files.write_file, args: {path: {path: "docs/**"}}}
policy: {default: deny}
"""

# The error paths: each is a command a new user runs that fails with a hint.
FAILING = [
    ["exec", "files.read_file", "path=x"],  # no --agent: the default agent, not listed
    ["exec", "--agent", "reader", "files.write_file", "path=a", "content=b"],
    ["exec", "--agent", "docs", "files.write_file", "path=src/a", "content=b"],
    ["exec", "--agent", "reader", "files.read_fil", "path=x"],
    ["exec", "--agent", "writer", "files.write_file", "path=a", "content=b"],
    ["read", "files", "file:///x", "--agent", "writer"],
    ["serve", "--agent", "redaer"],
    ["policy", "check", "--agent", "docs", "files.write_file"],
    ["policy", "explain", "--agent", "nobody", "files.read_file"],
    ["show", "bsic"],
    ["install", "githb"],
    ["export", "claud"],
    ["lock", "--check"],
]


def hinted_commands(err: str) -> list[list[str]]:
    """The bundlectl command lines a hint names whole (in backticks, or as the whole hint):
    ones with a placeholder (SERVER, A, …) or an ellipsis are not runnable as printed."""
    found = []
    for line in err.splitlines():
        if not line.startswith("hint:"):
            continue
        text = line.removeprefix("hint:").strip()
        candidates = re.findall(r"`(bundlectl [^`]+)`", text)
        if text.startswith("bundlectl "):
            candidates.append(text)
        for command in candidates:
            words = shlex.split(command)[1:]
            if any(w.isupper() or "…" in w or "..." in w for w in words):
                continue
            found.append(words)
    return found


@pytest.fixture
def newcomer(project: Path, run: Run) -> Path:
    write(project / "bundlectl.yaml", CONFIG)
    (project / "docs").mkdir()
    return project


def test_every_hint_on_the_error_paths_runs_as_printed(newcomer: Path, run: Run) -> None:
    ran: list[tuple[list[str], int]] = []
    for command in FAILING:
        failed = run(*command)
        assert failed.code != 0, command
        for hinted in hinted_commands(failed.err):
            if hinted[:1] == ["serve"]:
                continue  # it would serve until stopped
            ran.append((hinted, run(*hinted).code))
    assert len(ran) >= 5, ran  # the paths above do name commands
    assert [(c, code) for c, code in ran if code in (2, 70)] == []
