"""`bundlectl serve --transport streamable-http`: many agents behind bearer tokens, `/healthz`,
`--stateless` replicas — the gateway a real subprocess on a loopback port, the SDK's client in
front of it and real downstream servers behind it."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.cli.test_exec import gone, listening, pids
from tests.conftest import INITIALIZE, TEST_SERVERS, Run, audit_records, tls, write

PY = sys.executable
READER_TOKEN = "reader-" + "r" * 30
WRITER_TOKEN = "writer-" + "w" * 30


@pytest.fixture
def http_project(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KITCHEN_STARTS", str(tmp_path / "starts.txt"))
    monkeypatch.setenv("READER_TOKEN", READER_TOKEN)
    monkeypatch.setenv("WRITER_TOKEN", WRITER_TOKEN)
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        bundles: [basic]
        servers:
          kitchen:
            command: {PY}
            args: ["{TEST_SERVERS / "kitchen.py"}"]
            env: {{KITCHEN_STARTS: "${{KITCHEN_STARTS}}"}}
        agents:
          reader:  # reads files, echoes
            token: "${{READER_TOKEN}}"
            allow: [files.read_file, kitchen.echo]
          writer:
            token: "${{WRITER_TOKEN}}"
            allow: [files.write_file, kitchen.add]
        policy: {{default: deny}}
        """,
    )
    (project / "hello.txt").write_text("hello\n")
    return project


