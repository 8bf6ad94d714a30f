""" "Always allow" (issue 39, SPEC 11): answered on a real terminal, it writes an allow rule for
exactly that tool — with the conditions of the rule that asked — to the git-ignored
`bundlectl.local.yaml`, never to the reviewed config; explain names it, lint notes it, the lock
does not cover it."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.test_exec import on_terminal
from tests.conftest import Run, write

CONFIG = """
version: 1
bundles: [basic]
agents:
  writer:
    allow: [files.read_file]
    ask:
      - {tool: files.write_file, args: {path: {path: "notes/**"}}}
policy: {default: deny}
"""
ASKED = b"Allow? [y/N/a]"


def test_always_allow_keeps_a_local_rule_with_the_conditions_that_asked(
    project: Path, run: Run
) -> None:
    write(project / "bundlectl.yaml", CONFIG)
    (project / ".git").mkdir()  # a checkout: the local file goes into .gitignore
    (project / ".gitignore").write_text("*.log")
    (project / "notes").mkdir()
    assert run("lock").code == 0
    reviewed = (project / "bundlectl.yaml").read_text()
    locked = (project / "bundlectl.lock").read_text()

    call = ["exec", "-a", "writer", "files.write_file", "path=notes/a.txt", "content=one"]
    status, seen = on_terminal(project, call, [(ASKED, "a")])
    assert status == 0, seen.decode(errors="replace")
    assert b"kept in bundlectl.local.yaml: agent 'writer' may call files.write_file" in seen
    assert (project / "notes" / "a.txt").read_text() == "one"
    local = project / "bundlectl.local.yaml"
    assert "path:\n" in local.read_text() and "notes/**" in local.read_text()
    assert (project / "bundlectl.yaml").read_text() == reviewed  # never the reviewed config
    assert (project / ".gitignore").read_text() == "*.log\nbundlectl.local.yaml\n"

    # The same tool with arguments the condition holds for: no question any more (here, with
    # no terminal, an ask would be refused); other arguments are still not allowed.
    again = run("exec", "-a", "writer", "files.write_file", "path=notes/b.txt", "content=two")
    assert again.code == 0, again.err
    elsewhere = run("exec", "-a", "writer", "files.write_file", "path=b.txt", "content=two")
    assert elsewhere.code == 3
    explained = run(
        "policy", "explain", "-a", "writer", "files.write_file", "--args", '{"path": "notes/c.txt"}'
    )
    assert explained.code == 0, explained.out
    assert explained.out.startswith("files.write_file for agent writer: ask, confirmed in advance")
    assert "confirmed in advance on this machine: agents.writer.allow: files.write_file" in (
        explained.out
    )
    assert "(bundlectl.local.yaml:" in explained.out, explained.out

    # lint notes it (where it is written), the lock does not cover it and says so.
    linted = run("lint", "--format", "json")
    found = [f for f in json.loads(linted.out)["findings"] if f["rule"] == "BCL216"]
    assert [(f["file"], f["severity"]) for f in found] == [("bundlectl.local.yaml", "info")]
    relocked = run("lock")
    assert relocked.code == 0
    assert "1 local rule(s) in bundlectl.local.yaml add to this policy" in relocked.err
    assert (project / "bundlectl.lock").read_text() == locked


def test_a_second_always_keeps_the_files_comments_and_other_rules(project: Path, run: Run) -> None:
    write(
        project / "bundlectl.yaml",
        """
        version: 1
        bundles: [basic]
        agents:
          writer: {ask: [files.read_file, files.list_directory]}
        policy: {default: deny}
        """,
    )
    (project / "hello.txt").write_text("hi\n")
    write(
        project / "bundlectl.local.yaml",
        """
        # mine: written by hand
        version: 1
        agents:
          writer:
            allow: [files.list_directory]  # kept
        """,
    )
    status, seen = on_terminal(
        project, ["exec", "-a", "writer", "files.read_file", "path=hello.txt"], [(ASKED, "a")]
    )
    assert status == 0, seen.decode(errors="replace")
    text = (project / "bundlectl.local.yaml").read_text()
    assert text.startswith("# mine: written by hand\n")
    assert "files.list_directory" in text and "files.read_file" in text
    assert not (project / ".gitignore").exists()  # not a checkout: nothing to ignore in


def test_local_rules_never_make_an_unlisted_agent_listed_and_a_broken_file_is_named(
    project: Path, run: Run
) -> None:
    write(project / "bundlectl.yaml", CONFIG)
    (project / "hello.txt").write_text("hi\n")
    write(
        project / "bundlectl.local.yaml",
        "version: 1\nagents:\n  stranger: {allow: [files.read_file]}\n",
    )
    refused = run("exec", "-a", "stranger", "files.read_file", "path=hello.txt")
    assert refused.code == 3
    assert "agent 'stranger' is not listed in the project, so its local rules are ignored" in (
        run("resolve").err
    )
    write(project / "bundlectl.local.yaml", "version: 1\nagents:\n  writer: {allow: 5}\n")
    broken = run("exec", "-a", "writer", "files.read_file", "path=hello.txt")
    assert broken.code == 2
    assert "bundlectl.local.yaml:3:" in broken.err, broken.err
