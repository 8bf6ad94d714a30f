"""bundlectl as a client of a server that speaks the tasks extension (SEP-2663; `mcpio/tasks.py`):
its connections declare the extension, so a tool the server runs only as a task
(`tests/servers/tasks_server.py`) is called — by `exec` and through `serve` — and its task
followed to the result; a failed task is the server's error; a call that runs out of time
cancels the server's task (a server's task is the call: bounded by its `timeout`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.cli.test_exec import on_terminal
from tests.conftest import TEST_SERVERS, Run, audit_records, write
from tests.gateway.test_gateway_http import client, gateway, texts

PY = sys.executable


def _project(project: Path, tmp_path: Path, timeout: int = 60) -> Path:
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          jobs:
            command: {PY}
            args: ["{TEST_SERVERS / "tasks_server.py"}"]
            env: {{TASKS_LOG: "{tmp_path / "tasks.log"}"}}
            sandbox: {{write: ["{tmp_path}"]}}
            timeout: {timeout}  # a call's, its task's whole life included
        agents:
          worker: {{allow: ["jobs.*"]}}
        policy: {{default: deny}}
        """,
    )
    return project


def test_exec_follows_a_servers_task_and_cancels_it_when_its_time_is_up(
    project: Path, tmp_path: Path, run: Run, isolated_home: Path
) -> None:
    """`exec`'s SDK-free session is refused the task-only tool (-32021 naming the extension,
    nothing ran); the SDK's client makes the call, follows the task, and when the server's
    `timeout` is up cancels it on the server (its result: `serve`'s test below)."""
    _project(project, tmp_path, timeout=1)
    late = run("exec", "-a", "worker", "jobs.long_job", "seconds=60")
    assert late.code == 6 and "did not answer in time" in late.err, late.err
    assert (tmp_path / "tasks.log").read_text().startswith("cancelled ")
    outcomes = [r["outcome"] for r in audit_records(isolated_home / "state" / "audit.jsonl")]
    assert outcomes == ["timeout"], outcomes


def test_serve_calls_a_servers_task_only_tool_for_any_client(
    project: Path, tmp_path: Path, isolated_home: Path
) -> None:
    """Through the gateway, whose session with the server is a raw pipe first: the tool the
    server runs only as a task is made on the SDK's client, which follows the task."""
    _project(project, tmp_path)

    async def script(url: str) -> list[Any]:
        async with client(url) as c:
            return [
                await c.call_tool("jobs__long_job", {"seconds": 0.2}),
                await c.call_tool("jobs__long_job", {"seconds": 0.1}),
                await c.call_tool("jobs__quick", {}),
                await c.call_tool("jobs__failing_job", {}),
            ]

    with gateway(project, "--agent", "worker", home=isolated_home) as (url, _):
        results = anyio.run(script, url)
    assert [texts(r) for r in results[:3]] == [["worked 0.2 s"], ["worked 0.1 s"], ["quick"]]
    failed = results[3]  # a task that failed: the server's error, as the model reads it
    assert failed.is_error and "returned an error: the job broke (code -32603)" in texts(failed)[0]


@pytest.mark.parametrize(("mode", "version"), [("auto", "2026-07-28"), ("legacy", "2025-11-25")])
def test_a_servers_task_that_asks_is_handed_on_to_the_client_that_answers(
    project: Path, tmp_path: Path, isolated_home: Path, mode: str, version: str
) -> None:
    """A server's task that asks its client something (`input_required`): the gateway hands
    the question to a 2026-07-28 client as an input-required round, and to a 2025-11-25 one as
    a request on its session (as it hands on a server's own question); the client's answer
    goes to the task (`tasks/update`), whose result is the call's."""
    _project(project, tmp_path)
    asked: list[str] = []

    async def confirm(context: Any, params: Any) -> Any:
        import mcp_types as types

        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"ok": True})

    async def script(url: str) -> Any:
        async with client(url, elicitation_callback=confirm, mode=mode) as c:
            assert c.protocol_version == version
            return await c.call_tool("jobs__ask_job", {"seconds": 0.1})

    with gateway(project, "--agent", "worker", home=isolated_home) as (url, _):
        result = anyio.run(script, url)
    assert asked == ["Go ahead?"]
    assert texts(result) == ["confirmed: {'ok': True}"], texts(result)


def test_exec_answers_a_servers_task_that_asks_on_the_terminal(
    project: Path, tmp_path: Path, run: Run, isolated_home: Path
) -> None:
    """A server's task that asks its client something (`input_required`): `exec` asks the
    person at the terminal as it asks a server's own question, and the answer goes to the task
    (`tasks/update`), whose result is the call's. Without a terminal the call fails, saying
    why, and the server's task is cancelled rather than left waiting."""
    _project(project, tmp_path)
    script = [(b"ok (boolean): ", "true"), (b"send this answer? [y/N]", "y")]
    status, seen = on_terminal(project, ["exec", "-a", "worker", "jobs.ask_job"], script)
    shown = seen.decode(errors="replace")
    assert "the server asks: Go ahead?" in shown, shown
    assert (status, shown.splitlines()[-1].strip()) == (0, "confirmed: {'ok': True}"), shown
    unanswered = run("exec", "-a", "worker", "jobs.ask_job")
    assert unanswered.code == 5, unanswered.err
    assert "no one is at a terminal to answer" in unanswered.err, unanswered.err
    assert (tmp_path / "tasks.log").read_text().startswith("cancelled "), unanswered.err
    odd = run("exec", "-a", "worker", "jobs.ask_job", "odd=true")  # questions not an object
    assert odd.code == 5 and "inputRequests is no object" in odd.err, odd.err
    assert "Traceback" not in odd.err
    assert (tmp_path / "tasks.log").read_text().count("cancelled ") == 2, odd.err