@contextmanager
def gateway(project: Path, *args: str, home: Path | None = None) -> Iterator[tuple[str, Any]]:
    """`serve --transport streamable-http` on a free port: its base URL and the process."""
    env = {**os.environ}
    if home is not None:
        env["BUNDLECTL_HOME"] = str(home)
    proc = subprocess.Popen(
        [PY, "-m", "bundlectl", "serve", "--transport", "streamable-http", "--port", "0", *args],
        cwd=project,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stderr is not None
    try:
        line = proc.stderr.readline().decode()
        found = re.search(r"on (http://\S+)/mcp", line)
        assert found, line + proc.stderr.read().decode()
        yield found.group(1), proc
    finally:
        if proc.poll() is None:
            proc.terminate()
        proc.communicate(timeout=10)


def refused_at_start(project: Path) -> str:
    """`serve --transport streamable-http` ending at start with exit 2 (a config it cannot
    serve): what it said."""
    done = subprocess.run(
        [PY, "-m", "bundlectl", "serve", "--transport", "streamable-http"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    return done.stderr


@asynccontextmanager
async def client(
    url: str, token: str | None = None, *, headers: dict[str, str] | None = None, **options: Any
) -> AsyncIterator[Any]:
    """The SDK's client over streamable HTTP, with the agent's token (and `headers`)."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {**(headers or {}), **({"Authorization": f"Bearer {token}"} if token else {})}
    timeout = httpx2.Timeout(30, read=300)
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout, verify=tls()) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http), **options) as c,
    ):
        yield c


def texts(result: Any) -> list[str]:
    return [block.text for block in result.content]


def records(home: Path) -> list[dict[str, Any]]:
    path = home / "state" / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_each_token_gets_its_own_agents_tools_and_nothing_else(
    http_project: Path, isolated_home: Path
) -> None:
    import httpx2

    async def script(url: str) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with client(url, READER_TOKEN) as reader:
            seen["reader"] = sorted(t.name for t in (await reader.list_tools()).tools)
            seen["read"] = await reader.call_tool("files__read_file", {"path": "hello.txt"})
            seen["stolen"] = await reader.call_tool("kitchen__add", {"a": 1, "b": 2})
        async with client(url, WRITER_TOKEN, mode="legacy") as writer:
            seen["writer"] = sorted(t.name for t in (await writer.list_tools()).tools)
            seen["add"] = await writer.call_tool("kitchen__add", {"a": 1, "b": 2})
            seen["echo"] = await writer.call_tool("kitchen__echo", {"text": "x"})
        async with httpx2.AsyncClient() as http:
            initialize = INITIALIZE
            accept = {"Accept": "application/json, text/event-stream"}
            seen["none"] = await http.post(f"{url}/mcp", json=initialize, headers=accept)
            wrong = {**accept, "Authorization": "Bearer " + "x" * 40}
            seen["wrong"] = await http.post(f"{url}/mcp", json=initialize, headers=wrong)
            opened = await http.post(
                f"{url}/mcp",
                json=initialize,
                headers={**accept, "Authorization": f"Bearer {READER_TOKEN}"},
            )
            session = opened.headers["mcp-session-id"]
            listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
            seen["hijack"] = await http.post(
                f"{url}/mcp",
                json=listing,
                headers={
                    **accept,
                    "Authorization": f"Bearer {WRITER_TOKEN}",
                    "mcp-session-id": session,
                    "mcp-protocol-version": "2025-11-25",
                },
            )
            seen["health"] = await http.get(f"{url}/healthz")
        return seen

    with gateway(http_project) as (url, proc):
        seen = anyio.run(script, url)
        proc.terminate()
        _, err = proc.communicate(timeout=10)

    assert seen["reader"] == ["files__read_file", "kitchen__echo"]
    assert seen["writer"] == ["files__write_file", "kitchen__add"]
    assert texts(seen["read"]) == ["hello\n"]
    assert seen["add"].structured_content == {"sum": 3}
    # Another agent's tool is as unknown as a tool that does not exist.
    assert texts(seen["stolen"]) == [
        "unknown tool 'kitchen__add'; tools/list shows the tools you can call"
    ]
    assert seen["echo"].is_error
    assert seen["none"].status_code == 401 and seen["wrong"].status_code == 401
    assert seen["none"].headers["www-authenticate"].startswith("Bearer")
    assert seen["hijack"].status_code == 404  # a session answers only the token that opened it
    lock = json.loads(json.dumps(seen["health"].json()))
    assert seen["health"].status_code == 200 and lock["policy_digest"].startswith("sha256:")

    log = records(isolated_home)
    assert [r["outcome"] for r in log if r["outcome"] == "unauthorized"] == ["unauthorized"] * 2
    assert {(r["agent"], r["tool"], r["outcome"]) for r in log} >= {
        ("reader", "read_file", "ok"),
        ("reader", "add", "denied"),
        ("writer", "add", "ok"),
    }
    everything = (isolated_home / "state" / "audit.jsonl").read_text() + err.decode()
    assert READER_TOKEN not in everything and WRITER_TOKEN not in everything


def test_tokens_follow_the_config_and_a_broken_token_keeps_the_last_good_one(
    http_project: Path, isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rotating a token is an edit of bundlectl.yaml, applied from the next request without a
    restart; an edit that leaves a token unusable keeps the tokens (and policy) in force."""
    import httpx2

    rotated = "reader-rotated-" + "n" * 30
    monkeypatch.setenv("READER_TOKEN_NEXT", rotated)
    config = http_project / "bundlectl.yaml"
    listing = INITIALIZE
    accept = {"Accept": "application/json, text/event-stream"}

    def status(url: str, token: str) -> int:
        headers = {**accept, "Authorization": f"Bearer {token}"}
        return httpx2.post(f"{url}/mcp", json=listing, headers=headers, timeout=30).status_code

    with gateway(http_project) as (url, proc):
        assert status(url, READER_TOKEN) == 200 and status(url, rotated) == 401
        config.write_text(config.read_text().replace("${READER_TOKEN}", "${READER_TOKEN_NEXT}"))
        assert status(url, rotated) == 200 and status(url, READER_TOKEN) == 401
        config.write_text(config.read_text().replace('"${READER_TOKEN_NEXT}"', '"short"'))
        assert status(url, rotated) == 200  # the broken edit is not applied
        assert status(url, WRITER_TOKEN) == 200
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    log = err.decode()
    assert "reload failed" in log and "agents.reader.token is shorter than 16 characters" in log
    assert rotated not in log and READER_TOKEN not in log


def test_refused_requests_are_audited_ten_per_address_per_minute(
    http_project: Path, isolated_home: Path
) -> None:
    """A flood of bad tokens cannot fill the disk: ten records, then one that counts the rest
    (written when serving stops, or when the address's next minute begins)."""
    import httpx2

    with gateway(http_project) as (url, proc):
        with httpx2.Client(timeout=30) as http:
            codes = {
                http.post(f"{url}/mcp", json={}, headers={"Authorization": "Bearer x"}).status_code
                for _ in range(25)
            }
        proc.terminate()
        proc.communicate(timeout=10)
    assert codes == {401}
    refused = [r for r in records(isolated_home) if r["outcome"] == "unauthorized"]
    assert len(refused) == 11
    assert all(r["remote"].startswith("127.0.0.1:") and "repeated" not in r for r in refused[:10])
    assert refused[10]["remote"] == "127.0.0.1" and refused[10]["repeated"] == 15


def test_healthz_digest_is_the_locks_policy_digest(
    http_project: Path, isolated_home: Path, run: Run
) -> None:
    import httpx2

    assert run("lock").code == 0
    text = (http_project / "bundlectl.lock").read_text()
    [locked] = re.findall(r'^policy_digest: "(sha256:[0-9a-f]+)"', text, re.M)
    with gateway(http_project) as (url, _):
        answer = httpx2.get(f"{url}/healthz")
        port = url.rsplit(":", 1)[1]
        rebound = httpx2.get(f"{url}/healthz", headers={"Host": f"attacker.example:{port}"})
        foreign = httpx2.get(f"{url}/healthz", headers={"Origin": "http://attacker.example"})
    assert answer.json() == {"status": "ok", "policy_digest": locked}
    # A page reached by DNS rebinding reads nothing, as on /mcp.
    assert rebound.status_code == 421 and "policy_digest" not in rebound.text
    assert foreign.status_code == 421


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--agent", "nobody", "--unlisted", "--host", "0.0.0.0"],
            "refusing to serve 0.0.0.0 without tokens",
        ),
        ([], "no agent declares one"),
    ],
)
def test_unsafe_or_unidentifiable_setups_are_refused(
    project: Path, run: Run, args: list[str], message: str
) -> None:
    write(project / "bundlectl.yaml", "version: 1\nbundles: [basic]\n")
    result = run("serve", "--transport", "streamable-http", "--port", "0", *args)
    assert result.code == 2 and message in result.err, result.err
    assert "hint:" in result.err


