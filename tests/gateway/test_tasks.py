"""Held calls as tasks (#58, `gateway/tasks.py`): a 2026-07-28 client that declares the tasks
extension (the MCP Python SDK's `Client` with `tasks_client.Tasks`) is given a task for a call
held for an approver or slower than half a second, polls it on any replica, and gets the call's own
result, who denied it, or `cancelled` — against `serve --transport streamable-http`, real
servers behind it, real `redis-server` between replicas and Chromium on the approvers' page."""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.calls.test_approvals import pending
from tests.conftest import TEST_SERVERS, Run, audit_records, write
from tests.gateway.tasks_client import TaskFailed, Tasks, cancel, code_of, get
from tests.gateway.test_approvals_page import APPROVER, browser, until
from tests.gateway.test_gateway_http import client, gateway
from tests.gateway.test_gateway_identity import Issuer, issuer
from tests.gateway.test_relayed_rounds import conformance_project

__all__ = ["browser", "issuer"]  # fixtures
PY = sys.executable
WRITER = "writer-" + "w" * 30
READER = "reader-" + "r" * 30
CONFIG = """
version: 1
bundles: [basic]
servers:
  kitchen: {{command: {py}, args: ["{kitchen}"]}}
agents:
  writer:
    token: "${{WRITER_TOKEN}}"
    allow: [files.read_file, kitchen.sleep, kitchen.fail]
    ask: [files.write_file]
  reader:
    token: "${{READER_TOKEN}}"
    allow: [files.read_file]
policy:
  default: deny
  approvals: {{ttl: 10m}}
{state}
"""


@pytest.fixture
def tasks_project(project: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], Path]:
    monkeypatch.setenv("WRITER_TOKEN", WRITER)
    monkeypatch.setenv("READER_TOKEN", READER)
    monkeypatch.setenv("BUNDLECTL_APPROVER_TOKEN", APPROVER)

    def configured(state: str = "") -> Path:
        kitchen = TEST_SERVERS / "kitchen.py"
        write(project / "bundlectl.yaml", CONFIG.format(py=PY, kitchen=kitchen, state=state))
        return project

    return configured


def decide(url: str, approval: str, decision: str, reason: str | None = None) -> None:
    """A decision through the approvers' API (what the page posts), as an approver."""
    body = {"decision": decision, **({"reason": reason} if reason else {})}
    sent = urllib.request.Request(
        f"{url}/approvals/{approval}.json",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {APPROVER}"},
        method="POST",
    )
    with urllib.request.urlopen(sent, timeout=30) as answer:
        assert answer.status == 200


