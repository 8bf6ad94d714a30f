"""`bundlectl policy replay` (#59): the calls a real audit log records (written by real `exec`
calls of the built-in files server), decided again under an edited policy."""

from __future__ import annotations

import json
import os
from pathlib import Path

from bundlectl.calls.replay import replay
from bundlectl.config.project import load_project
from bundlectl.resolve.resolved import resolve_project
from tests.conftest import Run, write

CONFIG = """
version: 1
bundles: [basic]
agents:
  reader:
    allow: [files.read_file, files.list_directory]
  writer:
    allow: [files.read_file]
    ask: [files.write_file]
  docs:
    allow: [{tool: files.write_file, args: {path: {path: "docs/**"}}}]
policy: {default: deny}
"""


def _calls(project: Path, run: Run) -> Path:
    write(project / "bundlectl.yaml", CONFIG)
    (project / "hello.txt").write_text("hi")
    (project / "docs").mkdir()
    for _ in range(3):
        assert run("exec", "-a", "reader", "files.read_file", "path=hello.txt").code == 0
    assert run("exec", "-a", "reader", "files.write_file", "path=x", "content=y").code == 3
    # An ask no one can confirm here is recorded as a deny by the ask rule.
    assert run("exec", "-a", "writer", "files.write_file", "path=x", "content=y").code == 3
    assert run("exec", "-a", "docs", "files.write_file", "path=docs/a.md", "content=y").code == 0
    assert run("exec", "-a", "ghost", "files.read_file", "path=hello.txt").code == 3
    return Path(os.environ["BUNDLECTL_HOME"]) / "state" / "audit.jsonl"


def test_replay_counts_what_an_edit_changes_and_what_it_cannot_judge(
    project: Path, run: Run
) -> None:
    log = _calls(project, run)
    same = run("policy", "replay", str(log))
    assert same.code == 0, same.err
    assert same.out.startswith("7 calls replayed: 6 decided as they were, 0 decided differently")
    assert "1 need their arguments" in same.out and "docs files.write_file (1)" in same.out
    # The reader loses read_file and gains write_file; the writer's ask becomes an allow.
    edited = CONFIG.replace(
        "reader:\n    allow: [files.read_file, files.list_directory]",
        "reader:\n    allow: [files.write_file, files.list_directory]",
    ).replace(
        "writer:\n    allow: [files.read_file]\n    ask: [files.write_file]",
        "writer:\n    allow: [files.read_file, files.write_file]",
    )
    assert edited.count("files.write_file") == 3
    write(project / "bundlectl.yaml", edited)
    changed = run("policy", "replay", str(log), "--format", "json")
    assert changed.code == 1, changed.err
    found = json.loads(changed.out)
    moves = {(c["agent"], c["tool"], c["then"], c["now"], c["calls"]) for c in found["changes"]}
    assert moves == {
        ("reader", "files.read_file", "allow", "deny", 3),
        ("reader", "files.write_file", "deny", "allow", 1),
        ("writer", "files.write_file", "deny", "allow", 1),
    }
    [reader] = [c for c in found["changes"] if c["then"] == "allow"]
    assert reader["rule_now"] == "no allow or ask rule of agent 'reader' matches"
    only = run("policy", "replay", str(log), "--agent", "writer")
    assert only.code == 1 and "reader" not in only.out
    assert run("policy", "replay", str(log), "--agent", "nobody").code == 2
    assert run("policy", "replay", str(project / "missing.jsonl")).code == 2


def test_records_in_another_shape_are_read_as_json_and_judged_alike(
    project: Path, run: Run
) -> None:
    """The fast path reads the bytes bundlectl wrote; a record written otherwise (keys in
    another order) is parsed, and must come out the same."""
    log = _calls(project, run)
    policy = resolve_project(load_project(project / "bundlectl.yaml")).policy
    lines = log.read_bytes().splitlines()
    fast = replay(lines, policy)
    reshaped = [
        json.dumps(json.loads(line), sort_keys=True).encode() for line in lines if line.strip()
    ]
    slow = replay([*reshaped, b"not json"], policy)
    assert (fast.calls, fast.same, fast.changed, fast.needs_arguments) == (
        slow.calls,
        slow.same,
        slow.changed,
        slow.needs_arguments,
    )
    assert slow.unreadable == 1 and fast.unreadable == 0
    assert fast.calls == 7  # pending halves of calls are not calls