def test_a_missing_token_variable_is_named(
    http_project: Path, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("WRITER_TOKEN")
    result = run("serve", "--transport", "streamable-http", "--port", "0")
    assert result.code == 2
    assert "agents.writer.token needs the environment variable WRITER_TOKEN" in result.err


def test_one_agent_on_loopback_needs_no_token(http_project: Path, isolated_home: Path) -> None:
    write(
        http_project / "bundlectl.yaml",
        "version: 1\nbundles: [basic]\nagents: {viewer: {allow: [files.read_file]}}\n",
    )

    async def script(url: str) -> list[str]:
        async with client(url) as viewer:
            return [t.name for t in (await viewer.list_tools()).tools]

    with gateway(http_project, "--agent", "viewer") as (url, _):
        assert anyio.run(script, url) == ["files__read_file"]


def test_stateless_replicas_answer_one_clients_calls_alternately(
    http_project: Path, isolated_home: Path, tmp_path: Path
) -> None:
    """Two gateway processes behind a round-robin "load balancer" (the client's HTTP transport
    sends each request to the other replica): every call is answered, by both of them."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    hits: list[str] = []

    class RoundRobin(httpx2.AsyncBaseTransport):
        def __init__(self, urls: list[str]) -> None:
            self.urls = urls
            self.inner = httpx2.AsyncHTTPTransport()

        async def handle_async_request(self, request: Any) -> Any:
            base = self.urls[len(hits) % len(self.urls)]
            hits.append(base)
            request.url = request.url.copy_with(port=int(base.rsplit(":", 1)[1]))
            return await self.inner.handle_async_request(request)

        async def aclose(self) -> None:
            await self.inner.aclose()

    async def script(urls: list[str]) -> list[Any]:
        async with (
            httpx2.AsyncClient(
                transport=RoundRobin(urls),
                headers={"Authorization": f"Bearer {READER_TOKEN}"},
                timeout=httpx2.Timeout(30, read=300),
            ) as http,
            Client(streamable_http_client(f"{urls[0]}/mcp", http_client=http)) as c,
        ):
            return [await c.call_tool("kitchen__echo", {"text": f"n{i}"}) for i in range(4)]

    with (
        gateway(http_project, "--stateless") as (one, _),
        gateway(http_project, "--stateless") as (two, _),
    ):
        results = anyio.run(script, [one, two])
    assert [texts(r) for r in results] == [["n0"], ["n1"], ["n2"], ["n3"]]
    assert set(hits) == {one, two}
    assert len(pids(tmp_path / "starts.txt")) == 2  # each replica runs its own downstream


def test_sigterm_stops_the_http_gateway_and_its_servers(
    http_project: Path, isolated_home: Path, tmp_path: Path
) -> None:
    async def script(url: str) -> None:
        async with client(url, READER_TOKEN) as reader:
            await reader.call_tool("kitchen__echo", {"text": "warm"})

    with gateway(http_project) as (url, proc):
        anyio.run(script, url)
        [pid] = pids(tmp_path / "starts.txt")
        began = time.monotonic()
        proc.terminate()
        proc.communicate(timeout=10)
        assert proc.returncode == 130
    assert gone(pid, within=5.0) and time.monotonic() - began < 5


def test_code_mode_client_through_the_gateway(
    http_project: Path, isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`bundlectl.client.call_tool` with BUNDLECTL_GATEWAY_URL: the call goes through `serve`
    (the agent is the token's), and a tool that agent may not call raises ToolDenied."""
    from bundlectl import client

    with gateway(http_project) as (url, _):
        monkeypatch.setenv("BUNDLECTL_GATEWAY_URL", f"{url}/mcp")
        monkeypatch.setenv("BUNDLECTL_GATEWAY_TOKEN", READER_TOKEN)
        assert client.call_tool("files.read_file", {"path": "hello.txt"}) == "hello\n"
        with pytest.raises(client.ToolDenied, match=r"unknown tool 'kitchen__add'"):
            client.call_tool("kitchen.add", {"a": 1, "b": 2})
    log = records(isolated_home)
    assert ("reader", "add", "denied") in {(r["agent"], r["tool"], r["outcome"]) for r in log}


ALICE_TOKEN = "alice-" + "a" * 30
CAROL_TOKEN = "carol-" + "c" * 30


@pytest.mark.parametrize(
    ("concurrency", "protocol"), [(1, "legacy"), (2, "legacy"), (1, "auto")]
)  # with two calls in flight the message is refused before any protocol is asked
def test_what_a_shared_server_sends_during_a_call_reaches_only_that_calls_client(
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    isolated_home: Path,
    concurrency: int,
    protocol: str,
) -> None:
    # Two agents call one downstream server at the same time; each call logs and asks its
    # client a question naming its agent. No client may see the other's log or question.
    # A 2025-11-25 client ("legacy") is asked on its session; a 2026-07-28 one answers by
    # retrying its call, and gets log messages only when it asks for them (not here).
    monkeypatch.setenv("ALICE_TOKEN", ALICE_TOKEN)
    monkeypatch.setenv("CAROL_TOKEN", CAROL_TOKEN)
    # The server speaks 2025-11-25 over streamable HTTP: requests to its client during a call.
    kitchen = [PY, str(TEST_SERVERS / "kitchen.py"), "--transport", "streamable-http"]
    downstream = listening(kitchen, {"KITCHEN_LEGACY": "1"})
    port = downstream.__enter__()
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          kitchen:
            transport: streamable-http
            url: "http://127.0.0.1:{port}/mcp"
            concurrency: {concurrency}
        agents:
          alice: {{token: "${{ALICE_TOKEN}}", allow: [kitchen.whisper]}}
          carol: {{token: "${{CAROL_TOKEN}}", allow: [kitchen.whisper]}}
        policy: {{default: deny}}
        """,
    )
    import mcp_types as types

    seen: dict[str, dict[str, list[str]]] = {}
    finished: dict[str, anyio.Event] = {}

    async def one(url: str, agent: str, token: str) -> None:
        got: dict[str, list[str]] = {"logs": [], "asked": [], "result": []}
        seen[agent] = got

        async def elicit(context: Any, params: Any) -> Any:
            got["asked"].append(params.message)
            return types.ElicitResult(action="accept", content={"ok": True})

        async def log(params: Any) -> None:
            got["logs"].append(str(params.data))

        async with client(
            url, token, mode=protocol, elicitation_callback=elicit, logging_callback=log
        ) as c:
            result = await c.call_tool("kitchen__whisper", {"tag": agent, "pause": 0.5})
            got["result"] = texts(result)
            # Both calls answered, then a round trip on this session: whatever the gateway
            # sent this client for either call came before the ping's answer.
            finished[agent].set()
            await finished["carol" if agent == "alice" else "alice"].wait()
            await c.list_tools()

    async def both(url: str) -> None:
        finished.update(alice=anyio.Event(), carol=anyio.Event())
        async with anyio.create_task_group() as group:
            group.start_soon(one, url, "alice", ALICE_TOKEN)
            group.start_soon(one, url, "carol", CAROL_TOKEN)

    try:
        with gateway(project) as (url, _):
            anyio.run(both, url)
    finally:
        downstream.__exit__(None, None, None)

    for agent, other in (("alice", "carol"), ("carol", "alice")):
        got = seen[agent]
        everything = " ".join(got["logs"] + got["asked"] + got["result"])
        assert other not in everything, (agent, got)
        if concurrency == 1:  # one call at a time: each client gets its own, all of it
            logs = [f"log of {agent}", f"second log of {agent}"] if protocol == "legacy" else []
            assert got["logs"] == logs, got
            assert got["asked"] == [f"question of {agent}"]
            assert got["result"] == [f"{agent}: accept"]
    if concurrency == 2:  # both in flight at once: whose it is cannot be told, so no one gets it
        results = seen["alice"]["result"] + seen["carol"]["result"]
        assert any("calls of several clients are in flight" in r for r in results), results


def _answer(response: Any) -> Any:
    """A JSON-RPC answer, sent as JSON or as one server-sent event."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
        return json.loads(data[-1])
    return response.json()


def test_a_stateless_gateway_declares_no_subscriptions_it_cannot_deliver(
    http_project: Path, isolated_home: Path
) -> None:
    """--stateless: no response stream outlives a request, so a 2025-11-25 client is promised
    neither resource updates nor list changes, and `resources/subscribe` is not a method."""
    import httpx2

    headers = {
        "Accept": "application/json, text/event-stream",
        "Authorization": f"Bearer {READER_TOKEN}",
        "MCP-Protocol-Version": "2025-11-25",
    }
    subscribe = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "resources/subscribe",
        "params": {"uri": "kitchen://counter"},
    }
    answers = {}
    for flags in (["--stateless"], []):
        with gateway(http_project, *flags) as (url, _):
            hello = httpx2.post(f"{url}/mcp", json=INITIALIZE, headers=headers, timeout=30)
            session = hello.headers.get("mcp-session-id")
            more = {**headers, **({"mcp-session-id": session} if session else {})}
            asked = httpx2.post(f"{url}/mcp", json=subscribe, headers=more, timeout=30)
            answers[bool(flags)] = (_answer(hello)["result"]["capabilities"], _answer(asked))
    capabilities, refused = answers[True]
    assert capabilities["resources"].get("subscribe") is not True, capabilities
    assert capabilities["tools"].get("listChanged") is not True, capabilities
    assert refused["error"]["code"] == -32601, refused
    capabilities, taken = answers[False]  # a stateful gateway keeps both
    assert capabilities["resources"]["subscribe"] is True and "result" in taken, taken
    assert capabilities["tools"]["listChanged"] is True


