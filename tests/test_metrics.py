"""Prometheus metrics of the gateway (issue 41): `serve --transport streamable-http --metrics`
counts every call where it is recorded, by agent, server, tool and outcome, with denials by
rule, call durations, quota refusals, open sessions and pending approvals, at `GET /metrics` —
behind its own token when one is set."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2

from tests.conftest import write
from tests.gateway.test_gateway_http import client, gateway

TOKEN = "reader-token-0123456789"


def _config(project: Path) -> None:
    write(
        project / "bundlectl.yaml",
        """
        version: 1
        bundles: [basic]
        agents:
          reader:
            token: "${READER_TOKEN}"
            allow: [files.read_file]
            ask: [files.list_directory]
            deny: [files.write_file]
        policy: {default: deny, approvals: {ttl: 10m}}
        limits:
          - {agents: [reader], tools: [files.read_file], calls: 3, per: 1h}
        """,
    )
    (project / "a.txt").write_text("hi")


def _samples(text: str) -> dict[str, float]:
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


def test_calls_denials_and_durations_are_counted(
    project: Path, isolated_home: Path, monkeypatch: Any
) -> None:
    _config(project)
    monkeypatch.setenv("READER_TOKEN", TOKEN)
    monkeypatch.setenv("BUNDLECTL_METRICS_TOKEN", "metrics-token-0123456789-abcdefgh")

    def scrape(url: str) -> httpx2.Response:
        return httpx2.get(
            f"{url}/metrics",
            headers={"Authorization": "Bearer metrics-token-0123456789-abcdefgh"},
            timeout=30,
        )

    async def calls(url: str) -> dict[str, float]:
        async with client(url, TOKEN, mode="legacy") as c:  # 2025-11-25: HTTP sessions
            for _ in range(3):
                assert not (await c.call_tool("files__read_file", {"path": "a.txt"})).is_error
            over = await c.call_tool("files__read_file", {"path": "a.txt"})
            assert over.is_error and "limits[0]" in over.content[0].text  # type: ignore[union-attr]
            assert (await c.call_tool("files__write_file", {"path": "b", "content": "x"})).is_error
            held = await c.call_tool("files__list_directory", {"path": "."})
            assert held.is_error and "approvals approve" in held.content[0].text  # type: ignore[union-attr]
            return _samples((await anyio.to_thread.run_sync(scrape, url)).text)

    with gateway(project, "--metrics", home=isolated_home) as (url, _):
        during = anyio.run(calls, url)
        refused = httpx2.get(f"{url}/metrics", timeout=30)
        agent = httpx2.get(f"{url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        # #52 item 8: every route under the Host/Origin checks of /mcp (DNS rebinding).
        rebound = [
            httpx2.get(f"{url}{route}", headers=headers, timeout=30).status_code
            for route in ("/metrics", "/.well-known/oauth-protected-resource", "/healthz")
            for headers in (
                {"Host": "evil.example"},
                {"Host": "127.0.0.1.evil.example:80"},
                {"Origin": "http://evil.example"},
                {"Origin": "http://localhost:1.evil.example"},
            )
        ]
        shown = scrape(url)
        deadline = time.monotonic() + 30  # the client's session ends when the server hears it
        while _samples(shown.text)["bundlectl_active_sessions"] != 0:
            assert time.monotonic() < deadline, "the closed session is still counted"
            shown = scrape(url)
    assert refused.status_code == 401 and agent.status_code == 401  # an agent's token is not it
    assert rebound == [421] * 12
    assert shown.status_code == 200 and shown.headers["content-type"].startswith("text/plain")
    assert during["bundlectl_active_sessions"] == 1
    assert during["bundlectl_pending_approvals"] == 1  # the held list_directory call
    samples = _samples(shown.text)
    assert samples['bundlectl_quota_refusals_total{agent="reader",limit="limits[0]"}'] == 1
    over = 'agent="reader",outcome="over-limit",server="files",tool="read_file"'
    assert samples[f"bundlectl_calls_total{{{over}}}"] == 1
    labels = 'agent="reader",outcome="ok",server="files",tool="read_file"'
    assert samples[f"bundlectl_calls_total{{{labels}}}"] == 3
    denied = 'agent="reader",outcome="denied",server="files",tool="write_file"'
    assert samples[f"bundlectl_calls_total{{{denied}}}"] == 1
    assert samples['bundlectl_denials_total{agent="reader",rule="files.write_file"}'] == 1
    count = 'bundlectl_call_duration_seconds_count{server="files",tool="read_file"}'
    assert samples[count] == 3
    assert "a.txt" not in shown.text and TOKEN not in shown.text


def test_metrics_are_off_unless_asked(project: Path, isolated_home: Path, monkeypatch: Any) -> None:
    _config(project)
    monkeypatch.setenv("READER_TOKEN", TOKEN)
    monkeypatch.delenv("BUNDLECTL_METRICS_TOKEN", raising=False)
    assert os.environ.get("BUNDLECTL_METRICS_TOKEN") is None
    with gateway(project, home=isolated_home) as (url, _):
        off = httpx2.get(f"{url}/metrics", timeout=30)
    assert off.status_code == 404 and "serve --metrics" in off.text
