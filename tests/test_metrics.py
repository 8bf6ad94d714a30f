"""Prometheus metrics of the gateway (issue 41): `serve --transport streamable-http --metrics`
counts every call where it is recorded, by agent, server, tool and outcome, with denials by
rule and call durations, at `GET /metrics` — behind its own token when one is set."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import httpx2

from tests.conftest import write
from tests.test_gateway_http import client, gateway

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
            deny: [files.write_file]
        policy: {default: deny}
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
    monkeypatch.setenv("BUNDLECTL_METRICS_TOKEN", "metrics-token-0123456789")

    async def calls(url: str) -> None:
        async with client(url, TOKEN) as c:
            for _ in range(3):
                assert not (await c.call_tool("files__read_file", {"path": "a.txt"})).is_error
            assert (await c.call_tool("files__write_file", {"path": "b", "content": "x"})).is_error

    with gateway(project, "--metrics", home=isolated_home) as (url, _):
        anyio.run(calls, url)
        refused = httpx2.get(f"{url}/metrics", timeout=30)
        agent = httpx2.get(f"{url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        shown = httpx2.get(
            f"{url}/metrics",
            headers={"Authorization": "Bearer metrics-token-0123456789"},
            timeout=30,
        )
    assert refused.status_code == 401 and agent.status_code == 401  # an agent's token is not it
    assert shown.status_code == 200 and shown.headers["content-type"].startswith("text/plain")
    samples = _samples(shown.text)
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
