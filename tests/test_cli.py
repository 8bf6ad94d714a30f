"""The command line itself: usage errors are exit 2 with a message, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from bundlectl import __version__
from tests.conftest import Run


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["lint", "--bogus"], "No such option: --bogus"),
        (["show"], "Missing argument 'NAME[SPEC]'"),
        (["nosuchcmd"], "No such command 'nosuchcmd'"),
        (["exec", "--timeout", "abc", "files.x"], "'abc' is not a valid float"),
        (["show", "basic", "--format", "yaml"], "'yaml' is not one of 'text', 'json'"),
    ],
)
def test_usage_errors_exit_2(
    project: Path, run: Run, args: list[str], message: str, isolated_home: Path
) -> None:
    result = run(*args)
    assert result.code == 2, result.err
    assert message in result.err
    assert "Traceback" not in result.err
    assert not (isolated_home / "state" / "crash.log").exists()


def test_help_and_version(run: Run) -> None:
    assert run("--version").lines == [f"bundlectl {__version__}"]
    result = run("--help")
    assert result.code == 0
    for command in ("init", "install", "lock", "policy", "tools", "exec", "lint", "server"):
        assert command in result.out


def test_bugs_end_in_one_line_and_a_report(
    isolated_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bundlectl import report

    try:
        {}["missing"]  # a real bug, raised for real
    except KeyError as exc:
        code = report.crash(exc)
    err = capsys.readouterr().err
    assert code == 70
    assert err.startswith("internal error: KeyError: 'missing' — report written to ")
    assert err.count("\n") == 1
    text = (isolated_home / "state" / "crash.log").read_text()
    assert "Traceback" in text and "KeyError: 'missing'" in text
