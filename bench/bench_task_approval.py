"""From a person's approval to a held call's result at a client that polls its task (issue 58's
goal: <= 250 ms): two `serve --transport streamable-http --stateless` replicas on one
`redis-server`; a 2026-07-28 client that declares the tasks extension (the MCP Python SDK's
`Client`, polling `tasks/get` every `pollIntervalMs` the gateway asks for) calls through the
first replica; the approver approves through the second's approvers' API; timed from the
approver's POST to the client's `call_tool` returning the result. Side by side in the same run:
the same call held open for a client that follows progress instead (issue 54's path).

    python bench/bench_task_approval.py [--runs 10]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
import httpx2

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.gateway.tasks_client import Tasks  # noqa: E402

WRITER = "writer-" + "w" * 30
APPROVER = "approver-" + "a" * 30
CONFIG = """
version: 1
bundles: [basic]
agents:
  writer:
    token: "${{WRITER_TOKEN}}"
    ask: [files.write_file]
policy:
  default: deny
  approvals: {{ttl: 10m, hold: 5m}}
state: {{url: "{redis}"}}
"""


def _start(project: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    command = [sys.executable, "-m", "bundlectl", "serve", "--transport", "streamable-http"]
    process = subprocess.Popen(
        [*command, "--port", "0", "--stateless"],
        cwd=project,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None
    line = process.stderr.readline().decode()
    found = re.search(r"on (http://\S+)/mcp", line)
    assert found, line
    return process, found.group(1)


async def _approve_when_pending(url: str) -> float:
    """Approve the one pending request as soon as it is listed; when the POST was sent."""
    headers = {"Authorization": f"Bearer {APPROVER}"}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        while True:
            listed = (await http.get(f"{url}/approvals/requests.json")).json()["approvals"]
            listed = [request for request in listed if request["status"] == "pending"]
            if listed:
                await anyio.sleep(0.3)  # the client is polling by now
                sent = time.perf_counter()
                answer = await http.post(
                    f"{url}/approvals/{listed[0]['id']}.json", json={"decision": "approve"}
                )
                assert answer.status_code == 200, answer.text
                return sent
            await anyio.sleep(0.02)


async def _one(call_url: str, approve_url: str, path: str, tasks: bool) -> float:
    """One held call; ms from the approval's POST to its result at the client."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async def progress(done: float, total: float | None, message: str | None) -> None:
        pass

    extensions = [Tasks()] if tasks else []
    headers = {"Authorization": f"Bearer {WRITER}"}
    sent: list[float] = []
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http,
        Client(
            streamable_http_client(f"{call_url}/mcp", http_client=http), extensions=extensions
        ) as client,
        anyio.create_task_group() as group,
    ):

        async def approver() -> None:
            sent.append(await _approve_when_pending(approve_url))

        group.start_soon(approver)
        arguments = {"path": path, "content": "x"}
        result = await client.call_tool(
            "files__write_file", arguments, progress_callback=None if tasks else progress
        )
        done = time.perf_counter()
        assert not result.is_error, result
    return (done - sent[0]) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    redis_server = shutil.which("redis-server") or "/usr/bin/redis-server"
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        socket = base / "redis.sock"
        redis = subprocess.Popen(
            [redis_server, "--port", "0", "--unixsocket", str(socket), "--save", ""],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        project = base / "project"
        project.mkdir()
        (project / "bundlectl.yaml").write_text(CONFIG.format(redis=f"unix://{socket}"))
        env = {
            **os.environ,
            "BUNDLECTL_HOME": str(base / "home"),
            "WRITER_TOKEN": WRITER,
            "BUNDLECTL_APPROVER_TOKEN": APPROVER,
        }
        time.sleep(0.3)
        one, url_one = _start(project, env)
        two, url_two = _start(project, env)
        try:
            timings: dict[str, list[float]] = {"task (polled)": [], "held open": []}
            for run in range(args.runs):  # alternating, so load hits both alike
                for label, tasks in (("task (polled)", True), ("held open", False)):
                    path = f"{label[:4]}-{run}.txt"
                    ms = anyio.run(_one, url_one, url_two, path, tasks)
                    timings[label].append(ms)
            for label, values in timings.items():
                values.sort()
                print(
                    f"{label:14} approval → result: median {statistics.median(values):6.1f} ms, "
                    f"p90 {values[int(len(values) * 0.9) - 1]:6.1f} ms, "
                    f"max {values[-1]:6.1f} ms ({len(values)} runs)"
                )
            print(json.dumps({k: [round(v, 1) for v in vs] for k, vs in timings.items()}))
        finally:
            for process in (one, two, redis):
                process.terminate()
                process.wait(10)


if __name__ == "__main__":
    main()
