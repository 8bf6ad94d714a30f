"""A stdio server's tool calls on the gateway's SDK path go over its pipes
(`mcpio/pipe_session.py`), and end as the SDK's client ends them: each call here is made both
ways on one session with the server — through the SDK's client (`SdkSession`) and over the pipes
(`PipeSession`) — and the two compared."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from bundlectl.calls.audit import AuditLog
from bundlectl.calls.confirm import always_yes
from bundlectl.calls.pipeline import Pipeline
from bundlectl.config.project import load_project
from bundlectl.errors import BundlectlError
from bundlectl.mcpio import plain
from bundlectl.mcpio.connect import classify, connect
from bundlectl.mcpio.pipe_session import PipeSession
from bundlectl.mcpio.pipes import json_line
from bundlectl.mcpio.session import SdkSession
from bundlectl.mcpio.stdio import Tap, child_transport
from bundlectl.mcpio.target import Target, start_child
from bundlectl.resolve.resolved import resolve_project
from tests.conftest import TEST_SERVERS, write
from tests.gateway.test_gateway import PY


@pytest.fixture
def servers(project: Path) -> Path:
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
        agents:
          bot: {{allow: ["kitchen.*", "flaky.*"]}}
        policy: {{default: deny}}
        """,
    )
    return project


Both = tuple[SdkSession, PipeSession, Target]


@asynccontextmanager
async def both(server: str, **options: Any) -> AsyncIterator[Both]:
    """One session with `server`, as the gateway opens it: the SDK's client (`options`: its
    callbacks), and the same client with its tool calls made over the pipes."""
    resolution = resolve_project(load_project())
    target = Pipeline(resolution, AuditLog(resolution), always_yes).target(server)
    target.tap = tap = Tap()
    async with connect(target, connect_timeout=30, options=options) as client:
        sdk = SdkSession(client)
        tools = {t.name: t for t in await sdk.tools()}  # the tap learns the session's stamp
        tap.version = sdk.protocol_version
        yield sdk, PipeSession(client, tap, target, lambda: tools), target


async def ended(
    target: Target,
    session: SdkSession,
    name: str,
    arguments: dict[str, Any],
    timeout: float = 10,
) -> dict[str, Any] | tuple[str, str]:
    """How a call ended: its result (the model the gateway answers with, as JSON), or its
    error's type and message (the SDK's exceptions as the gateway classifies them)."""
    error: BundlectlError | None
    try:
        result = await session.call(name, arguments, timeout=timeout, progress=None)
    except BundlectlError as exc:
        error = exc
    except Exception as exc:
        error = classify(exc, target)
        if error is None:
            raise
    else:
        dumped: dict[str, Any] = result.as_model().model_dump(mode="json", by_alias=True)
        return dumped
    return type(error).__name__, error.message


KITCHEN_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("echo", {"text": "hi", "times": 2}),
    ("add", {"a": 40, "b": 2}),  # structured content, checked against its output schema
    ("media", {}),
    ("people", {}),
    ("tags", {"items": ["a"], "meta": {"k": [1, None]}}),
    ("fail", {"message": "as planned"}),  # a tool error: a result
    ("nope", {}),  # no such tool: the server's answer
]


def test_calls_over_the_pipes_end_as_through_the_sdks_client(servers: Path) -> None:
    async def run() -> tuple[list[Any], list[Any], list[str]]:
        async with both("kitchen") as (sdk, pipe, target):
            through_sdk, over_pipes = [], []
            for name, arguments in KITCHEN_CALLS:
                through_sdk.append(await ended(target, sdk, name, arguments))
                over_pipes.append(await ended(target, pipe, name, arguments))
            ids = [
                (await session.call("request_id", {}, timeout=10, progress=None)).texts()[0]
                for session in (sdk, pipe, pipe)
            ]
            return through_sdk, over_pipes, ids

    through_sdk, over_pipes, ids = anyio.run(run)
    assert over_pipes == through_sdk
    assert through_sdk[1]["structuredContent"] == {"sum": 42}
    assert through_sdk[5]["isError"]
    # the SDK's client numbers its requests; the pipes' have ids of their own
    assert ids[0].isdigit(), ids
    assert all(re.fullmatch(r"bundlectl-pipe-\d+", i) for i in ids[1:]) and ids[1] != ids[2]


