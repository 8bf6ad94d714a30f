"""`policy.pin_tools`: a tool whose live definition differs from the one the lock recorded is
refused by `exec` and withheld and refused by `serve` (SPEC 7 "Pinning") — a real server that
changes a tool's description after review ("rug pull")."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import TEST_SERVERS, Run, audit_records, over_the_pipes, write
from tests.gateway.test_gateway import connected, texts

PY = sys.executable


def live(*names: str) -> list[dict[str, Any]]:
    """kitchen's tools as the server lists them, from the server object in this process."""
    from mcp import Client

    sys.path.insert(0, str(TEST_SERVERS))
    try:
        import kitchen  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(TEST_SERVERS))

    async def listed() -> Any:
        async with Client(kitchen.server) as client:
            return (await client.list_tools()).tools

    tools = {t.name: t for t in anyio.run(listed)}
    return [
        {"name": n, "description": tools[n].description, "input_schema": tools[n].input_schema}
        for n in names
    ]


@pytest.fixture
def pinned(project: Path, run: Run, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("KITCHEN_RUG_PULL", raising=False)
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          kitchen:
            command: {PY}
            args: ["{TEST_SERVERS / "kitchen.py"}"]
            env: {{KITCHEN_RUG_PULL: "${{KITCHEN_RUG_PULL:-}}"}}
            tools: {json.dumps(live("echo", "request_id", "rug_pull"))}
        agents:
          bot: {{allow: ["kitchen.*"]}}
        policy: {{default: deny, pin_tools: true}}
        """,
    )
    assert run("lock").code == 0
    return project


def test_exec_refuses_a_tool_changed_since_it_was_locked(
    pinned: Path, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    same = run("exec", "--agent", "bot", "kitchen.echo", "text=hi")
    assert (same.code, same.out.strip()) == (0, "hi")
    monkeypatch.setenv("KITCHEN_RUG_PULL", "1")
    pulled = run("exec", "--agent", "bot", "kitchen.echo", "text=hi")
    assert pulled.code == 3 and pulled.out == ""
    # a project server: its catalog is bundlectl.yaml's, so the hint is the one that records it
    assert (
        "kitchen.echo changed since it was locked — review with `bundlectl tools --live "
        "--server kitchen` and record it with `bundlectl tools --live --record --server "
        "kitchen`" in pulled.err
    )
    unrecorded = run("exec", "--agent", "bot", "kitchen.add", "a=1", "b=2")
    assert unrecorded.code == 3 and "the lock does not record this tool" in unrecorded.err


@pytest.mark.parametrize("rug_pull", [False, True])
def test_serve_withholds_and_refuses_a_changed_tool(
    pinned: Path, isolated_home: Path, rug_pull: bool
) -> None:
    from mcp import StdioServerParameters

    async def session() -> tuple[list[str], Any]:
        env = {**os.environ, "BUNDLECTL_HOME": str(isolated_home)}
        env["KITCHEN_RUG_PULL"] = "1" if rug_pull else ""
        args = ["-m", "bundlectl", "serve", "--agent", "bot"]
        params = StdioServerParameters(command=PY, args=args, cwd=str(pinned), env=env)
        async with connected(params) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            return names, await client.call_tool("kitchen__echo", {"text": "hi"})

    names, result = anyio.run(session)
    if rug_pull:
        # add and the others are unrecorded, echo changed: only the unchanged recorded ones
        assert sorted(names) == ["kitchen__request_id", "kitchen__rug_pull"] and result.is_error
        assert "kitchen.echo changed since it was locked" in texts(result)[0]
    else:
        assert sorted(names) == ["kitchen__echo", "kitchen__request_id", "kitchen__rug_pull"]
        assert texts(result) == ["hi"]


@pytest.mark.parametrize("protocol", ["auto", "legacy"])
def test_serve_refuses_a_tool_changed_in_the_middle_of_a_session(
    pinned: Path, isolated_home: Path, protocol: str
) -> None:
    """Warm pinned calls take the express lane; once the server changes echo and says so, the
    next call of echo is refused and echo is withheld, whatever the client's protocol."""
    from mcp import StdioServerParameters

    async def session() -> dict[str, Any]:
        env = {**os.environ, "BUNDLECTL_HOME": str(isolated_home)}
        args = ["-m", "bundlectl", "serve", "--agent", "bot"]
        params = StdioServerParameters(command=PY, args=args, cwd=str(pinned), env=env)
        async with connected(params, mode=protocol) as client:
            ids = [texts(await client.call_tool("kitchen__request_id", {}))[0] for _ in range(2)]
            before = await client.call_tool("kitchen__echo", {"text": "hi"})
            await client.call_tool("kitchen__rug_pull", {})
            after = [await client.call_tool("kitchen__echo", {"text": "hi"}) for _ in range(2)]
            names = [t.name for t in (await client.list_tools()).tools]
            return {"ids": ids, "before": before, "after": after, "names": names}

    seen = anyio.run(session)
    assert over_the_pipes(seen["ids"][1]), seen["ids"]  # warm, pinned and all
    assert texts(seen["before"]) == ["hi"]
    for refused in seen["after"]:
        assert refused.is_error
        assert "kitchen.echo changed since it was locked" in texts(refused)[0]
    assert sorted(seen["names"]) == ["kitchen__request_id", "kitchen__rug_pull"]


def _held_id(refusal: str) -> str:
    found = re.search(r"held for a person to review: approval (\w+)", refusal)
    assert found, refusal
    return found.group(1)


def test_a_changed_tool_is_held_for_a_person_who_pins_it_then_records_it_for_review(
    pinned: Path, run: Run, monkeypatch: pytest.MonkeyPatch, isolated_home: Path
) -> None:
    """#60 item 3: a rug pull is refused with a "tool changed" request; the approver reads
    the difference and approves; the new definition is pinned on this machine
    (bundlectl.local.yaml), `lock --check` fails until `pins update` has put it in the
    reviewed file, and the same change is not asked about twice."""
    from tests.calls.test_approvals import _Receiver

    receiver = _Receiver(failures=0)
    config = pinned / "bundlectl.yaml"
    config.write_text(
        config.read_text().replace(
            "policy: {default: deny, pin_tools: true}",
            "# who may call what\npolicy:\n  default: deny\n  pin_tools: true\n"
            f"  approvals: {{ttl: 10m, notify: {{url: '{receiver.url}'}}}}",
        )
    )
    assert run("lock").code == 0
    monkeypatch.setenv("KITCHEN_RUG_PULL", "1")
    pulled = run("exec", "--agent", "bot", "kitchen.echo", "text=hi")
    assert pulled.code == 3 and pulled.out == ""
    held = _held_id(pulled.err)
    # the approvers hear of it as of a held call, with the difference to read
    assert receiver.done.wait(30)
    receiver.close()
    announced = json.loads(receiver.posts[0][1])
    assert announced["event"] == "tool.changed" and announced["id"] == held
    assert "+Repeat text; mail it too." in announced["summary"]
    assert f"bundlectl approvals approve {held}" in pulled.err
    again = run("exec", "--agent", "bot", "kitchen.echo", "text=hi")
    assert again.code == 3 and _held_id(again.err) == held  # one request per definition

    listed = json.loads(run("approvals", "list", "--format", "json").out)["approvals"]
    [request] = [a for a in listed if a["id"] == held]
    assert request["kind"] == "tool-changed" and request["changed"] == ["description"]
    assert request["definitions"]["after"]["description"] == "Repeat text; mail it too."
    assert request["arguments"] is None and request["agent"] == ""
    shown = run("approvals", "show", held)
    assert shown.code == 0
    assert "    description:\n" in shown.out
    assert "      -Repeat text.\n      +Repeat text; mail it too.\n" in shown.out

    approved = run("approvals", "approve", held)
    assert approved.code == 0 and "pinned on this machine" in approved.out
    local = (pinned / "bundlectl.local.yaml").read_text()
    assert "kitchen.echo: sha256:" in local
    done = run("exec", "--agent", "bot", "kitchen.echo", "text=hi")
    assert (done.code, done.out.strip()) == (0, "hi"), done.err
    stale = run("lock", "--check")
    assert stale.code == 1
    assert "pins tool definitions bundlectl.yaml does not: kitchen.echo" in stale.err
    assert "bundlectl pins update" in stale.err

    dry = run("pins", "update", "--dry-run")
    assert dry.code == 0 and "would record policy.pins kitchen.echo" in dry.out
    assert "policy.pins" not in config.read_text() and "pins:" not in config.read_text()
    recorded = run("pins", "update")
    assert recorded.code == 0, recorded.err
    text = config.read_text()
    assert "# who may call what\npolicy:" in text and "    kitchen.echo: sha256:" in text
    assert "kitchen.echo" not in (pinned / "bundlectl.local.yaml").read_text()
    assert run("lock", "--check").code == 0
    assert run("pins", "update").out.startswith("nothing to record")
    # reviewed now: the changed tool is called without a request, the old one still works
    assert run("exec", "--agent", "bot", "kitchen.echo", "text=hi").code == 0
    monkeypatch.setenv("KITCHEN_RUG_PULL", "")
    assert run("exec", "--agent", "bot", "kitchen.echo", "text=hi").code == 0
    steps = [
        (r["outcome"], r["tool"], r.get("approval"))
        for r in audit_records(isolated_home / "state" / "audit.jsonl")
        if r["outcome"] in ("tool-changed", "approved")
    ]
    assert steps == [("tool-changed", "echo", held), ("approved", "echo", held)]


@pytest.mark.parametrize("where", ["renamed", "moved"])
def test_a_renamed_or_moved_tool_is_caught_and_held(
    project: Path, run: Run, where: str, isolated_home: Path
) -> None:
    """The lock recorded echo's definition under another name (`repeat`) or on another
    server (`old`): the live `kitchen.echo` is that tool, renamed or moved — held as such."""
    [echo] = live("echo")
    kitchen = [{**echo, "name": "repeat"}] if where == "renamed" else []
    old = [echo] if where == "moved" else []
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          kitchen:
            command: {PY}
            args: ["{TEST_SERVERS / "kitchen.py"}"]
            tools: {json.dumps(kitchen + live("request_id"))}
          old:
            command: {PY}
            args: ["-c", "pass"]
            tools: {json.dumps([*old, {"name": "noop"}])}
        agents:
          bot: {{allow: ["kitchen.*"]}}
        policy: {{default: deny, pin_tools: true}}
        """,
    )
    assert run("lock").code == 0
    # by name it is a tool the lock does not record (denied before any server starts)...
    named = run("exec", "--agent", "bot", "kitchen.echo", "text=hi")
    assert named.code == 3 and "the lock does not record this tool" in named.err

    # ...and the gateway, which lists the live tools, sees what it is: held for a person
    async def session(env: dict[str, str]) -> list[str]:
        from mcp import StdioServerParameters

        args = ["-m", "bundlectl", "serve", "--agent", "bot"]
        params = StdioServerParameters(command=PY, args=args, cwd=str(project), env=env)
        async with connected(params) as client:
            return [t.name for t in (await client.list_tools()).tools]

    env = {**os.environ, "BUNDLECTL_HOME": str(isolated_home)}
    assert "kitchen__echo" not in anyio.run(session, env)
    [held] = json.loads(run("approvals", "list", "--format", "json").out)["approvals"]
    said = {"renamed": "it is kitchen.repeat, renamed", "moved": "it is old.echo, moved to server"}
    assert said[where] in held["rule"] and held["changed"] == ["name"]
    shown = run("approvals", "show", held["id"])
    before = "kitchen.repeat" if where == "renamed" else "old.echo"
    assert f"name: {before} → kitchen.echo" in shown.out
    # approved: the new name is pinned, listed and called
    assert run("approvals", "approve", held["id"]).code == 0
    assert "kitchen__echo" in anyio.run(session, env)
    done = run("exec", "--agent", "bot", "kitchen.echo", "text=hi")
    assert (done.code, done.out.strip()) == (0, "hi"), done.err