def test_a_session_that_ends_releases_its_subscriptions_downstream(
    project: Path, monkeypatch: pytest.MonkeyPatch, isolated_home: Path
) -> None:
    """A 2025-11-25 client subscribes through the gateway, then ends its HTTP session (DELETE)
    without unsubscribing: the downstream server is unsubscribed all the same (#21 defect 5)."""
    monkeypatch.setenv("ALICE_TOKEN", ALICE_TOKEN)
    kitchen = [PY, str(TEST_SERVERS / "kitchen.py"), "--transport", "streamable-http"]
    uri = "kitchen://counter"
    with listening(kitchen, {"KITCHEN_LEGACY": "1"}) as port:
        write(
            project / "bundlectl.yaml",
            f"""
            version: 1
            servers:
              kitchen: {{transport: streamable-http, url: "http://127.0.0.1:{port}/mcp"}}
            agents:
              alice: {{token: "${{ALICE_TOKEN}}", allow: ["kitchen.*"]}}
            policy: {{default: deny}}
            """,
        )

        async def subscribed(c: Any) -> Any:
            return (await c.call_tool("kitchen__subscribed", {})).structured_content["result"]

        async def both(url: str) -> list[Any]:
            from tests.gateway.test_gateway_inprocess import deprecated

            async with client(url, ALICE_TOKEN, mode="legacy") as first:
                with deprecated():
                    await first.subscribe_resource(uri)
                during = await subscribed(first)
            # `first` is gone: its session was deleted on the way out, still subscribed.
            async with client(url, ALICE_TOKEN, mode="legacy") as second:
                after = await subscribed(second)
                with anyio.move_on_after(5):
                    while after:
                        await anyio.sleep(0.05)
                        after = await subscribed(second)
            return [during, after]

        with gateway(project) as (url, _):
            during, after = anyio.run(both, url)
    assert during == [uri]
    assert after == []


