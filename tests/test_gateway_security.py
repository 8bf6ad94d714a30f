"""The gateway gives an agent what its policy allows and nothing more: no resources or prompts
behind an `ask`, no server started (with its secrets) for an agent that may use nothing on it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import write
from tests.test_exec import SERVERS, pids
from tests.test_gateway_inprocess import serve_in_process

PY = sys.executable


@pytest.fixture
def shared(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KITCHEN_STARTS", str(tmp_path / "kitchen-starts.txt"))
    monkeypatch.setenv("SECRET_STARTS", str(tmp_path / "secret-starts.txt"))
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_" + "z" * 36)
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          kitchen:
            command: {PY}
            args: ["{SERVERS / "kitchen.py"}"]
            env: {{KITCHEN_STARTS: "${{KITCHEN_STARTS}}"}}
          secret:  # no declared catalog: listing its tools means starting it
            command: {PY}
            args: ["{SERVERS / "kitchen.py"}"]
            env: {{KITCHEN_STARTS: "${{SECRET_STARTS}}", GITHUB_TOKEN: "${{GITHUB_TOKEN}}"}}
        agents:
          asker: {{ask: [kitchen.echo]}}
          reader: {{allow: [kitchen.echo]}}
          everything-but: {{deny: ["secret.*"]}}
        policy: {{default: deny}}
        """,
    )
    return project


async def _resources_and_prompts(client: Any) -> dict[str, Any]:
    from mcp.shared.exceptions import MCPError

    seen: dict[str, Any] = {"resources": (await client.list_resources()).resources}
    try:
        seen["read"] = await client.read_resource("kitchen://counter")
    except MCPError as exc:
        seen["read"] = exc.error.message
    seen["tools"] = [t.name for t in (await client.list_tools()).tools]
    return seen


def test_an_ask_rule_does_not_open_the_servers_resources(shared: Path, isolated_home: Path) -> None:
    asked = serve_in_process(shared, "asker", _resources_and_prompts, protocol="legacy")
    assert asked["tools"] == ["kitchen__echo"]  # the tool is offered (it can be confirmed)
    assert asked["resources"] == []
    assert asked["read"] == (
        "unknown resource 'kitchen://counter'; resources/list shows what you can read"
    )

    allowed = serve_in_process(shared, "reader", _resources_and_prompts, protocol="legacy")
    assert [str(r.uri) for r in allowed["resources"]] == ["kitchen://counter"]
    assert allowed["read"].contents[0].text.isdigit()
    log = [
        json.loads(line)
        for line in (isolated_home / "state" / "audit.jsonl").read_text().splitlines()
    ]
    reads = [(r["agent"], r["server"], r["outcome"]) for r in log if r["tool"] == "resources/read"]
    assert reads == [("asker", "-", "not-found"), ("reader", "kitchen", "ok")]
    assert all("counter" not in json.dumps(r) for r in log)  # the URI only as a keyed digest


@pytest.mark.parametrize("agent", ["reader", "asker", "everything-but", "nobody"])
def test_servers_an_agent_may_use_nothing_on_are_never_started(
    shared: Path, tmp_path: Path, agent: str
) -> None:
    async def script(client: Any) -> list[str]:
        names = [t.name for t in (await client.list_tools()).tools]
        await client.list_resources()
        await client.list_prompts()
        return names

    names = serve_in_process(shared, agent, script, protocol="legacy")
    assert not any(name.startswith("secret__") for name in names)
    assert pids(tmp_path / "secret-starts.txt") == []  # never started, never given the token
