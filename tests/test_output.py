"""JSON output: the fast pretty encoder and the streaming writer against the json module."""

from __future__ import annotations

import io
import json
import sys
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from bundlectl.output import Lazy, RawJson, pretty_json, stream_json

LEAVES = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text()
KEYS = st.text() | st.integers()  # json turns int keys into strings; both encoders must agree
TREES = st.recursive(LEAVES, lambda c: st.lists(c) | st.dictionaries(KEYS, c), max_leaves=25)


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