def test_responses_on_a_kept_alive_connection_are_not_held_by_nagle() -> None:
    """The listening socket said `proto` 0, so asyncio left Nagle on for accepted connections:
    every response on a reused connection waited ~40 ms for the client's delayed ACK. What the
    gateway's event loop sees on an accepted connection is checked, as uvicorn gets it."""
    import asyncio
    import socket

    from bundlectl.gateway.http import bind

    async def accepted_nodelay(listener: socket.socket) -> int:
        seen: list[int] = []
        done = asyncio.Event()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            conn = writer.get_extra_info("socket")
            seen.append(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()
            done.set()

        server = await asyncio.start_server(handle, sock=listener)
        port = listener.getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.wait_for(done.wait(), 30)
        writer.close()
        server.close()
        return seen[0]

    ours = bind("127.0.0.1", 0)
    assert ours.proto == socket.IPPROTO_TCP
    assert asyncio.run(accepted_nodelay(ours)) != 0
    plain = socket.create_server(("127.0.0.1", 0))  # what it was: Nagle stays on
    assert asyncio.run(accepted_nodelay(plain)) == 0


def test_over_http_a_clients_always_allow_is_not_offered_or_kept(
    project: Path, isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#39: an HTTP gateway's client is one of many and the local rules file is the gateway
    host's: its elicitation asks yes or no only, and an "always" sent anyway keeps nothing."""
    import mcp_types as types

    monkeypatch.setenv("READER_TOKEN", READER_TOKEN)
    write(
        project / "bundlectl.yaml",
        """
        version: 1
        bundles: [basic]
        agents:
          reader: {token: "${READER_TOKEN}", ask: [files.write_file]}
        policy: {default: deny}
        """,
    )
    asked: list[Any] = []

    async def elicit(context: Any, params: Any) -> Any:
        asked.append(params.requested_schema)
        return types.ElicitResult(action="accept", content={"always": True})

    async def script(url: str) -> list[Any]:
        async with client(url, READER_TOKEN, elicitation_callback=elicit) as c:
            return [
                await c.call_tool("files__write_file", {"path": p, "content": "x"})
                for p in ("one.txt", "two.txt")
            ]

    with gateway(project, home=isolated_home) as (url, _):
        results = anyio.run(script, url)
    assert [r.is_error for r in results] == [False, False]
    assert [schema["properties"] for schema in asked] == [{}, {}]  # asked each time
    assert not (project / "bundlectl.local.yaml").exists()


def _at_once(url: str, count: int, tool: str, arguments: dict[str, Any]) -> list[str]:
    """`count` clients, each on a connection of its own opened before any sends, call `tool`
    at the same moment (stateless: no session); the raw HTTP answers."""
    import asyncio

    message = {"name": tool, "arguments": arguments}
    body = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": message})
    host, port = url.removeprefix("http://").rsplit(":", 1)

    async def one(start: asyncio.Event) -> str:
        reader, writer = await asyncio.open_connection(host, int(port))
        await start.wait()
        head = (
            f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            "Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\n"
            f"Authorization: Bearer {READER_TOKEN}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        )
        writer.write(head.encode() + body.encode())
        await writer.drain()
        answer = (await reader.read()).decode()
        writer.close()
        return answer

    async def many() -> list[str]:
        start = asyncio.Event()
        calls = [asyncio.create_task(one(start)) for _ in range(count)]
        await asyncio.sleep(0.2)  # every connection open before any call is sent
        start.set()
        return await asyncio.wait_for(asyncio.gather(*calls), 120)

    return asyncio.run(many())


def test_a_stateless_gateway_answers_128_connections_at_once(http_project: Path) -> None:
    """#57: 128 clients each open a connection at the same moment and send a call: every one
    is answered with its result, none is reset or refused (bounded: a few seconds)."""
    with gateway(http_project, "--stateless") as (url, _):
        answers = _at_once(url, 128, "files__read_file", {"path": "hello.txt"})
    statuses = [a.split(" ", 2)[1] for a in answers]
    assert statuses == ["200"] * 128, sorted(set(statuses))
    assert all("hello\\n" in a for a in answers), answers[0][-400:]


def test_workers_serve_one_port_each_with_its_own_servers_and_stop_together(
    http_project: Path, tmp_path: Path, run: Run
) -> None:
    """#57 goal 5: `--workers 2` — two processes take the port's connections, each starts its
    own downstream server; SIGTERM stops both and their servers. A session lives in one
    process, so stateful serving with workers is refused."""
    with gateway(http_project, "--stateless", "--workers", "2") as (url, proc):
        second = proc.stderr.readline().decode()  # the other worker listens too, by now
        assert re.search(r"on http://\S+/mcp \(stateless\)", second), second
        answers = _at_once(url, 64, "kitchen__echo", {"text": "both"})
        assert [a.split(" ", 2)[1] for a in answers] == ["200"] * 64
        assert all('"both"' in a for a in answers), answers[0][-400:]
        kitchens = pids(tmp_path / "starts.txt")
        assert len(kitchens) == 2, kitchens  # one per worker: the connections reached both
        proc.terminate()
        _, said = proc.communicate(timeout=10)
        assert proc.returncode == 130, said.decode()
    assert all(gone(pid) for pid in kitchens)
    refused = run("serve", "--transport", "streamable-http", "--workers", "2")
    assert refused.code == 2 and "--stateless" in refused.err


def _children(parent: int) -> list[int]:
    """The processes whose parent is `parent` (Linux /proc)."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == parent:
                found.append(int(entry))
    return found


def test_a_stop_every_worker_hears_too_winds_each_down_once(
    http_project: Path, tmp_path: Path
) -> None:
    """Ctrl-C reaches the terminal's whole process group, and a manager such as systemd signals
    every process of a service: each worker then hears the stop itself and from its supervisor.
    It winds down once — no traceback (the second signal cancelled everything mid-way), every
    worker and server gone, exit 130 — as one process would."""
    import signal

    # `-X faulthandler`: run here, not handed to the suite's fork server, so that the workers
    # are this process's children, as under a terminal
    argv = ["serve", "--transport", "streamable-http", "--port", "0", "--stateless"]
    proc = subprocess.Popen(
        [PY, "-X", "faulthandler", "-m", "bundlectl", *argv, "--workers", "2"],
        cwd=http_project,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    try:
        first = proc.stderr.readline().decode()
        proc.stderr.readline()  # the other worker listens too
        found = re.search(r"on (http://\S+)/mcp", first)
        assert found, first
        answers = _at_once(found.group(1), 16, "kitchen__echo", {"text": "both"})
        assert [a.split(" ", 2)[1] for a in answers] == ["200"] * 16
        kitchens = pids(tmp_path / "starts.txt")
        workers = _children(proc.pid)
        assert len(workers) == 2, workers
        for worker in workers:  # each worker hears Ctrl-C itself ...
            os.kill(worker, signal.SIGINT)
        time.sleep(0.1)
        os.kill(proc.pid, signal.SIGINT)  # ... and from its supervisor, which hears it too
        _, said = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:  # a failed check above: nothing is left running
            proc.terminate()
            proc.communicate(timeout=30)
    text = said.decode()
    assert proc.returncode == 130, text
    assert "Traceback" not in text, text
    assert text.count("stopped by SIGINT") == 2, text  # each worker, once
    assert kitchens and all(gone(pid) for pid in kitchens), kitchens


def test_a_servers_question_during_a_call_comes_on_that_calls_own_stream(
    project: Path, isolated_home: Path
) -> None:
    """A stateful client that opened no standalone stream (a GET it may open later, or never)
    is asked a downstream server's question on the response stream of the call it belongs to,
    as the transport says a request related to a client's request should be; sent on the
    session's standalone stream, it was lost whenever the client had not opened one yet, and
    the call waited out the client's timeout (the conformance suite's elicitation scenario,
    once, on a loaded machine)."""
    import httpx2

    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          kitchen:
            command: {PY}
            args: ["{TEST_SERVERS / "kitchen.py"}"]
            env: {{KITCHEN_LEGACY: "1"}}
        agents:
          solo: {{allow: [kitchen.whisper]}}
        policy: {{default: deny}}
        """,
    )
    headers = {"Accept": "application/json, text/event-stream"}
    hello = {**INITIALIZE, "params": {**INITIALIZE["params"], "capabilities": {"elicitation": {}}}}
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "kitchen__whisper", "arguments": {"tag": "t", "pause": 0}},
    }
    with gateway(project, "--agent", "solo") as (url, _), httpx2.Client(timeout=20) as http:
        opened = http.post(f"{url}/mcp", json=hello, headers=headers)
        assert opened.status_code == 200, opened.text
        session = {
            **headers,
            "mcp-session-id": opened.headers["mcp-session-id"],
            "MCP-Protocol-Version": "2025-11-25",
        }
        done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert http.post(f"{url}/mcp", json=done, headers=session).status_code == 202
        seen: list[dict[str, Any]] = []
        with http.stream("POST", f"{url}/mcp", json=call, headers=session) as stream:
            for line in stream.iter_lines():
                if not line.startswith("data:"):
                    continue
                message = json.loads(line[5:])
                seen.append(message)
                if message.get("method") == "elicitation/create":
                    assert message["params"]["message"] == "question of t", message
                    reply = {
                        "jsonrpc": "2.0",
                        "id": message["id"],
                        "result": {"action": "accept", "content": {"ok": True}},
                    }
                    assert http.post(f"{url}/mcp", json=reply, headers=session).status_code == 202
                if message.get("id") == 2:
                    break
    methods = [m.get("method") for m in seen]
    assert "elicitation/create" in methods, json.dumps(seen)
    assert seen[-1]["result"]["content"][0]["text"] == "t: accept", json.dumps(seen)


