"""The gateway gives an agent what its policy allows and nothing more: no resources or prompts
behind an `ask`, no server started (with its secrets) for an agent that may use nothing on it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_exec import gone, pids
from tests.conftest import TEST_SERVERS, Run, write
from tests.gateway.test_gateway_inprocess import serve_in_process

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
            args: ["{TEST_SERVERS / "kitchen.py"}"]
            env: {{KITCHEN_STARTS: "${{KITCHEN_STARTS}}"}}
          secret:  # no declared catalog: listing its tools means starting it
            command: {PY}
            args: ["{TEST_SERVERS / "kitchen.py"}"]
            env: {{KITCHEN_STARTS: "${{SECRET_STARTS}}", GITHUB_TOKEN: "${{GITHUB_TOKEN}}"}}
        agents:
          asker: {{ask: [kitchen.echo]}}
          reader: {{allow: [kitchen.echo]}}
          dave: {{allow: [{{tool: kitchen.echo, args: {{text: "public*"}}}}]}}
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


def test_one_access_rule_for_resources_on_every_front_door(
    shared: Path, isolated_home: Path, run: Run
) -> None:
    """A grant that holds only for some arguments (dave) or only after a person confirms it
    (asker) opens no resources: `serve` refused the ask-only agent while `read` let it in, and
    both let a conditional grant read any URI (issue: security, 6 and 7)."""
    conditional = serve_in_process(shared, "dave", _resources_and_prompts, protocol="legacy")
    assert conditional["tools"] == ["kitchen__echo"]
    assert conditional["resources"] == [] and "unknown resource" in conditional["read"]
    for agent in ("asker", "dave"):
        refused = run("read", "kitchen", "kitchen://counter", "--agent", agent)
        assert refused.code == 3, refused.err
        assert "needs one of its tools allowed outright" in refused.err
        assert run("read", "kitchen", "--agent", agent).code == 3
    assert run("read", "kitchen", "kitchen://counter", "--agent", "reader").out.strip().isdigit()
    # a server without a declared catalog: the rule decides on its live tools
    assert run("read", "secret", "kitchen://counter", "--agent", "everything-but").code == 3
    log = (isolated_home / "state" / "audit.jsonl").read_text().splitlines()
    reads = [json.loads(line) for line in log if '"resources/' in line]
    assert [(r["agent"], r["outcome"]) for r in reads if r["agent"] in ("asker", "dave")][-4:] == [
        ("asker", "denied"),
        ("asker", "denied"),
        ("dave", "denied"),
        ("dave", "denied"),
    ]


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


def test_gateway_names_never_stand_for_two_tools(project: Path) -> None:
    # Servers `a` (tool `b__echo`) and `a__b` (tool `echo`) both gave `a__b__echo`: agent y,
    # allowed only a.b__echo, ran a__b.echo.
    script = TEST_SERVERS / "named.py"
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          a: {{command: {PY}, args: ["{script}", a, b__echo]}}
          a__b: {{command: {PY}, args: ["{script}", a__b, echo]}}
        agents:
          y: {{allow: [a.b__echo]}}
          z: {{allow: ["*"]}}
        policy: {{default: deny}}
        """,
    )

    async def direct(client: Any) -> dict[str, Any]:
        names = [t.name for t in (await client.list_tools()).tools]
        return {name: texts(await client.call_tool(name, {})) for name in names}

    async def search(client: Any) -> list[Any]:
        found = await client.call_tool("call_tool", {"name": "a.b__echo", "arguments": {}})
        other = await client.call_tool("call_tool", {"name": "a__b.echo", "arguments": {}})
        return [texts(found), texts(other)]

    y = serve_in_process(project, "y", direct)
    assert list(y.values()) == [["a.b__echo"]]  # what y may call, and nothing else
    z = serve_in_process(project, "z", direct)
    assert sorted(map(tuple, z.values())) == [("a.b__echo",), ("a__b.echo",)]
    assert len(z) == 2  # two names for two tools
    found, other = serve_in_process(project, "y", search, mode="search")
    assert found == ["a.b__echo"]
    assert "unknown tool" in other[0]


def texts(result: Any) -> list[str]:
    return [block.text for block in result.content]


