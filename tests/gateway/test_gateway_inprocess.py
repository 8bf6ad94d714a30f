"""The gateway's MCP server run in this process (the SDK's in-process client, no framing) in front
of real downstream subprocesses: fast checks of its behaviour, and of the faults a downstream
server can have — crashing, hanging, garbage on stdout, endless lines."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from bundlectl.calls import auditfile
from bundlectl.calls.audit import AuditLog
from bundlectl.calls.pipeline import Pipeline
from bundlectl.config.project import load_project
from bundlectl.gateway.handlers import mcp_server
from bundlectl.gateway.hub import Hub
from bundlectl.resolve.resolved import resolve_project
from tests.cli.test_exec import gone, pids
from tests.conftest import TEST_SERVERS, write

PY = sys.executable


def serve_in_process(
    project: Path,
    agent: str,
    script: Any,
    mode: str = "direct",
    protocol: str = "auto",
    **opts: Any,
) -> Any:
    """Run `script(client)` against `bundlectl serve --agent AGENT` built in this process
    (`protocol`: the client's, "auto" or "legacy"; `opts`: more options of the client)."""
    from mcp import Client

    async def main() -> Any:
        resolution = resolve_project(load_project(project / "bundlectl.yaml"))
        pipeline = Pipeline(resolution, AuditLog(resolution, via="serve"), confirm=None)
        async with anyio.create_task_group() as group:
            hub = Hub(pipeline, group, agents={agent})
            server = mcp_server(hub, mode, lambda ctx: agent)
            async with Client(server, mode=protocol, **opts) as client:
                result = await script(client)
            group.cancel_scope.cancel()
        return result

    return anyio.run(main)


@contextlib.contextmanager
def deprecated() -> Iterator[None]:
    """The SDK warns that `resources/subscribe` is gone from 2026-07-28; 2025-11-25 has it."""
    from mcp.shared.exceptions import MCPDeprecationWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        yield


def texts(result: Any) -> list[str]:
    return [block.text for block in result.content]


@pytest.fixture
def faults(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KITCHEN_STARTS", str(tmp_path / "starts.txt"))
    servers = "\n".join(
        f"""  {name}:
    command: {PY}
    args: ["{TEST_SERVERS / "misbehave.py"}", {mode}]
    env: {{KITCHEN_STARTS: "${{KITCHEN_STARTS}}"}}
    timeout: 2
    tools: [{{name: anything}}]"""
        for name, mode in [
            ("crash", "crash"),
            ("hang", "hang"),
            ("garbage", "garbage"),
            ("flood", "flood"),
            ("dies", "exit-after-init"),
        ]
    )
    write(
        project / "bundlectl.yaml",
        f"""version: 1
bundles: [basic]
servers:
  kitchen:
    command: {PY}
    args: ["{TEST_SERVERS / "kitchen.py"}"]
    env: {{KITCHEN_STARTS: "${{KITCHEN_STARTS}}"}}
{servers}
agents:
  bot:
    allow: ["*"]
    ask: [files.write_file]
    deny: [files.list_directory]
policy: {{default: deny}}
""",
    )
    (project / "hello.txt").write_text("hello\n")
    return project


def test_every_fault_is_a_result_and_the_gateway_goes_on(faults: Path) -> None:
    async def script(client: Any) -> dict[str, Any]:
        seen = {}
        for server in ("crash", "hang", "garbage", "flood", "dies"):
            began = time.monotonic()
            seen[server] = (await client.call_tool(f"{server}__anything", {}), began)
            seen[server] = (seen[server][0], time.monotonic() - began)
        seen["after"] = await client.call_tool("kitchen__echo", {"text": "fine"})
        return seen

    seen = serve_in_process(faults, "bot", script)
    for server, words in [
        ("crash", "closed the connection"),
        ("hang", "did not finish connecting within 2 s"),
        ("garbage", "broke the protocol"),
        ("flood", "did not finish connecting within 2 s"),
        ("dies", "closed the connection"),
    ]:
        result, took = seen[server]
        assert result.is_error, server
        assert words in texts(result)[0], (server, texts(result))
        assert took < 6, (server, took)  # the server's timeout (2 s) bounds a hang
    assert "raise servers.hang.timeout" in texts(seen["hang"][0])[0]
    assert texts(seen["after"]) == ["fine"]


def test_a_server_that_keeps_crashing_is_restarted_with_backoff(
    faults: Path, tmp_path: Path
) -> None:
    async def script(client: Any) -> list[str]:
        return [texts(await client.call_tool("crash__anything", {}))[0] for _ in range(3)]

    first, second, third = serve_in_process(faults, "bot", script)
    assert "closed the connection" in first and "closed the connection" in second
    # it never ran: the reason is the one its start gave, not "its log says why" (#22 item 15)
    assert "could not start 2 time(s) in a row; it is tried again in" in third
    assert "fatal: cannot open database /nonexistent.db" in third
    assert len(pids(tmp_path / "starts.txt")) == 2  # the third call did not start it again


def test_policy_decisions_in_process(faults: Path, isolated_home: Path) -> None:
    async def script(client: Any) -> dict[str, Any]:
        return {
            "names": [t.name for t in (await client.list_tools()).tools],
            "read": await client.call_tool("files__read_file", {"path": "hello.txt"}),
            "denied": await client.call_tool("files__list_directory", {"path": "."}),
            "write": await client.call_tool("files__write_file", {"path": "x", "content": "y"}),
            "dotted": await client.call_tool("files.read_file", {"path": "hello.txt"}),
        }

    seen = serve_in_process(faults, "bot", script)
    assert "files__write_file" in seen["names"] and "files__list_directory" not in seen["names"]
    assert texts(seen["read"]) == ["hello\n"] == texts(seen["dotted"])
    assert texts(seen["denied"]) == [
        "unknown tool 'files__list_directory'; tools/list shows the tools you can call"
    ]
    assert "cannot ask for it (no elicitation support)" in texts(seen["write"])[0]
    assert (faults / "hello.txt").exists() and not (faults / "x").exists()
    log = (isolated_home / "state" / "audit.jsonl").read_text().splitlines()
    outcomes = [(r["tool"], r["outcome"]) for r in map(json.loads, log)]
    assert ("list_directory", "denied") in outcomes and ("write_file", "denied") in outcomes


def test_search_mode_in_process(faults: Path) -> None:
    async def script(client: Any) -> dict[str, Any]:
        return {
            "listed": [t.name for t in (await client.list_tools()).tools],
            "found": await client.call_tool(
                "search_tools", {"query": "echo", "server": "kitchen", "detail": "full"}
            ),
            "bad": await client.call_tool("search_tools", {"detail": "everything"}),
            "typed": await client.call_tool("search_tools", {"limit": "ten"}),
            "call": await client.call_tool(
                "call_tool", {"name": "kitchen.echo", "arguments": {"text": "via search"}}
            ),
            "malformed": await client.call_tool("call_tool", {"name": "no-dot"}),
            "other": await client.call_tool("files__read_file", {"path": "hello.txt"}),
        }

    seen = serve_in_process(faults, "bot", script, mode="search")
    assert seen["listed"] == ["search_tools", "call_tool"]
    found = json.loads(texts(seen["found"])[0])
    assert found["tools"][0]["name"] == "kitchen.echo" and "input_schema" in found["tools"][0]
    assert "detail must be one of name, summary, full" in texts(seen["bad"])[0]
    assert "limit is an integer" in texts(seen["typed"])[0]
    assert texts(seen["call"]) == ["via search"]
    assert "call_tool takes name (server.tool" in texts(seen["malformed"])[0]
    assert seen["other"].is_error


def test_the_downstream_servers_stop_when_the_gateway_stops(faults: Path, tmp_path: Path) -> None:
    async def script(client: Any) -> None:
        await client.call_tool("kitchen__echo", {"text": "start it"})

    serve_in_process(faults, "bot", script)
    [pid] = pids(tmp_path / "starts.txt")
    assert gone(pid, within=5.0)


def test_a_restarted_server_is_subscribed_again(project: Path) -> None:
    """A 2025-11-25 server forgets subscriptions with its session: after it crashes and the
    gateway starts a new session, the client still hears about the resource it subscribed to."""
    import subprocess

    import mcp_types as types

    from tests.cli.test_exec import free_port, wait_for_port

    uri, heard = "kitchen://counter", []
    port = free_port()
    argv = [
        PY,
        str(TEST_SERVERS / "kitchen.py"),
        "--transport",
        "streamable-http",
        "--port",
        str(port),
    ]
    env = {**os.environ, "KITCHEN_LEGACY": "1"}

    def start() -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(port)
        return proc

    async def note(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            heard.append(str(message.params.uri))

    async def until_heard(count: int) -> None:
        with anyio.fail_after(15):
            while len(heard) < count:
                await anyio.sleep(0.05)

    processes = [start()]

    async def bot(client: Any) -> list[str]:
        with deprecated():
            await client.subscribe_resource(uri)
        await client.call_tool("kitchen__bump", {})
        await until_heard(1)
        first = processes[0]
        first.kill()
        await anyio.to_thread.run_sync(first.wait)
        processes.append(await anyio.to_thread.run_sync(start))
        with anyio.fail_after(15):  # the first call after the crash fails; a later one restarts
            while (await client.call_tool("kitchen__bump", {})).is_error:
                await anyio.sleep(0.2)
        await until_heard(2)
        return list(heard)

    write(
        project / "bundlectl.yaml",
        f"""version: 1
servers:
  kitchen: {{transport: streamable-http, url: 'http://127.0.0.1:{port}/mcp'}}
agents:
  bot: {{allow: [kitchen.bump]}}
policy: {{default: deny}}
""",
    )
    try:
        options = {"protocol": "legacy", "message_handler": note}
        assert serve_in_process(project, "bot", bot, **options) == [uri, uri]
    finally:
        for proc in processes:
            proc.kill()
            proc.wait(10)


@pytest.mark.parametrize("downstream", ["stdio", "legacy-http"])  # 2026-07-28 / 2025-11-25
@pytest.mark.parametrize("protocol", ["auto", "legacy"])  # the client: listen / subscribe
def test_resource_subscriptions_pass_through(project: Path, downstream: str, protocol: str) -> None:
    """A client subscribed to a resource hears that it changed, whichever protocol each side
    speaks, and stops hearing once it unsubscribes; an agent that may use nothing on the
    server cannot subscribe to its resources."""
    import mcp_types as types

    from tests.cli.test_exec import listening

    uri = "kitchen://counter"
    heard: list[str] = []

    async def note(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            heard.append(str(message.params.uri))

    async def bot(client: Any) -> list[str]:
        if protocol == "legacy":
            with deprecated():
                await client.subscribe_resource(uri)
            await client.call_tool("kitchen__bump", {})
            with anyio.fail_after(10):
                while not heard:
                    await anyio.sleep(0.02)
            with deprecated():
                await client.unsubscribe_resource(uri)
            await client.call_tool("kitchen__bump", {})  # not heard
            with deprecated():
                await client.subscribe_resource(uri)
            await client.call_tool("kitchen__bump", {})  # the marker: heard, after any leak
            with anyio.fail_after(10):
                while len(heard) < 2:
                    await anyio.sleep(0.02)
            with deprecated():
                await client.send_ping()  # what the gateway passed on before is in by now
            assert heard == [uri, uri], heard  # the first bump and the marker, not the second
            return heard[:1]
        async with client.listen(resource_subscriptions=[uri]) as events:
            assert events.honored.resource_subscriptions == [uri]
            await client.call_tool("kitchen__bump", {})
            with anyio.fail_after(10):
                async for event in events:
                    return [event.uri]
        raise AssertionError("the stream ended")

    async def stranger(client: Any) -> Any:
        if protocol == "legacy":
            with deprecated(), pytest.raises(Exception, match="unknown resource"):
                await client.subscribe_resource(uri)
            return "refused"
        async with client.listen(resource_subscriptions=[uri]) as events:
            return events.honored.resource_subscriptions or "refused"

    def check(spec: str) -> None:
        write(
            project / "bundlectl.yaml",
            f"""version: 1
servers:
  kitchen: {spec}
agents:
  bot: {{allow: [kitchen.bump]}}
  stranger: {{allow: [kitchen.nothing_like_it]}}
policy: {{default: deny}}
""",
        )
        options = {"protocol": protocol, "message_handler": note}
        assert serve_in_process(project, "bot", bot, **options) == [uri]
        assert serve_in_process(project, "stranger", stranger, **options) == "refused"

    kitchen = [PY, str(TEST_SERVERS / "kitchen.py")]
    if downstream == "stdio":
        check(f"{{command: {PY}, args: ['{kitchen[1]}']}}")
        return
    with listening([*kitchen, "--transport", "streamable-http"], {"KITCHEN_LEGACY": "1"}) as port:
        check(f"{{transport: streamable-http, url: 'http://127.0.0.1:{port}/mcp'}}")


@pytest.mark.parametrize("level", [None, "error"])
def test_log_level_and_list_changes_are_declared_and_honoured(
    project: Path, level: str | None
) -> None:
    # `logging/setLevel` answered -32601 while downstream logs were forwarded, and
    # tools.listChanged was declared false while the notification was sent.
    from tests.cli.test_exec import listening

    kitchen = [PY, str(TEST_SERVERS / "kitchen.py"), "--transport", "streamable-http"]
    with listening(kitchen, {"KITCHEN_LEGACY": "1"}) as port:
        write(
            project / "bundlectl.yaml",
            f"""
            version: 1
            servers:
              kitchen: {{transport: streamable-http, url: "http://127.0.0.1:{port}/mcp"}}
            agents:
              bot: {{allow: ["kitchen.*"]}}
            policy: {{default: deny}}
            """,
        )
        logs: list[str] = []

        async def log(params: Any) -> None:
            logs.append(str(params.data))

        async def script(client: Any) -> Any:
            capabilities = client.server_capabilities
            if level is not None:
                with deprecated():  # logging/setLevel is gone from 2026-07-28; 2025-11-25 has it
                    await client.set_logging_level(level)
            await client.call_tool("kitchen__whisper", {"tag": "bot", "pause": 0})
            return capabilities

        capabilities = serve_in_process(
            project, "bot", script, protocol="legacy", logging_callback=log
        )
    assert capabilities.logging is not None
    assert capabilities.tools.list_changed and capabilities.prompts.list_changed
    assert capabilities.resources.list_changed
    if level is None:
        assert logs == ["log of bot", "second log of bot"]
    else:
        assert logs == []  # info is below the level the client asked for


def _named(project: Path, names: str, second: bool = False) -> None:
    """kitchen (and, with `second`, a copy under another name) and the files server."""
    copy = (
        f"""
          pantry:
            command: {PY}
            args: ["{TEST_SERVERS / "kitchen.py"}"]
            tools: [{{name: echo}}]"""
        if second
        else ""
    )
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        bundles: [basic]
        servers:
          kitchen:
            command: {PY}
            args: ["{TEST_SERVERS / "kitchen.py"}"]
            tools: [{{name: echo}}, {{name: add}}]{copy}
        agents:
          cook: {{allow: [kitchen.echo, files.read_file]}}
        policy: {{default: deny}}
        gateway: {{names: {names}}}
        """,
    )


def test_bare_names_are_the_servers_own_and_reach_their_tools(project: Path, run: Any) -> None:
    _named(project, "bare")
    (project / "note.txt").write_text("hi\n")

    async def script(client: Any) -> Any:
        listed = sorted(t.name for t in (await client.list_tools()).tools)
        echoed = await client.call_tool("echo", {"text": "bare"})
        read = await client.call_tool("read_file", {"path": "note.txt"})
        prefixed = await client.call_tool("kitchen__echo", {"text": "x"})
        return listed, texts(echoed), texts(read), prefixed

    listed, echoed, read, prefixed = serve_in_process(project, "cook", script)
    assert listed == ["echo", "read_file"]
    assert echoed == ["bare"] and read == ["hi\n"]
    assert prefixed.is_error and "unknown tool" in texts(prefixed)[0]
    shown = run("tools", "--agent", "cook", "--names", "gateway", "--detail", "name")
    assert shown.lines == ["read_file  (files.read_file)", "echo  (kitchen.echo)"]


def test_bare_names_two_servers_share_are_refused_by_serve_and_lint(
    project: Path, run: Any
) -> None:
    _named(project, "bare", second=True)
    refused = run("serve", "--agent", "cook")
    assert refused.code == 2
    assert refused.err_lines[0] == (
        "error: gateway names clash with names: bare: 'echo' would be both "
        "kitchen.echo and pantry.echo"
    ), refused.err
    # Search mode names tools server.tool: nothing clashes there.
    assert run("serve", "--agent", "cook", "--mode", "search").code == 0
    linted = run("lint", "--select", "BCL111")
    assert linted.code == 1
    assert linted.lines[0].startswith("bundlectl.yaml:15:18:"), linted.out
    assert "BCL111" in linted.lines[0] and "kitchen.echo and pantry.echo" in linted.lines[0]
    # Prefixed names are unique by construction: the same project serves with --names prefixed.
    _named(project, "prefixed", second=True)
    assert run("lint", "--select", "BCL111").code == 0

    async def script(client: Any) -> list[str]:
        return sorted(t.name for t in (await client.list_tools()).tools)

    assert serve_in_process(project, "cook", script) == ["files__read_file", "kitchen__echo"]


PANTRY = f"""
version: 1
servers:
  pantry: {{command: {PY}, args: ["{TEST_SERVERS / "pantry.py"}"]}}
agents:
  cook: {{allow: ["pantry.*"]}}
  guest: {{allow: [other.thing]}}
policy: {{default: deny}}
privacy: {{tokenize: [email]}}
"""


def test_completions_pass_through_for_prompts_and_templates_of_servers_in_use(
    project: Path,
) -> None:
    write(project / "bundlectl.yaml", PANTRY)
    from mcp.shared.exceptions import MCPError
    from mcp_types import PromptReference, ResourceTemplateReference

    async def cook(client: Any) -> Any:
        caps = client.server_capabilities
        dish = await client.complete(
            PromptReference(name="pantry__recipe"), {"name": "dish", "value": "s"}
        )
        item = await client.complete(
            ResourceTemplateReference(uri="pantry://shelf/{item}"), {"name": "item", "value": "f"}
        )
        mail = await client.complete(
            PromptReference(name="pantry__recipe"), {"name": "dish", "value": "@"}
        )
        return caps, dish.completion.values, item.completion.values, mail.completion.values

    caps, dishes, items, mail = serve_in_process(project, "cook", cook, protocol="legacy")
    assert caps.completions is not None
    assert dishes == ["soup", "salad", "sorbet", "stew"] and items == ["flour", "figs", "fennel"]
    assert mail == ["[EMAIL_1]"]

    async def guest(client: Any) -> str:  # a server the agent may not use: nothing to complete
        with pytest.raises(MCPError) as refused:
            await client.complete(
                PromptReference(name="pantry__recipe"), {"name": "dish", "value": "s"}
            )
        return refused.value.error.message

    assert "unknown prompt 'pantry__recipe'" in serve_in_process(project, "guest", guest)


def test_listings_of_resources_and_prompts_are_tokenized_as_reads_are(project: Path) -> None:
    """With `privacy:`, resources/list and prompts/list showed names and descriptions in clear
    while resources/read of the same URI was tokenized."""
    write(project / "bundlectl.yaml", PANTRY)

    async def cook(client: Any) -> Any:
        resources = (await client.list_resources()).resources
        prompts = (await client.list_prompts()).prompts
        listed = [r.model_dump(mode="json") for r in resources]
        listed += [p.model_dump(mode="json") for p in prompts]
        supplier = next(r for r in resources if "suppliers" in str(r.uri))
        read = await client.read_resource(str(supplier.uri))
        return json.dumps(listed), str(supplier.uri), read.contents[0].text

    listed, uri, text = serve_in_process(project, "cook", cook, protocol="legacy")
    assert "ann@example.com" not in listed and "[EMAIL_1]" in listed
    assert uri == "pantry://suppliers/[EMAIL_1]"
    assert text == "figs, from [EMAIL_1]"  # read by its real URI, shown tokenized


def _consenting(project: Path, timeout: int = 60, *, legacy: bool = False) -> None:
    """kitchen over stdio: a 2026-07-28 server, whose `consent` tool asks its client (its
    questions handed on as it asked them, `relayed.py`); `legacy`: a 2025-11-25 server, which
    asks during the call (the call held across the client's retries, `input_rounds.py`)."""
    env = ', env: {KITCHEN_LEGACY: "1"}' if legacy else ""
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          kitchen:
            {{command: {PY}, args: ["{TEST_SERVERS / "kitchen.py"}"], timeout: {timeout}{env}}}
        agents:
          bot: {{allow: ["kitchen.*"]}}
        policy: {{default: deny}}
        """,
    )


def test_a_2026_client_answers_its_servers_question_by_retrying(project: Path) -> None:
    # Both sides on 2026-07-28: the server's question comes back to the client as an
    # input-required result, and the SDK client answers it by retrying its call.
    import mcp_types as types

    _consenting(project)
    asked: list[str] = []

    async def elicit(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"ok": True})

    async def script(client: Any) -> Any:
        return await client.call_tool("kitchen__consent", {"tag": "bot"})

    result = serve_in_process(project, "bot", script, elicitation_callback=elicit)
    assert texts(result) == ["bot: accept"] and asked == ["consent of bot"]


def test_a_held_call_takes_its_own_answers_and_ends_when_none_come(project: Path) -> None:
    """A 2025-11-25 server's call held for a 2026-07-28 client: the retry is bound to the
    call's arguments; a question nobody answers ends with the server's timeout (as a dismissed
    elicitation), and the result waits for the retry."""
    import mcp_types as types

    # The server's timeout also bounds its start: 6 s leaves a loaded machine room to start
    # it (3 s did not, in CI).
    _consenting(project, timeout=6, legacy=True)

    async def elicit(context: Any, params: Any) -> types.ElicitResult:
        raise AssertionError("the script answers by hand")

    async def script(client: Any) -> list[Any]:
        first = await client.session.call_tool(
            "kitchen__consent", {"tag": "bot"}, allow_input_required=True
        )
        assert isinstance(first, types.InputRequiredResult), first
        (name,) = first.input_requests
        yes = {name: types.ElicitResult(action="accept", content={"ok": True})}
        state = first.request_state
        from mcp.shared.exceptions import MCPError

        try:  # the answers for a call with other arguments: not this call's
            other = await client.session.call_tool(
                "kitchen__consent", {"tag": "eve"}, input_responses=yes, request_state=state
            )
        except MCPError as exc:
            other = exc.error.message
        # Nobody answers: the server's question times out (6 s) and the held call ends,
        # which its audit record says; only then come the answers.
        log = auditfile.log_path()
        with anyio.fail_after(60):
            while not any(
                '"outcome": "pending"' not in line and '"tool": "consent"' in line
                for line in (log.read_text().splitlines() if log.exists() else [])
            ):
                await anyio.sleep(0.05)
        late = await client.session.call_tool(
            "kitchen__consent", {"tag": "bot"}, input_responses=yes, request_state=state
        )
        again = await client.session.call_tool(  # the same answers once more
            "kitchen__consent", {"tag": "bot"}, input_responses=yes, request_state=state
        )
        return [other, late, again]

    other, late, again = serve_in_process(project, "bot", script, elicitation_callback=elicit)
    assert again.is_error and "is no longer waiting" in texts(again)[0]
    assert other == "Invalid or expired requestState"
    assert texts(late) == ["bot: cancel"]


def test_a_server_that_crashes_on_every_call_backs_off_on_the_sdk_path_too(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Crashes were counted (with a growing backoff) on the express lane only: the SDK path
    reset the count after every call that came back with the crash as its outcome, so a server
    that crashes on every call was started again at once, forever."""
    starts = tmp_path / "starts.txt"
    monkeypatch.setenv("KITCHEN_STARTS", str(starts))
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          shaky:
            command: {PY}
            args: ["{TEST_SERVERS / "misbehave.py"}", unreliable]
            env: {{KITCHEN_STARTS: "${{KITCHEN_STARTS}}"}}
        agents:
          bot: {{allow: ["shaky.*"]}}
        policy: {{default: deny}}
        """,
    )

    async def script(client: Any) -> list[str]:
        found = []
        for _ in range(3):
            found.append(texts(await client.call_tool("shaky__die", {}))[0])
        return found

    first, second, third = serve_in_process(project, "bot", script)
    assert "dying on purpose" in first and "dying on purpose" in second
    assert "crashed 2 time(s) in a row; it is started again in" in third
    assert len(starts.read_text().split()) == 2  # the third call did not start it again
