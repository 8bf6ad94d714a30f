"""The command line itself: usage errors are exit 2 with a message, never a traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bundlectl import __version__
from tests.conftest import Run


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["lint", "--bogus"], "No such option: --bogus"),
        (["show"], "Missing argument 'NAME[SPEC]'"),
        (["nosuchcmd"], "No such command 'nosuchcmd'"),
        (["shwo", "basic"], "Did you mean 'show'?"),  # typer built every command to suggest
        (["--debug", "policy", "nosuch"], "No such command 'nosuch'"),
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
    # Only the command that runs is built; its own help and a group's list are whole.
    assert "--installed" in run("-c", "bundlectl.yaml", "list", "--help").out
    group = run("policy", "--help").out
    assert all(name in group for name in ("check", "explain", "matrix"))


def test_bugs_end_in_one_line_and_a_report(
    isolated_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bundlectl.cli import error_handler

    try:
        {}["missing"]  # a real bug, raised for real
    except KeyError as exc:
        code = error_handler.crash(exc)
    err = capsys.readouterr().err
    assert code == 70
    assert err.startswith("internal error: KeyError: 'missing' — report written to ")
    assert err.count("\n") == 1
    text = (isolated_home / "state" / "crash.log").read_text()
    assert "Traceback" in text and "KeyError: 'missing'" in text


QUIET_COMMANDS = [
    ["show", "basic"],
    ["list"],
    ["resolve"],
    ["lock", "--check"],
    ["lint"],
    ["policy", "check", "--agent", "reader", "files.read_file"],
    ["tools"],
    ["schema", "--check", "--out", "s"],
    ["export", "claude-code", "--agent", "reader", "--dry-run"],
    ["codegen", "--agent", "reader", "--out", "g", "--check"],
]


def reported(
    project: Path, script: str, cases: list[list[str]], tag: str
) -> tuple[list[list[str]], str]:
    """Run `script` with the JSON list of `cases` as its argument, in one new Python process in
    `project`: the words after `tag` of each line it prints starting so, and the end of what it
    said (for a failing assert)."""
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(cases)],
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [line.split()[1:] for line in done.stdout.splitlines() if line.split()[:1] == [tag]]
    return lines, done.stdout[-500:] + done.stderr[-500:]


def test_commands_that_do_not_talk_to_servers_never_import_mcp(project: Path) -> None:
    """`import mcp` costs about a second; only exec, tools --live and server may pay it. Nor is
    `importlib.metadata` (~10 ms) imported: pydantic's plugin loader would, to find none.
    One process runs the commands in turn and reports after each: the first that imports
    either is the one named (a module, once imported, stays)."""

    (project / "bundlectl.yaml").write_text(
        "version: 1\nbundles: [basic]\nagents:\n  reader: {allow: [files.read_file]}\n"
    )
    script = (
        "import json, sys\nfrom bundlectl.cli.main import main\nmain(['lock'])\n"
        "for args in json.loads(sys.argv[1]):\n"
        "    code = main(args)\n"
        "    print('RESULT', code, 'mcp' in sys.modules, 'importlib.metadata' in sys.modules)\n"
    )
    results, said = reported(project, script, QUIET_COMMANDS, "RESULT")
    assert len(results) == len(QUIET_COMMANDS), said
    for args, (code, mcp, metadata) in zip(QUIET_COMMANDS, results, strict=True):
        assert (mcp, metadata) == ("False", "False"), f"{args} imported it (exit {code})"


def test_the_console_script_collects_garbage_only_in_long_running_commands(
    project: Path,
) -> None:
    """One-shot commands run without the cyclic collector (a quarter of lint's time at 3,000
    agents); `serve` and `exec` may run for hours and keep it. `main()` as a library keeps it."""

    cases = [
        ["script", "list"],
        ["script", "--config", "bundlectl.yaml", "lint"],
        ["script", "exec", "--help"],
        ["script", "serve", "--help"],
        ["script", "server", "--help"],
        ["library", "list"],
    ]
    # One process runs the cases in turn, the collector on again before each.
    script = (
        "import gc, json, sys\nfrom bundlectl.cli.main import main\n"
        "for how, *args in json.loads(sys.argv[1]):\n"
        "    gc.enable()\n"
        "    main(args, fast_exit=how == 'script')\n"
        "    print('GC', gc.isenabled())\n"
    )
    collecting, said = reported(project, script, cases, "GC")
    assert collecting == [["False"], ["False"], ["True"], ["True"], ["True"], ["True"]], said


def test_config_option_before_or_after_the_command(
    project: Path, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = project / "elsewhere"
    other.mkdir()
    (other / "team.yaml").write_text("version: 1\nbundles: [basic]\n")
    before = run("-c", str(other / "team.yaml"), "resolve")
    assert before.code == 0, before.err
    after = run("resolve", "-c", str(other / "team.yaml"))
    assert after.out == before.out
    # Nothing leaks into the next run in the same process (no config here, and no --debug).
    assert "BUNDLECTL_CONFIG" not in os.environ and "BUNDLECTL_DEBUG" not in os.environ
    assert run("resolve").err_lines[0].startswith("error: no bundlectl.yaml in ")
    # -c before the command beats $BUNDLECTL_CONFIG; -c after the command beats both.
    (other / "env.yaml").write_text("version: 1\nbundles: []\n")
    monkeypatch.setenv("BUNDLECTL_CONFIG", str(other / "env.yaml"))
    assert run("resolve").out != before.out
    assert run("-c", str(other / "team.yaml"), "resolve").out == before.out
    both = run("-c", str(other / "env.yaml"), "resolve", "-c", str(other / "team.yaml"))
    assert both.out == before.out
    # A process builds each command's parser once (`cli.main._built`): it keeps no option of
    # an earlier run.
    assert run("resolve", "--format", "json").out.startswith("{")
    assert run("resolve").out == run("resolve", "--format", "text").out != before.out


def test_debug_shows_the_traceback_for_this_run_only(project: Path, run: Run) -> None:
    assert "Traceback" in run("--debug", "resolve").err
    assert "Traceback" not in run("resolve").err


def test_a_broken_lock_says_how_to_recover(project: Path, run: Run) -> None:
    (project / "bundlectl.yaml").write_text("version: 1\nbundles: [basic]\n")
    (project / "bundlectl.lock").write_text("garbage: [\n")
    result = run("lock")
    assert result.code == 2
    assert result.err_lines[-1] == (
        "hint: the lock is generated: delete bundlectl.lock and run "
        "`bundlectl lock` to write a new one (its pins are then "
        "chosen afresh)"
    )
    lint = run("lint")
    assert lint.lines[0].startswith("bundlectl.lock:2:1: BCL001 error YAML syntax error")


def test_the_layers_hold_and_a_lower_layer_importing_a_higher_one_fails(tmp_path: Path) -> None:
    """import-linter's contracts (pyproject.toml): kept by the package as it is, and broken
    (exit 1, naming the import) by a copy in which MCP I/O imports the gateway lazily."""
    root = Path(__file__).resolve().parents[2]
    lint = [_lint_imports()]
    kept = subprocess.run(lint, cwd=root, capture_output=True, text=True, check=False)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert "Contracts: 3 kept, 0 broken." in kept.stdout
    copy = tmp_path / "copy"
    shutil.copytree(root / "bundlectl", copy / "bundlectl", ignore=shutil.ignore_patterns("*.pyc"))
    shutil.copy(root / "pyproject.toml", copy / "pyproject.toml")
    session = copy / "bundlectl" / "mcpio" / "session.py"
    session.write_text(
        session.read_text() + "\n\ndef _up() -> None:\n    import bundlectl.gateway.hub\n"
    )
    # and a front door that reaches past the Session seam into the raw-pipe session (#53)
    view = copy / "bundlectl" / "gateway" / "view.py"
    view.write_text(
        view.read_text() + "\n\ndef _past() -> None:\n    import bundlectl.mcpio.plain\n"
    )
    env = {**os.environ, "PYTHONPATH": str(copy)}
    broken = subprocess.run(lint, cwd=copy, env=env, capture_output=True, text=True, check=False)
    assert broken.returncode == 1, broken.stdout
    assert "bundlectl.mcpio.session -> bundlectl.gateway.hub" in broken.stdout
    assert "bundlectl.gateway.view -> bundlectl.mcpio.plain" in broken.stdout
    assert "Contracts: 1 kept, 2 broken." in broken.stdout


def private_imports(package: Path) -> list[str]:
    """Every `from bundlectl.X import _name` in the package: a module's private name used by
    another module (each such name is public under a name a reader can find, #53)."""
    import ast

    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("bundlectl"):
                found += [
                    f"{path.relative_to(package.parent)}: {node.module}.{alias.name}"
                    for alias in node.names
                    if alias.name.startswith("_") and not alias.name.startswith("__")
                ]
    return found


@pytest.mark.no_cover  # reads the sources: runs none of them
def test_no_module_imports_another_modules_private_name(tmp_path: Path) -> None:
    package = Path(__file__).resolve().parents[2] / "bundlectl"
    assert private_imports(package) == []
    leak = tmp_path / "bundlectl" / "gateway"
    leak.mkdir(parents=True)
    (leak / "view.py").write_text("from bundlectl.gateway.request_context import _secret\n")
    assert private_imports(tmp_path / "bundlectl") == [
        "bundlectl/gateway/view.py: bundlectl.gateway.request_context._secret"
    ]


def import_circles(package: Path, folder: str = "") -> list[list[str]]:
    """The circles of imports among the modules of `package/folder` (and its subfolders; a
    package's `__init__` left out: it only hands names on) — every import counted, also those
    made only for type checking or inside a function: a circle of types is a circle a reader
    walks all the same (#53). Modules are named by their dotted path below the package."""
    import ast

    modules = {
        ".".join(path.relative_to(package).with_suffix("").parts): path
        for path in (package / folder).rglob("*.py")
        if path.name != "__init__.py"
    }

    def module_of(target: str) -> str | None:
        parts = target.removeprefix(f"{package.name}.").split(".")
        for end in range(len(parts), 0, -1):
            if ".".join(parts[:end]) in modules:
                return ".".join(parts[:end])
        return None

    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.ImportFrom) and node.module:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            for target in targets:
                other = module_of(target) if target.startswith(f"{package.name}.") else None
                if other is not None and other != name:
                    edges[name].add(other)
    circles = []
    for start in sorted(edges):
        if start in _reach(edges, start, strict=True):
            circle = sorted(m for m in _reach(edges, start) if start in _reach(edges, m))
            if circle not in circles:
                circles.append(circle)
    return circles