def test_a_modern_request_whose_headers_disagree_with_its_body_is_refused_unsent(
    project: Path, isolated_home: Path
) -> None:
    """2026-07-28 (SEP-2243): `Mcp-Method` and `Mcp-Name` mirror the body so that a proxy can
    route and decide on headers alone. A request whose headers say another tool than its body
    is refused with 400 and the header-mismatch error before anything is called (no call is
    audited); the same request with agreeing headers is called."""
    import httpx2
    import mcp_types as types

    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          kitchen: {{command: {PY}, args: ["{TEST_SERVERS / "kitchen.py"}"]}}
        agents:
          solo: {{allow: [kitchen.echo]}}
        policy: {{default: deny}}
        """,
    )
    envelope = {
        types.PROTOCOL_VERSION_META_KEY: "2026-07-28",
        types.CLIENT_CAPABILITIES_META_KEY: {},
    }
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "kitchen__echo", "arguments": {"text": "hi"}, "_meta": envelope},
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": "kitchen__fail",
    }
    with (
        gateway(project, "--agent", "solo", "--stateless", home=isolated_home) as (url, _),
        httpx2.Client(timeout=30, verify=tls()) as http,
    ):
        wrong = http.post(f"{url}/mcp", json=body, headers=headers)
        assert wrong.status_code == 400, wrong.text
        assert '"code":-32020' in wrong.text.replace(" ", ""), wrong.text
        assert "mcp-name header does not match" in wrong.text
        wrong = http.post(f"{url}/mcp", json=body, headers={**headers, "Mcp-Method": "tools/list"})
        assert wrong.status_code == 400, wrong.text
        right = http.post(f"{url}/mcp", json=body, headers={**headers, "Mcp-Name": "kitchen__echo"})
        assert right.status_code == 200, right.text
        assert "hi" in right.text and '"isError":true' not in right.text.replace(" ", "")
    calls = [r for r in audit_records(isolated_home / "state" / "audit.jsonl") if r["tool"] != "-"]
    assert [(r["tool"], r["outcome"]) for r in calls] == [("echo", "ok")]