async def created_task(c: Any, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The `CreateTaskResult` a call is answered with, as it came (nothing polled)."""
    created = await c.session.call_tool(tool, arguments, allow_claimed=True)
    return dict(created.model_dump(by_alias=True))


def test_a_held_call_is_a_task_that_any_replica_answers_until_approved_in_the_browser(
    tasks_project: Callable[[str], Path],
    redis_url: str,
    browser: Callable[[], Any],
    isolated_home: Path,
) -> None:
    """Two `--stateless` replicas on one redis-server: the call made through one is a task
    naming its approval request; the other answers `tasks/get` and serves the approvers' page,
    where a person approves it in Chromium; the client's `call_tool` returns the call's result.
    Another agent cannot see the task; a client without the extension is told it lacks it."""
    from selenium.webdriver.common.by import By

    project = tasks_project(f"state: {{url: '{redis_url}'}}")
    tasks = Tasks()
    with (
        gateway(project, "--stateless", home=isolated_home) as (one, _),
        gateway(project, "--stateless", home=isolated_home) as (two, _),
    ):

        async def approve_when_held() -> dict[str, Any]:
            while not tasks.seen:
                await anyio.sleep(0.05)
            async with client(two, WRITER, extensions=[Tasks()]) as other:
                seen = await get(other.session, tasks.created[0].task_id)  # the other replica
            async with client(two, READER, extensions=[Tasks()]) as reader:
                hidden = await code_of(get(reader.session, tasks.created[0].task_id))
            async with client(two, WRITER) as plain:
                undeclared = await code_of(get(plain.session, tasks.created[0].task_id))
            window = browser()
            window.get(f"{two}/approvals?token={APPROVER}")
            until(window, lambda w: w.find_element(By.LINK_TEXT, "files.write_file")).click()
            until(window, lambda w: w.find_element(By.ID, "approve-once")).click()
            until(window, lambda w: w.find_element(By.ID, "status").text == "used")
            return {"seen": seen, "hidden": hidden, "undeclared": undeclared}

        async def script() -> tuple[Any, dict[str, Any]]:
            async with client(one, WRITER, extensions=[tasks]) as c:
                assert c.protocol_version == "2026-07-28"
                fast = await c.call_tool("files__read_file", {"path": "bundlectl.yaml"})
                assert "version: 1" in fast.content[0].text and not tasks.created  # no task
                checked: dict[str, Any] = {}

                async def approver() -> None:
                    checked.update(await approve_when_held())

                async with anyio.create_task_group() as group:
                    group.start_soon(approver)
                    done = await c.call_tool("files__write_file", {"path": "t.txt", "content": "x"})
                return done, checked

        done, checked = anyio.run(script)
    assert not done.is_error and (project / "t.txt").read_text() == "x"
    [created] = tasks.created
    assert created.status == "working"
    seen = checked["seen"]
    assert seen["taskId"] == created.task_id and seen["status"] == "working"
    assert seen["statusMessage"].startswith("waiting for approval request ")
    approval = seen["statusMessage"].split()[4].rstrip(";")
    assert checked["hidden"] == -32602  # another agent's task is as unknown
    assert checked["undeclared"] == -32021  # the extension, not declared
    last = tasks.seen[-1][1]
    assert last["status"] == "completed" and last["result"]["content"][0]["text"].startswith(
        "wrote 1 bytes"
    )
    steps = [
        (r["outcome"], r.get("approval"))
        for r in audit_records(isolated_home / "state" / "audit.jsonl")
        if r.get("tool") == "write_file"
    ]
    assert ("approval-requested", approval) in steps and ("approval-used", approval) in steps
    assert steps[-1][0] == "ok" and [s for s, _ in steps].count("ok") == 1  # made once


def test_a_denied_task_fails_saying_who_and_why_and_a_cancelled_one_withdraws_its_request(
    tasks_project: Callable[[str], Path], run: Run, isolated_home: Path
) -> None:
    project = tasks_project("")

    async def script(url: str) -> tuple[BaseException | None, dict[str, Any], dict[str, Any]]:
        tasks = Tasks(poll=0.05)
        async with client(url, WRITER, extensions=[tasks]) as c:
            failed: BaseException | None = None

            async def denier() -> None:
                while not tasks.seen:
                    await anyio.sleep(0.05)
                await anyio.to_thread.run_sync(
                    decide, url, pending(run)[0]["id"], "deny", "not on a Friday"
                )

            async with anyio.create_task_group() as group:
                group.start_soon(denier)
                try:
                    await c.call_tool("files__write_file", {"path": "d.txt", "content": "no"})
                except TaskFailed as exc:
                    failed = exc
            created = await created_task(c, "files__write_file", {"path": "c.txt", "content": "y"})
            assert created["resultType"] == "task", created
            ack = await cancel(c.session, created["taskId"])
            after = await get(c.session, created["taskId"])
            return failed, {"ack": ack, **after}, created

    with gateway(project, home=isolated_home) as (url, _):
        failed, cancelled, created = anyio.run(script, url)
    assert isinstance(failed, TaskFailed) and failed.task["status"] == "failed"
    assert "denied by approvers API (127.0.0.1): not on a Friday" in failed.task["error"]["message"]
    assert cancelled["ack"] == {"resultType": "complete", "_meta": cancelled["ack"]["_meta"]}
    assert cancelled["status"] == "cancelled" and "result" not in cancelled
    everything = json.loads(run("approvals", "list", "--all", "--format", "json").out)
    statuses = sorted(r["status"] for r in everything["approvals"])
    assert statuses == ["denied", "withdrawn"]
    assert not (project / "d.txt").exists() and not (project / "c.txt").exists()
    assert "waiting for approval request" in created["statusMessage"]


def test_a_slow_call_is_a_task_and_its_tool_error_completes_it(
    tasks_project: Callable[[str], Path], isolated_home: Path
) -> None:
    """A call that outlasts half a second is given as a task, its server's progress as the task's
    status message; a tool's error completes the task with `isError` (`failed` is for protocol
    errors and refusals)."""
    project = tasks_project("")

    async def script(url: str) -> tuple[Any, Tasks, Any]:
        tasks = Tasks(poll=0.1)
        async with client(url, WRITER, extensions=[tasks]) as c:
            slow = await c.call_tool("kitchen__sleep", {"seconds": 1.6})
            broke = await c.call_tool("kitchen__fail", {"message": "no disk"})
            return slow, tasks, broke

    with gateway(project, home=isolated_home) as (url, _):
        slow, tasks, broke = anyio.run(script, url)
    assert slow.content[0].text == "slept 1.6" and len(tasks.created) == 1  # only the slow one
    messages = {task.get("statusMessage") for _, task in tasks.seen if task["status"] == "working"}
    assert messages == {"sleeping"}
    assert broke.is_error and "no disk" in broke.content[0].text


def test_a_gateway_that_stops_leaves_its_held_task_to_the_next_one(
    tasks_project: Callable[[str], Path], redis_url: str, run: Run, isolated_home: Path
) -> None:
    """A restart loses no held call: the task made on one replica is polled on another after
    the first stopped; it takes the call over (the same approval request, still pending) and
    makes it once approved. A call that was under way on its server when its gateway stopped
    fails, saying so (made again, it could do twice what it does)."""
    project = tasks_project(f"state: {{url: '{redis_url}'}}")

    async def create(url: str) -> tuple[dict[str, Any], dict[str, Any]]:
        async with client(url, WRITER, extensions=[Tasks()]) as c:
            held = await created_task(c, "files__write_file", {"path": "r.txt", "content": "z"})
            running = await created_task(c, "kitchen__sleep", {"seconds": 30})
            return held, running

    async def look(url: str, task_id: str) -> dict[str, Any]:
        async with client(url, WRITER, extensions=[Tasks()]) as c:
            return await get(c.session, task_id)

    async def finish(url: str, task_id: str) -> list[dict[str, Any]]:
        async with client(url, WRITER, extensions=[Tasks()]) as c:
            seen = [await get(c.session, task_id)]
            [request] = await anyio.to_thread.run_sync(pending, run)
            await anyio.to_thread.run_sync(decide, url, request["id"], "approve")
            with anyio.fail_after(30):
                while seen[-1]["status"] == "working":
                    await anyio.sleep(0.05)
                    seen.append(await get(c.session, task_id))
            return seen

    with gateway(project, "--stateless", home=isolated_home) as (two, _):
        with gateway(project, "--stateless", home=isolated_home) as (one, first):
            created, running = anyio.run(create, one)
            first.terminate()
            assert first.wait(30) == 130  # (stopped by SIGTERM)
        assert len(pending(run)) == 1  # the request stays
        stopped = anyio.run(look, two, running["taskId"])  # (it was under way on its server)
        seen = anyio.run(finish, two, created["taskId"])
    assert seen[0]["status"] == "working" and seen[-1]["status"] == "completed", seen
    assert stopped["status"] == "failed" and "whether the tool finished" in str(stopped)
    assert (project / "r.txt").read_text() == "z"
    # The store keeps the call's arguments and its result sealed (the replicas' key).
    import redis

    raw = redis.Redis.from_url(redis_url).hget(f"bundlectl:task:{created['taskId']}", "record")
    assert raw is not None and b"r.txt" not in raw and b"wrote" not in raw
    outcomes = [
        r["outcome"]
        for r in audit_records(isolated_home / "state" / "audit.jsonl")
        if r.get("tool") == "write_file"
    ]
    assert outcomes.count("ok") == 1 and "approval-withdrawn" not in outcomes


def test_only_a_2026_client_that_declares_tasks_gets_one(
    tasks_project: Callable[[str], Path], isolated_home: Path
) -> None:
    """A client without the extension is told the call's approval request at once, as
    before; `tasks/list` and `tasks/result` (removed by SEP-2663) are unknown methods."""
    project = tasks_project("")

    async def script(url: str) -> tuple[Any, list[int]]:
        async with client(url, WRITER) as plain:
            held = await plain.call_tool("files__write_file", {"path": "p.txt", "content": "q"})
        async with client(url, WRITER, extensions=[Tasks()]) as c:
            gone = [
                await code_of(c.session.send_request(_raw(method), _ANY))
                for method in ("tasks/list", "tasks/result")
            ]
            unknown = await code_of(get(c.session, "no-such-task"))
        return held, [*gone, unknown]

    with gateway(project, home=isolated_home) as (url, _):
        held, codes = anyio.run(script, url)
    assert held.is_error and "held as approval request" in held.content[0].text
    assert codes == [-32601, -32601, -32602]


def _raw(method: str) -> Any:
    import mcp_types as types

    class Raw(types.Request[types.RequestParams, str]):
        pass

    return Raw(method=method, params=types.RequestParams())


def _any() -> Any:
    from pydantic import TypeAdapter

    return TypeAdapter(dict[str, Any])


_ANY = _any()


def test_a_call_over_its_quota_waits_as_a_task_for_the_window_to_reset(
    tasks_project: Callable[[str], Path], isolated_home: Path
) -> None:
    """A full quota's window: a plain call is refused as before, a task's call waits for the
    window to reset (saying so in the task's status), then is made and counted in the next."""
    project = tasks_project(
        "limits: [{agents: [writer], tools: [kitchen.sleep], calls: 1, per: 4s}]"
    )

    async def script(url: str) -> tuple[list[Any], Tasks]:
        tasks = Tasks(poll=0.1)
        async with client(url, WRITER, extensions=[tasks]) as c:
            async with client(url, WRITER) as plain:
                # (both in one window: the first call at the start of one)
                while time.time() % 4 > 0.5:  # (3.5 s for two calls, on a loaded machine)
                    await anyio.sleep(0.05)
                first = await c.call_tool("kitchen__sleep", {"seconds": 0})
                refused = await plain.call_tool("kitchen__sleep", {"seconds": 0})
            waited = await c.call_tool("kitchen__sleep", {"seconds": 0})
        return [first, refused, waited], tasks

    with gateway(project, home=isolated_home) as (url, _):
        (first, refused, waited), tasks = anyio.run(script, url)
    assert not first.is_error and not waited.is_error and waited.content[0].text == "slept 0.0"
    assert refused.is_error and "all used in this window" in refused.content[0].text
    assert len(tasks.created) == 1  # the call that waited
    working = [task for _, task in tasks.seen if task["status"] == "working"]
    assert working and working[0]["statusMessage"].startswith("waiting for a quota window")
    outcomes = [
        r["outcome"]
        for r in audit_records(isolated_home / "state" / "audit.jsonl")
        if r.get("tool") == "sleep"
    ]
    assert outcomes == ["ok", "over-limit", "over-limit", "ok"]


def test_a_question_asked_after_the_call_became_a_task_is_answered_by_tasks_update(
    project: Path, isolated_home: Path
) -> None:
    """A 2026-07-28 server that works a while and then asks its client something: the task
    says `input_required` with the server's question, as asked; the client's `tasks/update`
    makes the call's next round with its answer, and the task completes with the result."""
    conformance_project(project)
    asked: list[dict[str, Any]] = []

    def answer(questions: dict[str, Any]) -> dict[str, Any]:
        asked.append(questions)
        return {"user_name": {"action": "accept", "content": {"name": "Ada"}}}

    async def never(context: Any, params: Any) -> Any:
        raise AssertionError("the task's questions come through tasks/get, not the session")

    async def script(url: str) -> tuple[Any, Tasks]:
        tasks = Tasks(poll=0.1, answer=answer)
        async with client(url, extensions=[tasks], elicitation_callback=never) as c:
            return await c.call_tool("conf__slow_question", {}), tasks

    with gateway(project, "--agent", "solo", home=isolated_home) as (url, _):
        done, tasks = anyio.run(script, url)
    assert done.content[0].text == "Hello, Ada!" and len(tasks.created) == 1
    [questions] = asked
    assert list(questions) == ["user_name"]  # the server's own name for its question
    assert questions["user_name"]["method"] == "elicitation/create"
    statuses = [task["status"] for _, task in tasks.seen]
    assert "input_required" in statuses and statuses[-1] == "completed", statuses


def test_a_persons_task_is_unknown_to_another_person_of_the_same_agent(
    project: Path, issuer: Issuer, isolated_home: Path
) -> None:
    """With identities from the team's issuer, a task is its person's: another person whose
    token maps to the same agent is told it does not exist (as for another agent's)."""
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        bundles: [basic]
        agents:
          dev: {{match: {{groups: [devs]}}, ask: [files.write_file]}}
        gateway:
          auth:
            issuers: [{{issuer: "{issuer.url}", audience: [bundlectl-gateway]}}]
        policy: {{default: deny, approvals: {{ttl: 10m}}}}
        """,
    )
    ana = issuer.token(sub="ana", groups=["devs"])
    bob = issuer.token(sub="bob", groups=["devs"])

    async def script(url: str) -> tuple[dict[str, Any], int, dict[str, Any]]:
        async with client(url, ana, extensions=[Tasks()]) as c:
            created = await created_task(c, "files__write_file", {"path": "a.txt", "content": "x"})
            async with client(url, bob, extensions=[Tasks()]) as other:
                hidden = await code_of(get(other.session, created["taskId"]))
            own = await get(c.session, created["taskId"])
            await cancel(c.session, created["taskId"])
        return created, hidden, own

    with gateway(project, home=isolated_home) as (url, _):
        created, hidden, own = anyio.run(script, url)
    assert created["resultType"] == "task" and own["status"] == "working"
    assert hidden == -32602


def test_a_task_ends_cancelled_when_its_request_expires_or_its_call_is_stopped(
    tasks_project: Callable[[str], Path], tmp_path: Path, isolated_home: Path, run: Run
) -> None:
    """Two ways a task ends `cancelled`: its approval request expires with no answer, and
    `tasks/cancel` while its call runs on the server (which is told: its call stops)."""
    project = tasks_project("")
    config = project / "bundlectl.yaml"
    config.write_text(
        config.read_text()
        .replace("approvals: {ttl: 10m}", "approvals: {ttl: 2s}")
        .replace('args: ["', f'env: {{KITCHEN_LOG: "{tmp_path / "kitchen.log"}"}}, args: ["')
        .replace("policy:", 'policy:\n  sandbox: "off"  # (the kitchen writes its log)\n', 1)
    )

    async def script(url: str) -> tuple[BaseException | None, list[dict[str, Any]]]:
        expired: BaseException | None = None
        async with client(url, WRITER, extensions=[Tasks(poll=0.1)]) as c:
            try:
                await c.call_tool("files__write_file", {"path": "e.txt", "content": "late"})
            except TaskFailed as exc:
                expired = exc
            created = await created_task(c, "kitchen__sleep", {"seconds": 30})
            await anyio.sleep(0.3)
            await cancel(c.session, created["taskId"])
            seen = [await get(c.session, created["taskId"])]
            with anyio.fail_after(10):
                while seen[-1]["status"] == "working":
                    await anyio.sleep(0.05)
                    seen.append(await get(c.session, created["taskId"]))
        return expired, seen

    with gateway(project, home=isolated_home) as (url, _):
        expired, seen = anyio.run(script, url)
    assert isinstance(expired, TaskFailed) and expired.task["status"] == "cancelled"
    assert seen[-1]["status"] == "cancelled", seen
    assert "sleep cancelled" in (tmp_path / "kitchen.log").read_text()
    everything = json.loads(run("approvals", "list", "--all", "--format", "json").out)
    assert [r["status"] for r in everything["approvals"]] == ["expired"]
    assert not (project / "e.txt").exists()
