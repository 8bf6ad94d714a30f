"""From a person's approval to the held call running (issue 54's goal: <= 200 ms): an agent's
call held open by `serve --transport streamable-http` for an approver (its client follows
progress, so it waits for the answer instead of an id to retry with); the approver approves
through the approvers' API with their own access token (a JWT of the team's issuer); timed from
the approver's POST to the agent's call returning its result.

    python bench/bench_approver_api.py [--runs 10]

The issuer is a minimal OpenID Connect provider in this process (discovery and JWKS on
loopback, a real RSA key); the gateway verifies both tokens as it does in production.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2
import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _issuer() -> str:
    """The issuer's URL: its discovery document and JWKS, served from a thread."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = f"http://127.0.0.1:{self.server.server_address[1]}"
            if self.path == "/.well-known/openid-configuration":
                body: dict[str, Any] = {"issuer": url, "jwks_uri": f"{url}/jwks"}
            else:
                public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(KEY.public_key()))
                body = {"keys": [{**public, "kid": "k1", "use": "sig", "alg": "RS256"}]}
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def _token(issuer: str, **claims: Any) -> str:
    now = int(time.time())
    body = {"iss": issuer, "aud": "bundlectl-gateway", "iat": now, "exp": now + 3600, **claims}
    return jwt.encode(body, KEY, algorithm="RS256", headers={"kid": "k1"})


async def _held_call(url: str, token: str, path: str) -> float:
    """Make the call (held open for an approver); the moment its result came back."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async def progress(done: float, total: float | None, message: str | None) -> None:
        pass

    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http), mode="legacy") as client,
    ):
        result = await client.call_tool(
            "files__write_file", {"path": path, "content": "go"}, progress_callback=progress
        )
        ended = time.perf_counter()
        assert not result.is_error, result
        return ended


async def _one(url: str, agent: str, approver: str, run: int) -> float:
    """One held call approved through the API: ms from the approver's POST to the result."""
    posted: list[float] = []

    async def approve() -> None:
        async with httpx2.AsyncClient(timeout=30) as http:
            headers = {"Authorization": f"Bearer {approver}"}
            while True:
                listed = await http.get(f"{url}/approvals/requests.json", headers=headers)
                pending = [a for a in listed.json()["approvals"] if a["status"] == "pending"]
                if pending:
                    break
                await anyio.sleep(0.02)
            await anyio.sleep(random.uniform(0.05, 0.3))  # a person decides at some moment
            posted.append(time.perf_counter())
            answer = await http.post(
                f"{url}/approvals/{pending[0]['id']}.json",
                json={"decision": "approve"},
                headers=headers,
            )
            assert answer.status_code == 200, answer.text

    async with anyio.create_task_group() as group:
        group.start_soon(approve)
        ended = await _held_call(url, agent, f"run-{run}.txt")
    return (ended - posted[0]) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    runs = parser.parse_args().runs
    issuer = _issuer()
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "bundlectl.yaml").write_text(
            f"""version: 1
bundles: [basic]
agents:
  dev:
    match: {{groups: [devs]}}
    ask: [{{tool: files.write_file, approve: out-of-band}}]
gateway:
  auth:
    issuers: [{{issuer: "{issuer}", audience: [bundlectl-gateway]}}]
policy:
  default: deny
  approvals: {{ttl: 10m, hold: 2m, approvers: {{match: {{groups: [approvers]}}}}}}
"""
        )
        env = {**os.environ, "BUNDLECTL_HOME": str(Path(tmp, "home"))}
        command = ["serve", "--transport", "streamable-http", "--port", "0"]
        serve = subprocess.Popen(
            [sys.executable, "-m", "bundlectl", *command],
            cwd=tmp,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            assert serve.stderr is not None
            found = re.search(r"on (http://\S+)/mcp", serve.stderr.readline().decode())
            assert found, "serve did not start"
            url = found.group(1)
            agent = _token(issuer, sub="ana", groups=["devs"])
            approver = _token(issuer, sub="carol", groups=["approvers"], name="Carol")
            times = [anyio.run(_one, url, agent, approver, run) for run in range(runs)]
        finally:
            serve.terminate()
            serve.wait(10)
    times.sort()
    print(
        f"approval by the API with a JWT -> the held call's result: median "
        f"{statistics.median(times):.0f} ms, worst {times[-1]:.0f} ms ({runs} runs)"
    )


if __name__ == "__main__":
    main()
