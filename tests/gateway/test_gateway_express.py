"""The gateway's express lane (`gateway/stdio_calls.py`): warm calls of `serve`'s stdio front door
relayed past the SDK. Each test compares with the SDK path, which search mode's `call_tool`
always takes (same pipeline, same downstream servers), or checks what the SDK path is known
to give."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp_types.version import SUPPORTED_PROTOCOL_VERSIONS

from tests.conftest import (
    INITIALIZE,
    TEST_SERVERS,
    audit_records,
    over_the_pipes,
    write,
)
from tests.gateway.test_gateway import PY, connected, read_lines, serve_on_pipes, texts


@pytest.fixture
def lane_project(project: Path) -> Path:
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          kitchen:
            command: {PY}
            args: ["{TEST_SERVERS / "kitchen.py"}"]
          flaky:
            command: {PY}
            args: ["{TEST_SERVERS / "misbehave.py"}", unreliable]
            timeout: 2
        agents:
          reader:
            allow: ["kitchen.*", "flaky.*"]
        policy: {{default: deny}}
        """,
    )
    return project


def params(project: Path, home: Path, mode: str = "direct") -> Any:
    from mcp import StdioServerParameters

    return StdioServerParameters(
        command=PY,
        args=["-m", "bundlectl", "serve", "--agent", "reader", "--mode", mode],
        cwd=str(project),
        env={**os.environ, "BUNDLECTL_HOME": str(home)},
    )


CALLS: list[tuple[str, dict[str, Any]]] = [
    ("kitchen.echo", {"text": "ünïcode", "times": 2}),
    ("kitchen.add", {"a": 2, "b": 40}),
    ("kitchen.media", {}),
    ("kitchen.people", {}),
    ("kitchen.tags", {"items": ["a"], "meta": {"k": [1, None]}}),
    ("kitchen.fail", {"message": "as planned"}),
    ("kitchen.echo", {"text": 3}),  # invalid: refused before the server
]


def run_calls(project: Path, home: Path, serve_mode: str, **options: Any) -> dict[str, Any]:
    """The answers to CALLS, after a warm-up call; in search mode through `call_tool`."""

    async def session() -> dict[str, Any]:
        async with connected(params(project, home, serve_mode), **options) as client:

            async def call(name: str, arguments: dict[str, Any]) -> Any:
                if serve_mode == "search":
                    return await client.call_tool(
                        "call_tool", {"name": name, "arguments": arguments}
                    )
                return await client.call_tool(name.replace(".", "__"), arguments)

            ids = [texts(await call("kitchen.request_id", {}))[0] for _ in range(2)]
            answers = [await call(name, arguments) for name, arguments in CALLS]
            return {"ids": ids, "answers": [a.model_dump(mode="json") for a in answers]}

    return anyio.run(session)


@pytest.mark.parametrize("protocol", ["auto", "legacy"])
def test_warm_calls_at_the_express_door_answer_as_the_sdk_path(
    lane_project: Path, isolated_home: Path, protocol: str
) -> None:
    express = run_calls(lane_project, isolated_home, "direct", mode=protocol)
    sdk = run_calls(lane_project, isolated_home, "search", mode=protocol)
    # Whichever door a call came in by, it was made over the server's pipes (one sender).
    assert all(map(over_the_pipes, express["ids"] + sdk["ids"])), (express["ids"], sdk["ids"])
    assert express["answers"] == sdk["answers"]
    answers = express["answers"]
    assert answers[1]["structured_content"] == {"sum": 42}
    assert answers[5]["is_error"] and answers[6]["is_error"]
    assert "do not satisfy the input schema of kitchen.echo" in answers[6]["content"][0]["text"]
    records = audit_records(isolated_home / "state" / "audit.jsonl")
    outcomes = [r["outcome"] for r in records if r["tool"] != "request_id"]
    assert outcomes == ["ok"] * 5 + ["tool-error", "invalid-call"] + ["ok"] * 5 + [
        "tool-error",
        "invalid-call",
    ]
    assert {r["via"] for r in records} == {"serve"}
    assert len({r["policy_digest"] for r in records}) == 1


