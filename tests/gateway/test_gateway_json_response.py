"""`serve --transport streamable-http --stateless --json-response`: a 2025-11-25 client's request
answered with one JSON body (less CPU a call than an event stream opened for one answer), a
2026-07-28 client's still streamed when its call sends what it asked for — over raw HTTP, so the
framing itself is what is checked."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TEST_SERVERS, Run, write
from tests.gateway.test_gateway_http import gateway

MODERN = "2026-07-28"


@pytest.fixture
def kitchen(project: Path) -> Path:
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          kitchen:
            command: {sys.executable}
            args: ["{TEST_SERVERS / "kitchen.py"}"]
        agents:
          solo: {{allow: ["kitchen.*"]}}
        policy: {{default: deny}}
        """,
    )
    return project


def _sleep(url: str, era: str, request_id: int) -> tuple[str, list[dict[str, Any]]]:
    """A call of kitchen's `sleep` (progress every 0.1 s) that asks for progress, on `era`'s
    protocol: the answer's content type and its JSON-RPC messages, in order."""
    import httpx2

    meta: dict[str, Any] = {"progressToken": f"p{request_id}"}
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": era}
    if era == MODERN:
        meta |= {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        headers |= {"Mcp-Method": "tools/call", "Mcp-Name": "kitchen__sleep"}
    params = {"name": "kitchen__sleep", "arguments": {"seconds": 0.25}, "_meta": meta}
    body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    answer = httpx2.post(f"{url}/mcp", json=body, headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    kind = answer.headers["content-type"].split(";")[0]
    if kind == "application/json":
        return kind, [answer.json()]
    lines = answer.text.splitlines()
    return kind, [json.loads(line[5:]) for line in lines if line.startswith("data:")]


def test_a_2025_clients_call_is_one_json_body_and_a_2026_clients_progress_still_streams(
    kitchen: Path, isolated_home: Path
) -> None:
    with gateway(kitchen, "--agent", "solo", "--stateless", "--json-response") as (url, _):
        kind, messages = _sleep(url, "2025-11-25", 1)
        assert kind == "application/json", messages
        # the answer alone: the progress the call sent has no wire here (the option's price)
        assert [m.get("id") for m in messages] == [1], messages
        assert messages[0]["result"]["content"] == [{"type": "text", "text": "slept 0.25"}]
        kind, messages = _sleep(url, MODERN, 2)
        assert kind == "text/event-stream", messages
        assert [m["method"] for m in messages[:-1]][:1] == ["notifications/progress"], messages
        assert messages[-1]["id"] == 2 and messages[-1]["result"]["resultType"] == "complete"
    # Without the option the same call streams its progress: the conformance suite's
    # `tools-call-with-progress` against `serve --stateless` (tests/test_conformance.py).


def test_json_response_is_refused_where_a_session_would_need_its_stream(
    project: Path, run: Run
) -> None:
    """A session's client is asked an `ask` rule's question on its call's event stream: the
    option is for a stateless HTTP gateway only, refused before anything is read or served."""
    for args in (["--json-response"], ["--transport", "streamable-http", "--json-response"]):
        refused = run("serve", *args)
        assert refused.code == 2, refused
        assert "--stateless" in refused.err and "Traceback" not in refused.err, refused.err
