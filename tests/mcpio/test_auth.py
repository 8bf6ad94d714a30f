"""OAuth sign-in to remote servers (issue 38, SPEC 12): `bundlectl auth login|status|logout`
against a real MCP server with its own authorization server (tests/servers/oauth_server.py:
RFC 9728 and 8414 metadata, dynamic registration, PKCE, refresh), a scripted browser following
the redirect to the loopback callback, and `exec` / `serve` using the kept sign-in."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bundlectl import credentials
from tests.cli.test_exec import free_port, wait_for_port
from tests.conftest import TEST_SERVERS, Run, audit_records, write

PY = sys.executable
BROWSER = f"{PY} {TEST_SERVERS / 'browser.py'} %s"


@contextlib.contextmanager
def oauth_server(port: int, log: Path, token_seconds: int = 3600) -> Iterator[int]:
    argv = [PY, str(TEST_SERVERS / "oauth_server.py"), "--port", str(port)]
    proc = subprocess.Popen(
        [*argv, "--token-seconds", str(token_seconds)],
        env={**os.environ, "OAUTH_LOG": str(log)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def remote(project: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("BROWSER", BROWSER)
    monkeypatch.setenv("BUNDLECTL_KEYRING", "off")  # the 0600 file, whatever this machine has
    return project


def configure(project: Path, port: int) -> None:
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          linear: {{transport: streamable-http, url: "http://127.0.0.1:{port}/mcp"}}
          static:
            transport: streamable-http
            url: "http://127.0.0.1:{port}/mcp"
            headers: {{Authorization: "Bearer ${{STATIC_TOKEN:-none}}"}}
        agents:
          bot: {{allow: ["linear.*"]}}
        policy: {{default: deny}}
        """,
    )


def test_sign_in_then_exec_uses_the_kept_tokens_which_nothing_shows(
    remote: Path, run: Run, tmp_path: Path, isolated_home: Path
) -> None:
    port = free_port()
    with oauth_server(port, tmp_path / "oauth.log"):
        configure(remote, port)
        before = run("exec", "-a", "bot", "linear.whoami")
        assert before.code == 5
        assert "requires authorization (HTTP 401)" in before.err
        assert "bundlectl auth login linear" in before.err
        signed = run("auth", "login", "linear", "--timeout", "60")
        assert signed.code == 0, signed.err
        assert "signed in to 'linear': scopes tools:read" in signed.out
        assert "sign in to 'linear' in your browser:" in signed.err
        assert "code_challenge_method=S256" in signed.err and "resource=" in signed.err
        called = run("exec", "-a", "bot", "linear.whoami")
        assert called.code == 0, called.err
        assert called.out.strip() == "alice@example.test"
        status = json.loads(run("auth", "status", "--format", "json").out)
        [kept, static] = status["servers"]
        assert (kept["server"], kept["signed_in"], kept["scopes"]) == (
            "linear",
            True,
            ["tools:read"],
        )
        assert 3000 < kept["expires_in"] <= 3600 and kept["refreshable"]
        assert static["static_header"] and not static["signed_in"]
        text = run("auth", "status")
        assert "signed in, expires in" in text.out and "static Authorization header" in text.out
        assert run("lock").code == 0

    [stored] = (isolated_home / "state" / "auth").glob("linear-*.json")
    assert stored.stat().st_mode & 0o777 == 0o600
    secrets = json.loads(stored.read_text())["tokens"]
    access, refresh = secrets["access_token"], secrets["refresh_token"]
    seen = [
        signed.out + signed.err + called.out + called.err + text.out + text.err,
        json.dumps(status),
        (remote / "bundlectl.lock").read_text(),
        (remote / "bundlectl.yaml").read_text(),
        json.dumps(audit_records(isolated_home / "state" / "audit.jsonl")),
    ]
    assert not any(access in s or refresh in s for s in seen)

    out = run("auth", "logout", "linear")
    assert out.code == 0 and "signed out of 'linear'" in out.out
    assert not list((isolated_home / "state" / "auth").glob("linear-*.json"))
    assert "not signed in" in run("auth", "status").out
    assert "not signed in to 'linear'" in run("auth", "logout", "linear").out


