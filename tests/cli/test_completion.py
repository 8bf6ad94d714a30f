"""Shell completion of real names from the project (issue 37, 18): agents, servers, tools,
bundles, clients and rule ids, without the MCP SDK."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from bundlectl.cli.main import main
from tests.conftest import Run, write

CONFIG = """
version: 1
bundles: [basic]
agents:
  reader: {allow: [files.read_file]}
  writer: {allow: [files.write_file]}
policy: {default: deny}
"""


def shell(words: str) -> dict[str, str]:
    """What bash tells the program when the user presses Tab after `words` (as typer reads it)."""
    return {
        "_BUNDLECTL_COMPLETE": "complete_bash",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1)),
    }


def complete(project: Path, words: str) -> list[str]:
    """What the shell gets for the last word of `words` from the console script."""
    env = {**os.environ, **shell(words)}
    done = subprocess.run(
        [sys.executable, "-c", "from bundlectl.cli.main import entry; entry()"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.stdout.split()


def completing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[[Path, str], list[str]]:
    """`complete`, by the same entry point in this process: what the shell would get."""

    def here(project: Path, words: str) -> list[str]:
        monkeypatch.chdir(project)
        for name, value in shell(words).items():
            monkeypatch.setenv(name, value)
        capsys.readouterr()
        with pytest.raises(SystemExit) as ended:
            main([])
        assert ended.value.code == 0
        return capsys.readouterr().out.split()

    return here


def test_names_from_the_project_complete(
    project: Path, run: Run, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """(The console script's own process answers the shell in the next test.)"""
    write(project / "bundlectl.yaml", CONFIG)
    assert run("lock").code == 0
    complete = completing(monkeypatch, capsys)
    agents = complete(project, "bundlectl exec --agent ")
    assert {"reader", "writer", "file-reader"} <= set(agents)  # the bundle's agents too
    assert complete(project, "bundlectl exec files.re") == ["files.read_file"]
    assert complete(project, "bundlectl read fi") == ["files"]
    assert complete(project, "bundlectl show gith") == ["github"]
    assert complete(project, "bundlectl export claude-c") == ["claude-code"]
    assert complete(project, "bundlectl import ag") == ["agix"]
    from bundlectl.lint.rules import RULES

    rules = complete(project, "bundlectl lint --select BCL21")
    assert rules == sorted(r for r in RULES if r.startswith("BCL21")) and len(rules) > 5
    (project / "bundlectl.lock").unlink()  # no lock: the resolved project answers
    assert complete(project, "bundlectl policy explain --agent wr") == ["writer"]


def test_completion_never_fails_the_shell_and_never_loads_the_sdk(project: Path, run: Run) -> None:
    from bundlectl.cli import completion

    (project / "bundlectl.yaml").write_text("version: 1\nagents: [not a mapping\n")
    assert completion.agents("") == [] and completion.tools("f") == []
    assert complete(project, "bundlectl exec --agent ") == []
    write(project / "bundlectl.yaml", CONFIG)
    code = (
        "import sys; from bundlectl.cli import completion; "
        "assert completion.tools('files.') and 'mcp' not in sys.modules, sorted(sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=project, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
