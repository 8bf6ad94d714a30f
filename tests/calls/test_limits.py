"""Quotas (issue 39, SPEC 11 `limits:`): calls per agent and window, by tool pattern or by the
tools' annotation class, counted once per let-through call in the state store — through the
CLI, the gateway (its express lane included) and concurrent counters."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from bundlectl.config.models import ToolSpec
from bundlectl.policy.catalog import in_class
from tests.conftest import TEST_SERVERS, Run, audit_records, write
from tests.gateway.test_gateway import PY, connected, texts

CONFIG = """
version: 1
bundles: [basic]
agents:
  reader: {allow: [files.read_file, files.list_directory]}
  other: {allow: [files.read_file]}
  writer: {allow: [files.read_file, files.write_file]}
limits:
  - {agents: ["*"], tools: [files.read_file], calls: 2, per: 1h}
  - {agents: [writer], class: destructive, calls: 1, per: 1d}
policy: {default: deny}
"""


@pytest.fixture
def limited(project: Path) -> Path:
    write(project / "bundlectl.yaml", CONFIG)
    (project / "a.txt").write_text("hello")
    return project


def test_calls_over_a_limit_are_refused_per_agent_with_when_it_resets(
    limited: Path, run: Run, isolated_home: Path
) -> None:
    read = ("exec", "files.read_file", "path=a.txt")
    assert run("exec", "-a", "reader", "files.write_file", "path=x", "content=y").code == 3
    assert [run(*read, "-a", "reader").code for _ in range(2)] == [0, 0]
    over = run(*read, "-a", "reader")
    assert over.code == 3
    assert "may not call files.read_file now: limits[0]: 2 call(s) of files.read_file per 1h" in (
        over.err
    )
    assert "which resets at" in over.err and "nothing was started" in over.err
    assert run(*read, "-a", "other").code == 0  # each agent has its own count
    unlimited = run("exec", "-a", "reader", "files.list_directory", "path=.")
    assert unlimited.code == 0, unlimited.err
    # A call the policy refused (write_file above) was not counted; the refused one is audited.
    outcomes = [
        (r["agent"], r["tool"], r["outcome"])
        for r in audit_records(isolated_home / "state" / "audit.jsonl")
        if r["outcome"] != "pending"
    ]
    assert outcomes.count(("reader", "read_file", "ok")) == 2
    assert ("reader", "read_file", "over-limit") in outcomes

    status = run("limits", "status", "--format", "json")
    used = {
        (r["limit"], r["agent"]): (r["used"], r["calls"]) for r in json.loads(status.out)["limits"]
    }
    assert used[(0, "reader")] == (2, 2) and used[(0, "other")] == (1, 2)
    assert used[(1, "writer")] == (0, 1)
    text = run("limits", "status", "--agent", "reader")
    assert "2/2" in text.out and "RESETS" in text.out


def test_a_class_limit_counts_by_annotations(limited: Path, run: Run) -> None:
    write_call = ("exec", "-a", "writer", "files.write_file", "content=x")
    assert run(*write_call, "path=one.txt").code == 0
    over = run(*write_call, "path=two.txt")
    assert over.code == 3 and "1 call(s) of destructive tools per 1d" in over.err
    assert not (limited / "two.txt").exists()
    # read_file is read-only: the destructive limit does not count it, the read one does.
    assert run("exec", "-a", "writer", "files.read_file", "path=a.txt").code == 0


@pytest.mark.parametrize(
    ("annotations", "read_only", "destructive", "open_world"),
    [
        ({}, False, True, True),  # nothing known: the unsafe side
        ({"readOnlyHint": True}, True, False, True),
        ({"destructiveHint": False}, False, False, True),
        (
            {"readOnlyHint": False, "destructiveHint": True, "openWorldHint": False},
            False,
            True,
            False,
        ),
    ],
)
def test_annotation_classes_take_the_unsafe_side_when_unknown(
    annotations: dict[str, Any], read_only: bool, destructive: bool, open_world: bool
) -> None:
    spec = ToolSpec(name="t", annotations=annotations)
    assert in_class(spec, "read-only") is read_only
    assert in_class(spec, "destructive") is destructive
    assert in_class(spec, "open-world") is open_world
    assert in_class(None, "destructive") and not in_class(None, "read-only")


# Counting itself (50 concurrent calls against 20, all or none) is the state stores' contract,
# run against SQLite and Redis in tests/state/test_state_stores.py.


def test_the_gateway_counts_every_call_and_tells_the_agent(project: Path, tmp_path: Path) -> None:
    """Over stdio, warm calls take the express lane unless a limit covers them: the limit
    holds on the third call all the same."""
    import os

    from mcp import StdioServerParameters

    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          kitchen:
            command: {PY}
            args: ["{TEST_SERVERS / "kitchen.py"}"]
        agents:
          reader: {{allow: ["kitchen.*"]}}
        limits:
          - {{agents: [reader], tools: [kitchen.echo], calls: 2, per: 1h}}
        policy: {{default: deny}}
        """,
    )
    params = StdioServerParameters(
        command=PY,
        args=["-m", "bundlectl", "serve", "--agent", "reader"],
        cwd=str(project),
        env={**os.environ, "BUNDLECTL_HOME": str(tmp_path / "home")},
    )

    async def session() -> list[Any]:
        async with connected(params) as client:
            answers = [await client.call_tool("kitchen__add", {"a": 1, "b": 2})]  # warm-up
            for _ in range(3):
                answers.append(await client.call_tool("kitchen__echo", {"text": "hi"}))
            answers.append(await client.call_tool("kitchen__add", {"a": 1, "b": 2}))
            return answers

    warm, first, second, third, other = anyio.run(session)
    assert not (warm.is_error or first.is_error or second.is_error or other.is_error)
    assert third.is_error
    [said] = texts(third)
    assert "may not call kitchen.echo now: limits[0]: 2 call(s) of kitchen.echo per 1h" in said
    assert "resets at" in said


def test_a_quota_is_checked_before_approvers_and_an_invalid_call_uses_none(
    project: Path, run: Run, isolated_home: Path
) -> None:
    """#54 item 5: approvers were asked (and `approvals approve` promised "may call ... for
    1h") for a call the quota then refused; and a call refused for its arguments before
    anything was sent still used up a call of the quota."""
    write(
        project / "bundlectl.yaml",
        """
        version: 1
        bundles: [basic]
        agents:
          writer:
            allow: [files.read_file]
            ask: [{tool: files.write_file, approve: out-of-band}]
        limits:
          - {agents: [writer], tools: [files.read_file, files.write_file], calls: 1, per: 1h}
        policy: {default: deny, approvals: {ttl: 10m}}
        """,
    )
    (project / "a.txt").write_text("hello")
    invalid = run("exec", "-a", "writer", "files.read_file", "--args", '{"path": 5}')
    assert invalid.code == 4, invalid.err
    assert run("exec", "-a", "writer", "files.read_file", "path=a.txt").code == 0  # not used up
    held = run("exec", "-a", "writer", "--no-wait", "files.write_file", "path=b", "content=x")
    assert held.code == 3, held.err  # over the quota: refused, no approver asked
    assert "limits[0]: 1 call(s)" in held.err
    listed = json.loads(run("approvals", "list", "--all", "--format", "json").out)
    assert listed["approvals"] == []
    outcomes = [r["outcome"] for r in audit_records(isolated_home / "state" / "audit.jsonl")]
    assert outcomes == ["invalid-call", "ok", "over-limit"]