def test_a_servers_failures_on_the_lane_are_results_the_model_can_act_on(
    lane_project: Path, isolated_home: Path
) -> None:
    async def session(mode: str) -> dict[str, Any]:
        async with connected(params(lane_project, isolated_home, mode)) as client:

            async def call(tool: str) -> Any:
                if mode == "search":
                    return await client.call_tool("call_tool", {"name": f"flaky.{tool}"})
                return await client.call_tool(f"flaky__{tool}", {})

            seen: dict[str, Any] = {"ids": [texts(await call("ping"))[0] for _ in range(2)]}
            for tool in (
                "refuse",
                "ping",
                "shape",
                "ping",
                "garble",
                "ping",
                "die",
                "ping",
                "hang",
            ):
                began = time.monotonic()
                result = await call(tool)
                seen[tool] = (result.is_error, texts(result)[0], time.monotonic() - began)
            return seen

    express = anyio.run(session, "direct")
    sdk = anyio.run(session, "search")
    assert over_the_pipes(express["ids"][1]) and over_the_pipes(sdk["ids"][1])
    for tool in ("refuse", "shape", "garble", "die", "hang"):
        assert express[tool][:2] == sdk[tool][:2], tool
    assert express["shape"][1].startswith(
        "server 'flaky' broke the protocol: Invalid structured content returned by tool shape"
    )
    assert "returned an error: no can do (code -32000)" in express["refuse"][1]
    assert "its stdout has a line that is not JSON-RPC" in express["garble"][1]
    assert "closed the connection" in express["die"][1]
    assert "  | dying on purpose" in express["die"][1]  # the last words on its stderr
    assert "did not answer in time" in express["hang"][1] and express["hang"][2] < 5
    # After each broken connection the server was started again and answers.
    assert express["ping"][0] is False


def test_a_result_that_breaks_the_protocol_is_refused_on_the_lane(
    lane_project: Path, isolated_home: Path
) -> None:
    async def session() -> Any:
        async with connected(params(lane_project, isolated_home)) as client:
            await client.call_tool("flaky__ping", {})
            return await client.call_tool("flaky__badresult", {})

    result = anyio.run(session)
    assert result.is_error
    # worded as the SDK's client words it (the door's calls go over the pipes as the SDK path's)
    assert texts(result)[0].startswith(
        "server 'flaky' broke the protocol: 1 validation error for CallToolResult"
    )


def test_progress_of_concurrent_calls_reaches_each_caller_and_a_busy_server_waits(
    lane_project: Path, isolated_home: Path
) -> None:
    """Two calls at once to a server that takes one at a time: one takes the lane, the other
    waits its turn on the SDK path; each caller hears its own call's progress."""
    progress: dict[int, list[float]] = {0: [], 1: []}

    async def session() -> list[Any]:
        async with connected(params(lane_project, isolated_home)) as client:
            await client.call_tool("kitchen__echo", {"text": "warm"})
            results: list[Any] = [None, None]

            async def one(index: int, seconds: float) -> None:
                async def report(done: float, total: float | None, message: str | None) -> None:
                    progress[index].append(done)

                results[index] = await client.call_tool(
                    "kitchen__sleep", {"seconds": seconds}, progress_callback=report
                )

            began = time.monotonic()
            async with anyio.create_task_group() as group:
                group.start_soon(one, 0, 0.5)
                group.start_soon(one, 1, 0.3)
            return [*results, time.monotonic() - began]

    first, second, took = anyio.run(session)
    assert texts(first) == ["slept 0.5"] and texts(second) == ["slept 0.3"]
    assert took >= 0.75, took  # one after the other
    assert progress[0] == [0, 1, 2, 3, 4] and progress[1] == [0, 1], progress


def test_an_edit_that_denies_a_tool_applies_to_the_next_warm_call(
    lane_project: Path, isolated_home: Path
) -> None:
    config = lane_project / "bundlectl.yaml"

    async def session() -> list[Any]:
        async with connected(params(lane_project, isolated_home)) as client:
            first = [await client.call_tool("kitchen__request_id", {}) for _ in range(2)]
            stamp = config.stat().st_mtime_ns
            config.write_text(config.read_text().replace('"kitchen.*"', "kitchen.echo"))
            # a new modification time, whatever the file system's precision: set, not waited for
            os.utime(config, ns=(stamp + 2_000_000_000, stamp + 2_000_000_000))
            denied = await client.call_tool("kitchen__request_id", {})
            allowed = await client.call_tool("kitchen__echo", {"text": "still"})
            return [*first, denied, allowed]

    _, second, denied, allowed = anyio.run(session)
    assert over_the_pipes(texts(second)[0])
    assert denied.is_error and "unknown tool 'kitchen__request_id'" in texts(denied)[0]
    assert texts(allowed) == ["still"]


