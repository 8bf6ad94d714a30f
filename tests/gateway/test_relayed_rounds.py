"""A 2026-07-28 server's questions (input-required rounds, SEP-2322) handed on by `serve` to a
2026-07-28 client as the server asked them (`gateway/relayed.py`), with raw HTTP requests so
every byte of the round trip is the test's: each round is its own judged and audited call, the
gateway holds nothing between rounds, the requestState it gives is good once and for that call
only, and a question the client cannot answer is refused with -32021."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from tests.conftest import TEST_SERVERS, audit_records, write
from tests.gateway.test_gateway_http import gateway

PY = sys.executable
MODERN = "2026-07-28"


MULTI = "test_input_required_result_multi_round"


def conformance_project(project: Path, more: str = "") -> None:
    # concurrency 1 (the default): a round held open in the gateway would stop every other call
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          conf: {{command: {PY}, args: ["{TEST_SERVERS / "conformance.py"}"]}}
        agents:
          solo: {{allow: ["conf.*"]}}
        policy: {{default: deny}}
        {more}
        """,
    )


class _Client:
    """A 2026-07-28 client over plain HTTP: one self-contained POST per request."""

    def __init__(self, http: Any, url: str, capabilities: dict[str, Any]) -> None:
        self.http, self.url, self.capabilities, self.ids = http, url, capabilities, 0

    def call(
        self, name: str, arguments: dict[str, Any] | None = None, **more: Any
    ) -> tuple[int, dict[str, Any]]:
        self.ids += 1
        meta = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": self.capabilities,
        }
        body = {
            "jsonrpc": "2.0",
            "id": self.ids,
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments or {}, "_meta": meta, **more},
        }
        headers = {
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": MODERN,
            "Mcp-Method": "tools/call",
            "Mcp-Name": name,
        }
        answer = self.http.post(f"{self.url}/mcp", json=body, headers=headers)
        text = answer.text
        if text.startswith(("event:", "data:")):  # an event stream: its last message
            text = [line[5:] for line in text.splitlines() if line.startswith("data:")][-1]
        return answer.status_code, json.loads(text)


def test_a_modern_servers_questions_reach_the_client_as_asked_and_nothing_waits_between_rounds(
    project: Path, isolated_home: Path
) -> None:
    import httpx2

    # One call of the tool an hour: the call in three rounds is one call (the rounds that ask
    # are audited as such and not counted).
    conformance_project(
        project, f"limits: [{{agents: [solo], tools: [conf.{MULTI}], calls: 1, per: 1h}}]"
    )
    with (
        gateway(project, "--agent", "solo", "--stateless", home=isolated_home) as (url, _),
        httpx2.Client(timeout=20) as http,
    ):
        client = _Client(http, url, {"elicitation": {}})
        _, first = client.call("conf__test_input_required_result_multi_round")
        asked = first["result"]
        assert asked["resultType"] == "input_required", first
        assert list(asked["inputRequests"]) == ["step1"], first  # the server's own name
        step1 = asked["requestState"]

        # Nobody answers yet; the server (one call at a time) is not held by the round.
        started = time.monotonic()
        status, other = client.call("conf__test_simple_text")
        assert status == 200 and "simple text" in json.dumps(other), other
        assert time.monotonic() - started < 10

        name = {"action": "accept", "content": {"name": "Ada"}}
        answered = {"inputResponses": {"step1": name}, "requestState": step1}
        _, second = client.call("conf__test_input_required_result_multi_round", **answered)
        assert list(second["result"]["inputRequests"]) == ["step2"], second
        step2 = second["result"]["requestState"]

        # The state is good once, and for its own call only.
        status, again = client.call("conf__test_input_required_result_multi_round", **answered)
        assert again["error"]["code"] == -32602, again
        assert "given already" in again["error"]["message"]
        colour = {"action": "accept", "content": {"color": "teal"}}
        moved = {"inputResponses": {"step2": colour}, "requestState": step2}
        _, elsewhere = client.call("conf__test_input_required_result_elicitation", **moved)
        assert elsewhere["error"]["code"] == -32602, elsewhere

        _, done = client.call("conf__test_input_required_result_multi_round", **moved)
        texts = [block["text"] for block in done["result"]["content"]]
        assert texts == ["Multi-round complete for Ada who likes teal"], done
    calls = [r for r in audit_records(isolated_home / "state" / "audit.jsonl") if r["tool"] != "-"]
    rounds = [r["outcome"] for r in calls if r["tool"] == "test_input_required_result_multi_round"]
    # each round a call of its own (the refused ones never ran), counted by the one that ended it
    assert rounds == ["asked", "asked", "ok"], calls


