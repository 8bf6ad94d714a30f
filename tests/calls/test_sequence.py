"""The call sequence is composed in one module (issue 53): no other module of the package calls
the pipeline's steps, or makes a tool call on a session itself."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import bundlectl

PACKAGE = Path(bundlectl.__file__).parent

# The steps of a call, and who alone may call each: the sequence composes them; `calls.call`
# makes the call on a session (`perform`, which runs `checked_arguments`) for the doors' `perform`;
# the pipeline's own steps call each other inside `admission`.
STEPS = {
    "judge": {"calls/sequence.py"},
    "admission": {"calls/sequence.py"},
    "admit": {"calls/pipeline.py"},
    "finish": {"calls/sequence.py"},
    "checked_arguments": {"calls/call.py"},
}


def _calls(tree: ast.AST) -> list[tuple[str, int]]:
    """(name, line) of every call of an attribute or a plain name."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            found.append((name, node.lineno))
    return found


@pytest.mark.no_cover  # reads the sources: runs none of them
def test_only_the_sequence_composes_a_call() -> None:
    strays = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        for name, line in _calls(ast.parse(path.read_text(), str(path))):
            allowed = STEPS.get(name)
            if allowed is not None and where not in allowed:
                strays.append(f"{where}:{line}: {name}()")
    assert strays == []


def test_the_check_finds_a_door_that_calls_a_step_itself() -> None:
    # The check above is only as good as its finder: a door that judged and finished a call
    # itself is found.
    door = "def go(pipeline):\n    d = pipeline.judge('a', 's', 't')\n    pipeline.finish(d)\n"
    assert [name for name, _ in _calls(ast.parse(door))] == ["judge", "finish"]
