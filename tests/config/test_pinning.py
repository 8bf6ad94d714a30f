"""`policy.pin_tools`: a tool whose live definition differs from the one the lock recorded is
refused by `exec` and withheld and refused by `serve` (SPEC 7 "Pinning") — a real server that
changes a tool's description after review ("rug pull")."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import TEST_SERVERS, Run, over_the_pipes, write
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
    import json

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
