"""The gateway in front of the reference MCP server, the npm `server-everything`, which exercises
what a real server sends back through a gateway: progress, log messages, elicitation and sampling
requests, resources and prompts, a task-only tool — and the MCP Inspector CLI as a
second real client. Both are pinned in `tests/npm/package.json` (installed by the README's test
command)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import REPO, Run, write
from tests.gateway.test_gateway import connected, texts

PY = sys.executable
BIN = REPO / "tests" / "npm" / "node_modules" / ".bin"


def peer(name: str) -> Path:
    path = BIN / name
    assert path.exists(), f"{path} is missing: run `npm ci --prefix tests/npm` (README, tests)"
    return path


@pytest.fixture
def everything(project: Path) -> Path:
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          everything:
            command: {peer("mcp-server-everything")}
        agents:
          agent:
            allow: ["everything.*"]
            deny: [everything.get-env]
        policy: {{default: deny}}
        """,
    )
    return project


def params(project: Path, home: Path) -> Any:
    from mcp import StdioServerParameters

    return StdioServerParameters(
        command=PY,
        args=["-m", "bundlectl", "serve", "--agent", "agent"],
        cwd=str(project),
        env={**os.environ, "BUNDLECTL_HOME": str(home)},
    )


@pytest.mark.parametrize("protocol", ["legacy", "auto"])
def test_what_the_server_sends_back_reaches_the_client(
    everything: Path, isolated_home: Path, protocol: str
) -> None:
    # The server speaks 2025-11-25: it asks its client during a call. A 2025-11-25 client is
    # asked on its session; a 2026-07-28 one ("auto") answers by retrying its call, while the
    # gateway holds the server's call open.
    import mcp_types as types

    seen: dict[str, Any] = {"progress": [], "logs": [], "elicited": [], "sampled": []}

    async def elicit(context: Any, params: Any) -> types.ElicitResult:
        seen["elicited"].append(params.message)
        return types.ElicitResult(action="accept", content={})

    async def sample(context: Any, params: Any) -> types.CreateMessageResult:
        seen["sampled"].append(params.messages[0].content.text)
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="forty-two"),
            model="test-model",
        )

    async def log(params: Any) -> None:
        seen["logs"].append((params.logger, params.data))

    async def progress(done: float, total: float | None, message: str | None) -> None:
        seen["progress"].append((done, total))

    async def session() -> None:
        async with connected(
            params(everything, isolated_home),
            elicitation_callback=elicit,
            sampling_callback=sample,
            logging_callback=log,
            mode=protocol,
        ) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            seen["names"] = names
            seen["long"] = await client.call_tool(
                "everything__trigger-long-running-operation",
                {"duration": 0.3, "steps": 3},
                progress_callback=progress,
            )
            seen["elicit"] = await client.call_tool("everything__trigger-elicitation-request", {})
            seen["sample"] = await client.call_tool(
                "everything__trigger-sampling-request", {"prompt": "the answer?"}
            )
            await client.call_tool("everything__toggle-simulated-logging", {})
            seen["task"] = await client.call_tool("everything__simulate-research-query", {})
            seen["resources"] = (await client.list_resources()).resources
            first = seen["resources"][0]
            seen["read"] = await client.read_resource(str(first.uri))
            seen["prompts"] = [p.name for p in (await client.list_prompts()).prompts]
            seen["prompt"] = await client.get_prompt("everything__simple-prompt")

    anyio.run(session)
    names = seen["names"]
    assert "everything__echo" in names and "everything__get-env" not in names
    assert "everything__trigger-sampling-request" in names  # shown: the client can sample
    assert seen["progress"] == [(1, 3), (2, 3), (3, 3)]
    assert "Long running operation completed" in texts(seen["long"])[0]
    assert len(seen["elicited"]) == 1 and not seen["elicit"].is_error
    assert len(seen["sampled"]) == 1 and seen["sampled"][0].endswith("the answer?")
    assert "forty-two" in texts(seen["sample"])[0]
    if protocol == "legacy":  # 2026-07-28: log messages only to requests that ask (_meta)
        assert any(logger == "everything" for logger, _ in seen["logs"]), seen["logs"]
    assert seen["task"].is_error
    assert "runs only as an MCP task" in texts(seen["task"])[0]
    assert seen["read"].contents and seen["read"].contents[0].uri == seen["resources"][0].uri
    assert "everything__simple-prompt" in seen["prompts"]
    assert seen["prompt"].messages[0].content.text