def _reach(edges: dict[str, set[str]], start: str, *, strict: bool = False) -> set[str]:
    """The modules `start` reaches through imports (itself too, unless `strict`: then only
    when a way leads back to it)."""
    reached, todo = (set() if strict else {start}), [start]
    while todo:
        for other in edges[todo.pop()] - reached:
            reached.add(other)
            todo.append(other)
    return reached


@pytest.mark.no_cover  # reads the sources: runs none of them
def test_the_modules_import_one_another_in_one_direction(
    tmp_path: Path,
) -> None:
    package = Path(__file__).resolve().parents[2] / "bundlectl"
    assert import_circles(package) == []
    copy = tmp_path / "bundlectl"
    shutil.copytree(package / "calls", copy / "calls", ignore=shutil.ignore_patterns("*.pyc"))
    confirm = copy / "calls" / "confirm.py"  # a confirmation typed by the whole pipeline again
    confirm.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from bundlectl.calls.pipeline import Pipeline\n" + confirm.read_text()
    )
    assert import_circles(copy, "calls") == [
        ["calls.approval", "calls.confirm", "calls.pins", "calls.pipeline"]
    ]


def _lint_imports() -> str:
    """import-linter's command, beside this Python (the venv's) or on PATH."""
    beside = Path(sys.executable).parent / "lint-imports"
    return str(beside) if beside.exists() else shutil.which("lint-imports") or "lint-imports"