def test_an_expired_access_token_is_refreshed_without_asking(
    remote: Path, run: Run, tmp_path: Path
) -> None:
    port, log = free_port(), tmp_path / "oauth.log"
    with oauth_server(port, log, token_seconds=2):
        configure(remote, port)
        assert run("auth", "login", "linear", "--timeout", "60").code == 0
        url = f"http://127.0.0.1:{port}/mcp"
        kept = credentials.load("linear", url)
        deadline = time.monotonic() + 30
        while (credentials.expires_in(kept) or 0) > -0.5:  # until the token is surely expired
            assert time.monotonic() < deadline
            time.sleep(0.05)
        called = run("exec", "-a", "bot", "linear.whoami")
        assert called.code == 0, called.err
        assert log.read_text().split() == ["code", "refresh"]
        renewed = credentials.load("linear", url)
        assert renewed.tokens is not None and kept.tokens is not None
        assert renewed.tokens["access_token"] != kept.tokens["access_token"]


def test_a_sign_in_the_server_forgot_asks_for_login_instead_of_waiting(
    remote: Path, run: Run, tmp_path: Path
) -> None:
    """The authorization server restarted (its tokens gone): `exec` cannot sign in again by
    itself; it says how, exit 5, at once."""
    port = free_port()
    with oauth_server(port, tmp_path / "one.log", token_seconds=2):
        configure(remote, port)
        assert run("auth", "login", "linear", "--timeout", "60").code == 0
    kept = credentials.load("linear", f"http://127.0.0.1:{port}/mcp")
    deadline = time.monotonic() + 30
    while (credentials.expires_in(kept) or 0) > -0.5:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    with oauth_server(port, tmp_path / "two.log"):
        began = time.monotonic()
        refused = run("exec", "-a", "bot", "linear.whoami")
        assert refused.code == 5, refused.err
        assert "needs you to sign in (OAuth)" in refused.err
        assert "`bundlectl auth login linear`" in refused.err
        assert time.monotonic() - began < 20


def test_a_refused_sign_in_and_a_local_server_are_clear_errors(
    remote: Path, run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    with oauth_server(port, tmp_path / "oauth.log"):
        configure(remote, port)
        monkeypatch.setenv("BROWSER", f"{PY} {TEST_SERVERS / 'browser.py'} --deny %s")
        refused = run("auth", "login", "linear", "--timeout", "60")
        assert refused.code == 5
        assert "the authorization server refused the sign-in: access_denied" in refused.err
    write(
        remote / "bundlectl.yaml",
        "version: 1\nbundles: [basic]\npolicy: {default: deny}\n",
    )
    local = run("auth", "login", "files")
    assert local.code == 2 and "only remote servers" in local.err
    unknown = run("auth", "login", "nope")
    assert unknown.code == 2


@pytest.mark.parametrize(
    "elsewhere",
    ["http://auth.evil.example/", "http://127.0.0.1.evil.example/", "https://u@auth.example/"],
)
def test_a_sign_in_the_server_sends_outside_the_url_rule_is_refused(
    remote: Path, run: Run, elsewhere: str
) -> None:
    """#52 item 6's rule for "every URL ... a server's metadata hands us": a remote server's
    RFC 9728 metadata names its authorization server, to which the sign-in sends the client's
    registration, the code and its verifier, and later the refresh token. Plain http to
    another host (or a user name in the URL) is refused before anything is sent there (one
    client makes every request of a sign-in: `auth login`'s, a person's through the gateway,
    a kept sign-in's refresh)."""
    import http.server
    import threading

    from tests.conftest import send_json

    asked: list[str] = []

    class Protected(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            port = self.server.server_address[1]
            url = f"http://127.0.0.1:{port}/mcp"
            send_json(self, {"resource": url, "authorization_servers": [elsewhere]})

        def do_POST(self) -> None:
            port = self.server.server_address[1]
            metadata = f"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp"
            self.send_response(401)
            self.send_header("WWW-Authenticate", f'Bearer resource_metadata="{metadata}"')
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Protected)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        configure(remote, server.server_address[1])
        refused = run("auth", "login", "linear", "--no-browser", "--timeout", "30")
        assert refused.code == 5, refused.err
        assert f"server 'linear' sends bundlectl to {elsewhere}" in refused.err, refused.err
        assert "nothing was sent there" in refused.err
    finally:
        server.shutdown()
        server.server_close()
    assert asked and all(path.startswith("/.well-known/oauth-protected-resource") for path in asked)


def test_the_gateway_uses_the_kept_sign_in(remote: Path, run: Run, tmp_path: Path) -> None:
    from tests.gateway.test_gateway_inprocess import serve_in_process, texts

    port = free_port()
    with oauth_server(port, tmp_path / "oauth.log"):
        configure(remote, port)
        assert run("auth", "login", "linear", "--timeout", "60").code == 0

        async def call(client: Any) -> Any:
            return await client.call_tool("linear__whoami", {})

        result = serve_in_process(remote, "bot", call)
    assert not result.is_error, texts(result)
    assert texts(result) == ["alice@example.test"]