def test_a_question_the_client_did_not_declare_it_can_answer_is_refused_with_32021(
    project: Path, isolated_home: Path
) -> None:
    """The gateway declares to its servers all it can hand on; a server's question its own
    client cannot answer is refused as the protocol says (-32021, HTTP 400, naming what is
    missing), whether the server asks by an input-required round or its client would have to
    answer a question it never declared. The server is sound: it is not restarted for it."""
    import httpx2

    conformance_project(project)
    with (
        gateway(project, "--agent", "solo", "--stateless", home=isolated_home) as (url, _),
        httpx2.Client(timeout=20) as http,
    ):
        bare = _Client(http, url, {})
        _, before = bare.call("conf__whoami")
        status, refused = bare.call("conf__test_missing_capability")
        assert status == 400, refused
        assert refused["error"]["code"] == -32021, refused
        assert refused["error"]["data"] == {"requiredCapabilities": {"sampling": {}}}, refused
        # a client that elicits but cannot sample, asked for both at once
        eliciting = _Client(http, url, {"elicitation": {}})
        status, refused = eliciting.call("conf__test_input_required_result_multiple_inputs")
        assert status == 400 and refused["error"]["code"] == -32021, refused
        assert "sampling" in json.dumps(refused["error"]["data"]), refused
        _, after = bare.call("conf__whoami")
        assert after["result"]["content"] == before["result"]["content"]  # the same process


def test_over_stdio_too_a_tool_that_needs_an_undeclared_capability_is_refused_with_32021(
    project: Path, isolated_home: Path
) -> None:
    """The same refusal at the stdio front's express door, which takes the calls of a
    2026-07-28 client that declared nothing it could be asked (JSON-RPC lines written here)."""
    import os
    import subprocess

    conformance_project(project)
    envelope = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    names = ["conf__test_simple_text", "conf__test_missing_capability", "conf__test_simple_text"]
    lines = [
        {
            "jsonrpc": "2.0",
            "id": n,
            "method": "tools/call",
            "params": {"name": name, "_meta": envelope},
        }
        for n, name in enumerate(names, 1)
    ]
    proc = subprocess.Popen(
        [PY, "-m", "bundlectl", "serve", "--agent", "solo"],
        cwd=project,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "BUNDLECTL_HOME": str(isolated_home)},
    )
    assert proc.stdin is not None and proc.stdout is not None
    answers = []
    try:
        for line in lines:  # one at a time: the first warms the door the next ones take
            proc.stdin.write(json.dumps(line).encode() + b"\n")
            proc.stdin.flush()
            answers.append(json.loads(proc.stdout.readline()))
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
        proc.stdout.close()
    first, refused, after = answers
    assert "simple text" in json.dumps(first["result"]), first
    assert refused["error"]["code"] == -32021, refused
    assert refused["error"]["data"] == {"requiredCapabilities": {"sampling": {}}}, refused
    assert "simple text" in json.dumps(after["result"]), after


def test_a_relayed_question_passes_the_agents_privacy_tokenizer(
    project: Path, isolated_home: Path
) -> None:
    """A server's question may quote a real value (here, one the agent sent it): the agent's
    client sees it tokenized, as it would in the call's result."""
    import httpx2

    conformance_project(project, "privacy: {tokenize: [email]}")
    with (
        gateway(project, "--agent", "solo", "--stateless", home=isolated_home) as (url, _),
        httpx2.Client(timeout=20) as http,
    ):
        client = _Client(http, url, {"elicitation": {}})
        asked = {"message": "Send it to jane.doe@corp.example?"}
        _, first = client.call("conf__test_elicitation", asked)
    question = first["result"]["inputRequests"]["ask"]["params"]["message"]
    assert question == "Send it to [EMAIL_1]?", first