def test_requests_the_client_cannot_answer_are_refused(
    everything: Path, isolated_home: Path
) -> None:
    async def session() -> Any:
        async with connected(params(everything, isolated_home), mode="legacy") as client:
            return await client.call_tool(
                "everything__trigger-sampling-request", {"prompt": "anyone?"}
            )

    result = anyio.run(session)
    assert result.is_error
    assert "sampling is not available" in texts(result)[0], texts(result)


def test_the_mcp_inspector_lists_and_calls_through_the_gateway(
    everything: Path, isolated_home: Path
) -> None:
    inspector = peer("mcp-inspector")
    (everything / "hello.txt").write_text("hello\n")
    write(
        everything / "bundlectl.yaml",
        "version: 1\nbundles: [basic]\nagents: {agent: {allow: [files.read_file]}}\n"
        "policy: {default: deny}\n",
    )
    # The Inspector passes the server only the variables it is given with -e.
    serve = ["-e", f"BUNDLECTL_HOME={isolated_home}", PY, "-m", "bundlectl", "serve"]
    serve += ["--agent", "agent"]
    env = {**os.environ, "BUNDLECTL_HOME": str(isolated_home)}

    def inspect(*method: str) -> Any:
        done = subprocess.run(
            [str(inspector), "--cli", *serve, "--method", *method],
            check=False,
            cwd=everything,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    listed = inspect("tools/list")
    assert [t["name"] for t in listed["tools"]] == ["files__read_file"]
    called = inspect(
        "tools/call", "--tool-name", "files__read_file", "--tool-arg", "path=hello.txt"
    )
    assert called["content"][0]["text"] == "hello\n"


def test_exec_answers_what_a_server_asks_its_client(everything: Path, run: Run) -> None:
    """`exec` as a client: roots are the project, sampling and (without a terminal)
    elicitation are refused with a message, progress is a line per update on stderr."""
    roots = run("exec", "--agent", "agent", "everything.get-roots-list")
    assert roots.code == 0 and everything.as_uri() in roots.out, roots.out + roots.err
    sample = run("exec", "--agent", "agent", "everything.trigger-sampling-request", "prompt=hi")
    assert sample.code != 0 and "no language model to sample from" in sample.out + sample.err
    elicit = run("exec", "--agent", "agent", "everything.trigger-elicitation-request")
    assert elicit.code != 0
    assert "no one is at a terminal to answer" in elicit.out + elicit.err
    slow = ["everything.trigger-long-running-operation", "duration=0.3", "steps=3"]
    progress = run("exec", "--agent", "agent", *slow)
    assert progress.code == 0
    assert [line for line in progress.err_lines if "/3" in line] == [
        "everything.trigger-long-running-operation: 1/3",
        "everything.trigger-long-running-operation: 2/3",
        "everything.trigger-long-running-operation: 3/3",
    ], progress.err_lines
    events = run("exec", "--agent", "agent", "--format", "json", *slow)
    lines = [json.loads(line) for line in events.err_lines if line.startswith("{")]
    assert [(e["event"], e["progress"], e["total"]) for e in lines] == [
        ("progress", 1, 3),
        ("progress", 2, 3),
        ("progress", 3, 3),
    ]
    assert json.loads(events.out)["result"]["isError"] is False


def test_codegen_live_for_server_everything_type_checks(
    everything: Path, run: Run, mypy_cache: Path
) -> None:
    """server-everything declares no catalog: `codegen --live` asks it; the Python passes
    `mypy --strict` and the TypeScript `tsc --noEmit --strict`."""
    import subprocess

    result = run("codegen", "--agent", "agent", "--live", "--out", "py")
    assert result.code == 0, result.err
    assert (everything / "py" / "servers" / "everything" / "get_sum.py").exists()
    assert not (everything / "py" / "servers" / "everything" / "get_env.py").exists()  # denied
    mypy = subprocess.run(
        [PY, "-m", "mypy", "--strict", "--cache-dir", str(mypy_cache), "servers"],
        cwd=everything / "py",
        capture_output=True,
        text=True,
        check=False,
    )
    assert mypy.returncode == 0, mypy.stdout[-3000:]
    ts = run("codegen", "--agent", "agent", "--live", "--lang", "typescript", "--out", "ts")
    assert ts.code == 0, ts.err
    tsc = subprocess.run(
        [
            str(peer("tsc")),
            "-p",
            "tsconfig.json",
            "--noEmit",
            "--strict",
            "--typeRoots",
            str(BIN.parent / "@types"),
        ],
        cwd=everything / "ts",
        capture_output=True,
        text=True,
        check=False,
    )
    assert tsc.returncode == 0, tsc.stdout[-3000:]