@pytest.fixture
def kitchen(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KITCHEN_STARTS", str(tmp_path / "kitchen-starts.txt"))
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          kitchen:
            command: {PY}
            args: ["{TEST_SERVERS / "kitchen.py"}"]
            env: {{KITCHEN_STARTS: "${{KITCHEN_STARTS}}"}}
            timeout: 5
        agents:
          bot: {{allow: ["kitchen.*"]}}
        policy: {{default: deny}}
        """,
    )
    return project


def test_a_server_stuck_in_a_timed_out_call_is_restarted_for_the_next(
    kitchen: Path, tmp_path: Path
) -> None:
    import time

    async def script(client: Any) -> list[Any]:
        await client.call_tool("kitchen__echo", {"text": "warm"})
        stuck = await client.call_tool("kitchen__freeze", {"seconds": 120})
        began = time.monotonic()
        after = await client.call_tool("kitchen__echo", {"text": "still here"})
        return [texts(stuck), texts(after), time.monotonic() - began]

    stuck, after, took = serve_in_process(kitchen, "bot", script, protocol="legacy")
    assert stuck[0].startswith("server 'kitchen' did not answer in time"), stuck
    assert after == ["still here"]  # not queued behind the frozen call for 120 s
    assert took < 60
    assert len(pids(tmp_path / "kitchen-starts.txt")) == 2


def test_a_server_that_died_while_idle_is_started_again_for_the_next_call(
    kitchen: Path, tmp_path: Path
) -> None:
    import anyio

    async def script(client: Any) -> list[Any]:
        bye = await client.call_tool("kitchen__vanish", {})
        [first] = pids(tmp_path / "kitchen-starts.txt")
        # waited on, not slept through: the next call is made once the process is gone
        assert await anyio.to_thread.run_sync(gone, first, 30.0)
        return [texts(bye), texts(await client.call_tool("kitchen__echo", {"text": "again"}))]

    bye, again = serve_in_process(kitchen, "bot", script, protocol="legacy")
    assert bye == ["bye"] and again == ["again"]
    assert len(pids(tmp_path / "kitchen-starts.txt")) == 2


def test_a_late_message_of_one_agents_server_never_reaches_another_agent(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stdio server's log message sent after a call answered reached another agent's call in
    flight on the same process: each agent gets its own process of a stdio server; `share:
    true` opts a stateless one back into one process (and pays exactly this, shown last)."""
    import anyio
    from mcp import Client
    from mcp_types import Implementation

    from bundlectl.calls.audit import AuditLog
    from bundlectl.calls.pipeline import Pipeline
    from bundlectl.config.project import load_project
    from bundlectl.gateway.handlers import mcp_server
    from bundlectl.gateway.hub import Hub
    from bundlectl.resolve.resolved import resolve_project

    starts = tmp_path / "starts.txt"
    monkeypatch.setenv("KITCHEN_STARTS", str(starts))

    def configure(share: bool) -> None:
        write(
            project / "bundlectl.yaml",
            f"""
            version: 1
            servers:
              kitchen:  # an older server: its session carries messages sent outside a call
                command: {PY}
                args: ["{TEST_SERVERS / "kitchen.py"}"]
                env: {{KITCHEN_STARTS: "${{KITCHEN_STARTS}}", KITCHEN_LEGACY: "1"}}
                share: {str(share).lower()}
                concurrency: 2
            agents:
              alice: {{allow: [kitchen.late]}}
              carol: {{allow: [kitchen.whisper]}}
            policy: {{default: deny}}
            """,
        )

    def run_both() -> list[str]:
        """carol's logs: her call is in flight when alice's call answers and, a moment later,
        alice's server sends its late log."""
        carol_logs: list[str] = []

        async def main() -> None:
            resolution = resolve_project(load_project(project / "bundlectl.yaml"))
            pipeline = Pipeline(resolution, AuditLog(resolution, via="serve"), confirm=None)
            carol_in_flight = anyio.Event()

            async def log(params: Any) -> None:
                carol_logs.append(str(params.data))
                carol_in_flight.set()

            async with anyio.create_task_group() as group:
                hub = Hub(pipeline, group, agents={"alice", "carol"})
                server = mcp_server(
                    hub, "direct", lambda ctx: ctx.session.client_params.client_info.name
                )

                async def carol() -> None:
                    info = Implementation(name="carol", version="1")
                    async with Client(
                        server, mode="legacy", client_info=info, logging_callback=log
                    ) as c:
                        await c.call_tool("kitchen__whisper", {"tag": "carol", "pause": 3})

                async def alice() -> None:
                    await carol_in_flight.wait()
                    info = Implementation(name="alice", version="1")
                    async with Client(server, mode="legacy", client_info=info) as c:
                        await c.call_tool("kitchen__late", {"tag": "alice", "delay": 0.2})

                async with anyio.create_task_group() as calls:
                    calls.start_soon(carol)
                    calls.start_soon(alice)
                group.cancel_scope.cancel()

        anyio.run(main)
        return carol_logs

    configure(share=False)
    isolated = run_both()
    # carol's own messages all arrived (the marker after which nothing else may), alice's not
    assert isolated[-1] == "second log of carol" and "log of carol" in isolated
    assert not any("alice" in line for line in isolated), isolated
    assert len(starts.read_text().split()) == 2  # one process per agent
    starts.unlink()
    configure(share=True)
    shared = run_both()
    assert len(starts.read_text().split()) == 1  # one process for both, as asked
    assert "late log of alice" in shared  # what `share: true` costs (and the check above can see)


def test_the_tokens_of_the_approvers_and_metrics_doors_are_long_and_no_agents(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """#52 item 10: a token that opens /approvals or /metrics has at least 32 characters and
    is no agent's, checked with every load of the config (`access_for` calls it)."""
    from bundlectl.errors import UsageError
    from bundlectl.gateway.access import people_tokens

    agents = {"writer": "w" * 40}
    monkeypatch.setenv("BUNDLECTL_METRICS_TOKEN", "m" * 31)
    with pytest.raises(UsageError, match=r"METRICS_TOKEN is shorter than 32 characters"):
        people_tokens(agents)
    monkeypatch.setenv("BUNDLECTL_METRICS_TOKEN", "w" * 40)
    with pytest.raises(UsageError, match=r"is also agent 'writer''s token: .* read metrics"):
        people_tokens(agents)
    monkeypatch.setenv("BUNDLECTL_APPROVER_TOKEN", "m" * 32)
    monkeypatch.setenv("BUNDLECTL_METRICS_TOKEN", " " + "m" * 32)  # as read: stripped
    with pytest.raises(UsageError, match=r"METRICS_TOKEN is also \$BUNDLECTL_APPROVER_TOKEN"):
        people_tokens(agents)  # what scrapes the metrics would approve held calls
    monkeypatch.setenv("BUNDLECTL_METRICS_TOKEN", "m" * 32)
    monkeypatch.setenv("BUNDLECTL_APPROVER_TOKEN", "a" * 32)
    assert people_tokens(agents) == {
        "BUNDLECTL_APPROVER_TOKEN": "a" * 32,
        "BUNDLECTL_METRICS_TOKEN": "m" * 32,
    }