FAILURES = ["shape", "refuse", "badresult"]  # each breaks the call in its own way


def test_a_servers_failures_over_the_pipes_are_the_sdk_clients(servers: Path) -> None:
    async def run() -> tuple[list[Any], list[Any], Any, Any]:
        async with both("flaky") as (sdk, pipe, target):
            through_sdk, over_pipes = [], []
            for name in FAILURES:
                through_sdk.append(await ended(target, sdk, name, {}))
                over_pipes.append(await ended(target, pipe, name, {}))
            # a call the server never answers ends at its timeout, either way
            late = [await ended(target, s, "hang", {}, timeout=0.5) for s in (sdk, pipe)]
            return through_sdk, over_pipes, late[0], late[1]

    through_sdk, over_pipes, sdk_late, pipe_late = anyio.run(run)
    assert over_pipes == through_sdk
    assert "Invalid structured content returned by tool shape" in through_sdk[0][1]
    assert "returned an error: no can do" in through_sdk[1][1]
    assert pipe_late == sdk_late and pipe_late[0] == "CallTimeout"


def test_progress_over_the_pipes_reaches_the_caller(servers: Path) -> None:
    async def run() -> tuple[list[tuple[float, float | None, str | None]], str]:
        heard: list[tuple[float, float | None, str | None]] = []

        async def progress(done: float, total: float | None, message: str | None) -> None:
            heard.append((done, total, message))

        async with both("kitchen") as (_, pipe, _target):
            result = await pipe.call("sleep", {"seconds": 0.2}, timeout=10, progress=progress)
            return heard, result.texts()[0]

    heard, text = anyio.run(run)
    assert text == "slept 0.2"
    assert heard == [(0.0, 2.0, "sleeping"), (1.0, 2.0, "sleeping")]


def test_what_the_server_said_before_its_answer_reaches_the_sdks_client_first(
    servers: Path,
) -> None:
    """`chatty` writes a log message and its answer in one write: over the pipes as through
    the SDK's client, the log has reached the client's logging callback when the call returns
    (the gateway passes it on to its own client before the result)."""

    async def run() -> list[list[str]]:
        heard: list[str] = []
        seen = []

        async def log(params: Any) -> None:
            heard.append(str(params.data))

        async with both("flaky", logging_callback=log) as (sdk, pipe, _target):
            for session in (sdk, pipe, pipe):
                heard.clear()
                await session.call("chatty", {}, timeout=10, progress=None)
                seen.append(list(heard))
        return seen

    assert anyio.run(run) == [["said before the answer"]] * 3


def test_execs_sdk_free_client_ends_a_servers_failures_as_the_sdks_client(servers: Path) -> None:
    """`exec`'s own client on a stdio server (`plain.StdioClient`) makes the same raw-pipe call
    and the same checks of its answer: structured content against the tool's output schema, a
    result the protocol's types refuse, the server's error — each ends as through the SDK."""

    async def run() -> tuple[list[Any], list[Any]]:
        async with both("flaky") as (sdk, _pipe, target):
            through_sdk = [await ended(target, sdk, name, {}) for name in FAILURES]
        resolution = resolve_project(load_project())
        target = Pipeline(resolution, AuditLog(resolution), always_yes).target("flaky")
        async with (
            child_transport(start_child(target), decode=plain.decode, encode=json_line) as streams,
            plain.StdioClient.session(target, streams, root=Path.cwd(), ask=None) as client,
        ):
            await client.initialize()
            await client.tools()  # as `perform` lists them: the output schemas are known
            own = [await ended(target, client, name, {}) for name in FAILURES]  # type: ignore[arg-type]
        return through_sdk, own

    through_sdk, own = anyio.run(run)
    assert own == through_sdk
    assert "Invalid structured content returned by tool shape" in own[0][1]
    assert own[2][0] == "ServerCrashed" and "broke the protocol" in own[2][1]