def test_every_commands_help_ends_with_examples_and_its_exit_codes(run: Run) -> None:
    """#24: `--help` of each command shows how to use it and what its exit codes mean; a new
    command without them fails here."""
    from typer.main import get_command_name

    from bundlectl.cli.helptext import HELP
    from bundlectl.cli.main import app

    names = set()
    groups = [(app, "")] + [(g.typer_instance, f"{g.name} ") for g in app.registered_groups]
    assert len(groups) >= 4  # registry, policy, approvals
    for group, prefix in groups:
        for info in group.registered_commands:
            callback = info.callback.__name__ if info.callback else ""
            names.add(prefix + (info.name or get_command_name(callback)))
    assert names == set(HELP)
    for name, (examples, _) in HELP.items():
        shown = run(*name.split(), "--help")
        assert shown.code == 0, shown.err
        assert "Examples:" in shown.out and "Exit codes: 0 " in shown.out, name
        assert examples[0].split("#")[0].strip() in " ".join(shown.out.split()), name


def test_every_commands_summary_is_one_line_of_its_docstring() -> None:
    """The command lists of `--help` show a docstring's first paragraph as written: one that
    spans two source lines was broken in the middle of the list ("per" / "call: ...")."""
    from typer.main import get_command

    from bundlectl.cli.main import app

    def summaries(group: Any, prefix: str = "") -> dict[str, str]:
        found = {}
        for name, command in getattr(group, "commands", {}).items():
            found[prefix + name] = (command.help or "").strip().split("\n\n")[0]
            found.update(summaries(command, f"{prefix}{name} "))
        return found

    listed = summaries(get_command(app))
    assert "exec" in listed and "policy explain" in listed
    assert [name for name, first in listed.items() if "\n" in first] == []