PLAIN = [
    {"content": []},
    {"content": [{"type": "text", "text": "ünï\ncode"}], "isError": False},
    {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": ""}], "isError": True},
    {"content": [{"type": "text", "text": "{}"}], "structuredContent": {"n": [1, None]}},
    {"content": [], "resultType": "complete"},
    {"content": [], "_meta": {"k": {"v": None}}},
    {"content": [], "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "s", "version": "1"}}},
]
NOT_PLAIN = [
    {"content": [{"type": "text", "text": "a", "annotations": {"priority": 1}}]},
    {"content": [{"type": "image", "data": "AA==", "mimeType": "image/png"}]},
    {"content": [{"type": "text", "text": "a"}], "_meta": {"k": None}},
    {"content": [{"type": "text", "text": "a"}], "_meta": []},
    {"content": [{"type": "text", "text": "a"}], "isError": None},
    {"content": [{"type": "text", "text": "a"}], "structuredContent": None},
    {"content": [{"type": "text", "text": "a"}], "extra": 1},
    {"content": [], "isError": 1},
]


@pytest.mark.parametrize("version", SUPPORTED_PROTOCOL_VERSIONS)
def test_the_lanes_shortcut_for_plain_results_gives_what_the_protocols_types_give(
    version: str,
) -> None:
    """`plain` skips the protocol's types for text-only results; whatever it answers is what
    the types give, and it leaves everything else (and what the version lacks) to them."""
    from bundlectl.gateway.results_out import _typed, plain, shaped

    for result in PLAIN:  # a `resultType` of complete, which every session's result carries,
        fast = plain(result, version)  # is dropped by an older protocol's types, and by `plain`
        assert fast is not None, result
        assert json.loads(fast) == json.loads(_typed(result, version)), result
    for result in NOT_PLAIN:  # the types take it, or refuse it
        assert plain(result, version) is None, result
        try:
            assert shaped(result, version) == _typed(result, version)
        except ValueError:
            assert "_meta" in result
    # What a raw-pipe session makes of a server's all-text answer is written directly too.
    from bundlectl.mcpio.plain import result_of

    made = result_of({"content": [{"type": "text", "text": "t"}]}, {"name": "s", "version": "1"})
    assert plain(made.data, version) is not None
    for kind in ("input_required", "task", "incomplete"):  # never answered as if complete
        assert plain({"content": [], "resultType": kind}, version) is None
    broken = {"content": [{"type": "text", "text": "\ud800"}]}  # a lone surrogate
    with pytest.raises(ValueError, match="surrogate"):
        plain(broken, version)
    with pytest.raises(ValueError, match="surrogate"):
        _typed(broken, version)


def test_the_clients_trace_context_reaches_the_server_on_both_paths(
    lane_project: Path, isolated_home: Path
) -> None:
    """#41: a call's `_meta.traceparent` is passed on to the server — by the SDK's client on
    the first (cold) call, by the lane itself on the warm ones, which bypass the SDK."""
    sent = [f"00-{n:032x}-00f067aa0ba902b7-01" for n in (1, 2, 3)]

    async def session() -> list[str]:
        async with connected(params(lane_project, isolated_home)) as client:
            got = []
            for traceparent in sent:
                answer = await client.call_tool(
                    "kitchen__traceparent", {}, meta={"traceparent": traceparent}
                )
                got.append(texts(answer)[0])
            got.append(texts(await client.call_tool("kitchen__traceparent", {}))[0])
            got.append(texts(await client.call_tool("kitchen__request_id", {}))[0])
            return got

    *received, untraced, lane_id = anyio.run(session)
    assert over_the_pipes(lane_id)
    assert [r.split("-")[1] for r in received] == [t.split("-")[1] for t in sent]
    assert untraced == ""


def test_progress_token_zero_is_a_token_on_both_paths(
    lane_project: Path, isolated_home: Path
) -> None:
    """JSON-RPC allows 0 as a progress token: the first call (the SDK path starts the server)
    and the next (warm: the lane) each get their progress under token 0, then their answer."""
    proc = serve_on_pipes(lane_project)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write((json.dumps(INITIALIZE) + "\n").encode())
        proc.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        proc.stdin.flush()
        read_lines(proc.stdout, 1)
        for number in (2, 3):
            call = {
                "name": "kitchen__sleep",
                "arguments": {"seconds": 0.3},
                "_meta": {"progressToken": 0},
            }
            message = {"jsonrpc": "2.0", "id": number, "method": "tools/call", "params": call}
            proc.stdin.write((json.dumps(message) + "\n").encode())
            proc.stdin.flush()
            seen = [json.loads(line) for line in read_lines(proc.stdout, 3)]
            *progress, answer = seen  # two reports (every 0.1 s of 0.3 s), then the answer
            assert answer["id"] == number and answer["result"]["content"][0]["text"] == "slept 0.3"
            assert [p["params"]["progressToken"] for p in progress] == [0, 0], seen
            assert [p["params"]["progress"] for p in progress] == [0, 1], seen
    finally:
        proc.communicate(timeout=30)  # closes its stdin: the gateway ends


def test_a_client_that_leaves_during_a_warm_call_ends_it_as_interrupted(
    lane_project: Path, isolated_home: Path
) -> None:
    """The client closes the pipes while its warm call (the express door's own task) runs: the
    gateway ends at once, and the call's record says `interrupted`, not a lone `pending`."""
    proc = serve_on_pipes(lane_project)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write((json.dumps(INITIALIZE) + "\n").encode())
    proc.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
    for number, seconds in ((2, 0), (3, 60)):  # the first starts the server; the second waits
        call = {"name": "kitchen__sleep", "arguments": {"seconds": seconds}}
        message = {"jsonrpc": "2.0", "id": number, "method": "tools/call", "params": call}
        proc.stdin.write((json.dumps(message) + "\n").encode())
        proc.stdin.flush()
        if number == 2:
            assert b"slept 0" in read_lines(proc.stdout, 2)[1]  # initialize's answer, then its
    log = isolated_home / "state" / "audit.jsonl"
    deadline = time.monotonic() + 30
    while log.read_text().count('"pending"') < 2:  # the second call is with its server
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
    began = time.monotonic()
    proc.communicate(timeout=30)  # closes its stdin
    assert time.monotonic() - began < 10
    records = audit_records(log)  # every `pending` record completed
    assert [r["outcome"] for r in records if r["tool"] == "sleep"] == ["ok", "interrupted"]


def test_a_warm_call_whose_server_asks_first_is_answered_by_the_client_at_the_express_door(
    lane_project: Path, isolated_home: Path
) -> None:
    """A warm call whose 2026-07-28 server answers with a question (input required), from an
    older client at the express door: the server's session asks it again through the SDK's
    client, which asks the door's client; one record per call, each with its outcome
    (`audit_records` checks that every `pending` one has it)."""
    import mcp_types as types

    asked: list[str] = []

    async def elicit(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"ok": True})

    async def session() -> list[Any]:
        options = {"elicitation_callback": elicit, "mode": "legacy"}
        async with connected(params(lane_project, isolated_home), **options) as client:
            await client.call_tool("kitchen__echo", {"text": "warm"})
            return [await client.call_tool("kitchen__consent", {"tag": "bot"}) for _ in range(2)]

    results = anyio.run(session)
    assert [texts(r) for r in results] == [["bot: accept"]] * 2
    assert asked == ["consent of bot"] * 2
    records = audit_records(isolated_home / "state" / "audit.jsonl")
    assert [r["outcome"] for r in records if r["tool"] == "consent"] == ["ok", "ok"]


@pytest.mark.parametrize("protocol", ["auto", "legacy"])
def test_a_log_the_server_wrote_before_its_answer_reaches_the_client_first(
    lane_project: Path, isolated_home: Path, protocol: str
) -> None:
    """`flaky.chatty` writes a log message and its answer in one write: on the SDK path (the
    first call) and on the lane (the warm ones) the client has the log when the call returns."""
    from mcp_types import LOG_LEVEL_META_KEY

    async def session() -> list[list[str]]:
        heard: list[str] = []
        seen = []

        async def log(params: Any) -> None:
            heard.append(str(params.data))

        options = {"logging_callback": log, "mode": protocol}
        async with connected(params(lane_project, isolated_home), **options) as client:
            for _ in range(3):
                heard.clear()
                meta = {LOG_LEVEL_META_KEY: "info"}  # (a 2026-07-28 client asks per request)
                await client.call_tool("flaky__chatty", {}, meta=meta)
                said = list(heard)  # what had come when the call returned
                got = texts(await client.call_tool("flaky__ping", {}))[0]
                seen.append([*said, "pipes" if over_the_pipes(got) else "sdk"])
        return seen

    seen = anyio.run(session)
    assert [s[:-1] for s in seen] == [["said before the answer"]] * 3, seen
    assert seen[-1][-1] == "pipes", seen  # warm calls went over the server's pipes
