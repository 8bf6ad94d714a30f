"""Where a sandboxed server may write, drawn from the policy (#55 item 2): the folders the
rules of its agents bound their calls' paths to, for its tools that do not only read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bundlectl.config.project import load_project
from bundlectl.resolve.resolved import resolve_project
from bundlectl.resolve.sandboxing import writes_from_policy
from tests.conftest import Run, write

SERVER = """
version: 1
servers:
  fs:
    command: fs-server
    tools:
      - {name: write_file}
      - {name: move_file}
      - {name: read_file, annotations: {readOnlyHint: true}}
agents:
"""


def _writes(project: Path, agents: str, who: list[str] | None = None) -> tuple[str, ...]:
    write(project / "bundlectl.yaml", SERVER + agents + "policy: {default: deny}\n")
    return writes_from_policy(resolve_project(load_project()), "fs", who)


@pytest.mark.parametrize(
    ("agents", "expected"),
    [
        # a path bound: the glob's fixed part; a file: its folder
        ('  a: {allow: [{tool: fs.write_file, args: {path: {path: "docs/**"}}}]}\n', ("docs",)),
        ('  a: {allow: [{tool: fs.write_file, args: {path: {path: "notes/*.md"}}}]}\n', ("notes",)),
        ('  a: {allow: [{tool: fs.write_file, args: {path: "site/index.html"}}]}\n', ()),
        (
            '  a: {allow: [{tool: fs.write_file, args: {path: {path: "site/index.html"}}}]}\n',
            ("site",),
        ),
        ('  a: {allow: [{tool: fs.write_file, args: {path: {path: "**"}}}]}\n', (".",)),
        # alternatives, asks and several agents add up; a folder inside another is no more
        (
            "  a:\n"
            "    allow:\n"
            "      - {tool: fs.write_file, args: {path: [{path: docs/**}, {path: src/*.py}]}}\n"
            "    ask: [{tool: fs.move_file, args: {path: {path: docs/api/**}}}]\n"
            "  b: {ask: [{tool: fs.*, args: {path: {path: out/**}}}]}\n",
            ("docs", "out", "src"),
        ),
        # no bound on the path: nothing said about where it writes, nothing added
        ("  a: {allow: [fs.*]}\n", ()),
        ('  a: {allow: [{tool: fs.write_file, args: {mode: "append"}}]}\n', ()),
        # a tool that only reads, and a deny, give nothing
        ('  a: {allow: [{tool: fs.read_file, args: {path: {path: "docs/**"}}}]}\n', ()),
        ('  a: {deny: [{tool: fs.write_file, args: {path: {path: "docs/**"}}}]}\n', ()),
    ],
)
def test_a_servers_write_set_is_where_its_agents_rules_bound_the_paths(
    project: Path, agents: str, expected: tuple[str, ...]
) -> None:
    assert _writes(project, agents) == expected


def test_each_agents_process_gets_its_own_agents_write_set(project: Path) -> None:
    agents = (
        '  docs: {allow: [{tool: fs.write_file, args: {path: {path: "docs/**"}}}]}\n'
        '  site: {allow: [{tool: fs.write_file, args: {path: {path: "site/**"}}}]}\n'
        "  reader: {allow: [fs.read_file]}\n"
    )
    assert _writes(project, agents, ["docs"]) == ("docs",)
    assert _writes(project, agents, ["reader"]) == ()
    assert _writes(project, agents) == ("docs", "site")  # a shared process: every agent's


def test_an_agent_writes_where_the_rules_it_inherits_bound_its_paths(project: Path) -> None:
    agents = (
        '  docs: {allow: [{tool: fs.write_file, args: {path: {path: "docs/**"}}}]}\n'
        "  child:\n"
        "    extends: [docs]\n"
        '    ask: [{tool: fs.move_file, args: {path: {path: "out/**"}}}]\n'
        "  grandchild: {extends: [child, docs]}\n"
        "  reader: {allow: [fs.read_file]}\n"
    )
    assert _writes(project, agents, ["grandchild"]) == ("docs", "out")
    assert _writes(project, agents, ["reader", "docs"]) == ("docs",)
    assert _writes(project, agents) == ("docs", "out")


def test_explain_and_resolve_show_the_write_set_the_policy_draws(project: Path, run: Run) -> None:
    agents = '  docs: {allow: [{tool: fs.write_file, args: {path: {path: "docs/**"}}}]}\n'
    write(
        project / "bundlectl.yaml",
        SERVER.replace(
            "    command: fs-server\n", "    command: fs-server\n    sandbox: {write: [tmp]}\n"
        )
        + agents
        + "policy: {default: deny, sandbox: on}\n",
    )
    explained = run("policy", "explain", "--agent", "docs", "fs.write_file", "--format", "json")
    assert explained.code == 0, explained.err
    assert json.loads(explained.out)["sandbox"]["write"] == ["docs", "tmp"]
