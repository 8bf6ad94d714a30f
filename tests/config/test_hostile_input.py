"""Hostile or odd input on the command line ends in a clear error and its exit code (SPEC 4.1),
never a hang, an internal error or raw control bytes on the terminal."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from tests.conftest import TEST_SERVERS, Run, write

PY = sys.executable


@pytest.fixture
def basic(project: Path) -> Path:
    write(
        project / "bundlectl.yaml",
        """
        version: 1
        bundles: [basic]
        agents:
          reader: {allow: [files.read_file]}
        policy: {default: deny}
        """,
    )
    (project / "hello.txt").write_text("hello")
    return project


def test_a_timeout_that_is_no_number_is_refused(run: Run, basic: Path) -> None:
    result = run("exec", "-a", "reader", "files.read_file", "path=hello.txt", "--timeout", "nan")
    assert result.code == 2
    assert result.err == "error: --timeout must be a number of seconds, not nan\n"


@pytest.mark.parametrize(
    "command", [["exec", "-a", "reader", "files.read_file", "--args"], ["registry", "add"]]
)
def test_an_endless_file_is_read_only_so_far(run: Run, basic: Path, command: list[str]) -> None:
    argument = "@/dev/zero" if command[0] == "exec" else "/dev/zero"
    result = run(*command, argument)
    assert result.code == 2
    assert "larger than 64 MiB" in result.err


def test_json_nested_a_hundred_thousand_deep_is_a_usage_error(
    run: Run, basic: Path, tmp_path: Path
) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    result = run("exec", "-a", "reader", "files.read_file", "--args", f"@{deep}")
    assert result.code == 2
    assert "the JSON nests too deeply" in result.err
    batch = tmp_path / "calls.jsonl"
    batch.write_text(
        '{"agent": "reader", "tool": "files.read_file", "arguments": '
        + "[" * 100_000
        + "]" * 100_000
        + "}\n"
    )
    result = run("exec", "--batch", str(batch))
    assert "nests too deeply" in result.out + result.err
    assert "internal error" not in result.err


@pytest.mark.parametrize(
    "command",
    [["schema", "--out", "/dev/null"], ["codegen", "-a", "reader", "--out", "/proc/no-such"]],
)
def test_an_output_folder_that_cannot_be_written_is_a_usage_error(
    run: Run, basic: Path, command: list[str]
) -> None:
    result = run(*command)
    assert result.code == 2, result.err
    assert result.err.startswith("error: cannot write ")
    assert "hint: give --out a folder you can write to" in result.err


def test_control_characters_in_an_error_are_shown_escaped(run: Run, project: Path) -> None:
    result = run("exec", "--args", "@no-such-\x1b[31mfile\x00.json", "files.read_file")
    assert "\x1b" not in result.err and "\x00" not in result.err
    assert "no-such-\\x1b[31mfile" in result.err


def test_a_servers_stderr_log_is_for_its_owner_only(
    run: Run, project: Path, isolated_home: Path
) -> None:
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          crash: {{command: {PY}, args: ["{TEST_SERVERS / "misbehave.py"}", crash]}}
        policy: {{default: allow}}
        """,
    )
    log = isolated_home / "state" / "logs" / "crash.log"
    log.parent.mkdir(parents=True)
    log.write_text("an old log\n")
    log.chmod(0o644)
    run("exec", "crash.anything", "--quiet")
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
