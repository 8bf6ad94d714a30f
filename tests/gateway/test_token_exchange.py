"""Calls on behalf of the person (issue 54, item 4): a remote server with `auth.exchange` gets,
with each call through `serve` over HTTP, a token the caller's issuer made for that server from
the caller's own (RFC 8693) — never a shared credential. The issuer here is the suite's own,
extended with a token endpoint that exchanges as a real one does (client authentication,
the subject token verified, `act` naming the gateway's client), on loopback; the server is the
suite's kitchen over streamable HTTP, which reports the claims of the token it was sent."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import jwt
import pytest

from tests.cli.test_exec import listening
from tests.conftest import TEST_SERVERS, audit_records, send_json, write
from tests.gateway.test_gateway_http import client, gateway, texts
from tests.gateway.test_gateway_identity import Issuer

AUDIENCE = "https://mcp.kitchen.example"
CLIENT, SECRET = "bundlectl-gateway", "s3cret-of-the-gateway-client-0123456789"
REFUSED = "mallory@example.test"  # the issuer will not exchange this person's tokens


class ExchangingIssuer(Issuer):
    """The suite's issuer with a token endpoint that does RFC 8693 token exchange."""

    def __init__(self) -> None:
        super().__init__()
        self.exchanged: list[dict[str, str]] = []  # the forms of the exchanges it made
        outer, handler = self, self.server.RequestHandlerClass
        original_get = handler.do_GET  # type: ignore[attr-defined]

        def do_get(self: Any) -> None:
            if self.path == "/.well-known/openid-configuration":
                send_json(
                    self,
                    {
                        "issuer": outer.url,
                        "jwks_uri": f"{outer.url}/jwks",
                        "token_endpoint": f"{outer.url}/token",
                    },
                )
                return
            original_get(self)

        def do_post(self: Any) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
            status, body = outer.exchange(form, self.headers.get("Authorization") or "")
            self.send_response(status)
            data = json.dumps(body).encode()
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        handler.do_GET = do_get  # type: ignore[attr-defined]
        handler.do_POST = do_post  # type: ignore[attr-defined]

    def exchange(self, form: dict[str, str], authorization: str) -> tuple[int, dict[str, Any]]:
        expected = "Basic " + base64.b64encode(f"{CLIENT}:{SECRET}".encode()).decode()
        if authorization != expected:
            return 401, {"error": "invalid_client"}
        if form.get("grant_type") != "urn:ietf:params:oauth:grant-type:token-exchange":
            return 400, {"error": "unsupported_grant_type"}
        try:
            subject = jwt.decode(
                form["subject_token"],
                self.key.public_key(),
                algorithms=["RS256"],
                audience="bundlectl-gateway",
                issuer=self.url,
            )
        except (KeyError, jwt.PyJWTError) as exc:
            return 400, {"error": "invalid_grant", "error_description": str(exc)}
        if subject.get("sub") == REFUSED:
            return 400, {"error": "invalid_grant", "error_description": "not for this audience"}
        self.exchanged.append(form)
        now = int(time.time())
        claims = {
            "iss": self.url,
            "sub": subject["sub"],
            "aud": form["audience"],
            "act": {"sub": CLIENT},
            "scope": form.get("scope", ""),
            "iat": now,
            "exp": now + 600,
        }
        token = jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": self.kid})
        return 200, {
            "access_token": token,
            "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
            "token_type": "Bearer",
            "expires_in": 600,
        }


@pytest.fixture
def issuer() -> Iterator[ExchangingIssuer]:
    found = ExchangingIssuer()
    yield found
    found.server.shutdown()
    found.server.server_close()


@pytest.fixture
def kitchen() -> Iterator[int]:
    with listening(
        [sys.executable, str(TEST_SERVERS / "kitchen.py"), "--transport", "streamable-http"]
    ) as port:
        yield port


def _config(project: Path, issuer: Issuer, port: int) -> None:
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          kitchen:
            transport: streamable-http
            url: "http://127.0.0.1:{port}/mcp"
            auth:
              client_id: {CLIENT}
              client_secret: ${{KITCHEN_EXCHANGE_SECRET}}
              exchange: {{audience: "{AUDIENCE}", scopes: [kitchen.read]}}
        agents:
          cook:
            match: {{sub: "*@example.test"}}
            allow: [kitchen.bearer_claims]
        gateway:
          auth:
            issuers:
              - {{issuer: "{issuer.url}", audience: [bundlectl-gateway]}}
        policy: {{default: deny}}
        """,
    )


def test_each_person_s_calls_carry_a_token_made_for_them(
    project: Path,
    isolated_home: Path,
    issuer: ExchangingIssuer,
    kitchen: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _config(project, issuer, kitchen)
    monkeypatch.setenv("KITCHEN_EXCHANGE_SECRET", SECRET)
    ana = issuer.token(sub="ana@example.test")
    bo = issuer.token(sub="bo@example.test")
    mallory = issuer.token(sub=REFUSED)

    async def calls(url: str) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for name, token in (("ana", ana), ("bo", bo), ("mallory", mallory)):
            async with client(url, token) as c:
                first = await c.call_tool("kitchen__bearer_claims", {})
                again = await c.call_tool("kitchen__bearer_claims", {})
                seen[name] = (first, again)
        return seen

    with gateway(project, home=isolated_home) as (url, _):
        seen = anyio.run(calls, url)

    for person in ("ana", "bo"):
        first, again = seen[person]
        assert not first.is_error, texts(first)
        claims = first.structured_content
        assert claims["sub"] == f"{person}@example.test"
        assert claims["aud"] == AUDIENCE and claims["act"] == {"sub": CLIENT}
        assert claims["scope"] == "kitchen.read"
        assert again.structured_content == claims  # the same token: kept, not exchanged again
    # one exchange per person (the second call took the kept token); mallory's was refused
    assert [
        jwt.decode(f["subject_token"], options={"verify_signature": False})["sub"]
        for f in issuer.exchanged
    ] == ["ana@example.test", "bo@example.test"]
    assert all(f["audience"] == AUDIENCE for f in issuer.exchanged)
    refused, _ = seen["mallory"]
    assert refused.is_error
    said = texts(refused)[0]
    assert "would not exchange the token of 'mallory@example.test'" in said
    assert "invalid_grant (not for this audience)" in said
    records = audit_records(isolated_home / "state" / "audit.jsonl")
    done = [(r["subject"], r["outcome"]) for r in records if r["outcome"] != "pending"]
    assert done == [
        ("ana@example.test", "ok"),
        ("ana@example.test", "ok"),
        ("bo@example.test", "ok"),
        ("bo@example.test", "ok"),
        (REFUSED, "not-started"),
        (REFUSED, "not-started"),
    ]
    log = (isolated_home / "state" / "audit.jsonl").read_text()
    for token in (ana, bo, mallory, SECRET):  # no token, and no secret, is ever written
        assert token not in log


def test_a_server_that_takes_calls_for_people_is_refused_without_one(
    project: Path, issuer: ExchangingIssuer, kitchen: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    _config(project, issuer, kitchen)
    monkeypatch.setenv("KITCHEN_EXCHANGE_SECRET", SECRET)
    done = subprocess.run(
        [sys.executable, "-m", "bundlectl", "exec", "--agent", "cook", "kitchen.bearer_claims"],
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "takes calls only on behalf of a person" in done.stderr
    assert "bundlectl serve --transport streamable-http" in done.stderr
    assert "Traceback" not in done.stderr


def test_exchange_without_a_client_id_is_a_config_error(project: Path, run: Any) -> None:
    write(
        project / "bundlectl.yaml",
        """
        version: 1
        servers:
          kitchen:
            transport: streamable-http
            url: "http://127.0.0.1:9/mcp"
            auth: {exchange: {audience: "https://mcp.kitchen.example"}}
        """,
    )
    result = run("lint")
    assert result.code == 1
    assert "bundlectl.yaml:6:5: BCL003 error exchange needs client_id" in result.out


def test_a_changed_audience_is_exchanged_for_again(issuer: ExchangingIssuer) -> None:
    """A reload that changes what a server's token is for never reuses the kept one."""
    from bundlectl.config.models import ServerAuth
    from bundlectl.gateway.exchange import Exchanger
    from bundlectl.gateway.identity import Caller

    caller = Caller("ana@example.test", issuer.url, issuer.token(sub="ana@example.test"))
    exchanger = Exchanger()

    def auth(audience: str) -> ServerAuth:
        return ServerAuth.model_validate(
            {"client_id": CLIENT, "client_secret": SECRET, "exchange": {"audience": audience}}
        )

    async def tokens() -> list[str]:
        return [
            await exchanger.token("kitchen", auth(audience), caller)
            for audience in (AUDIENCE, AUDIENCE, "https://other.example")
        ]

    first, kept, other = anyio.run(tokens)
    assert kept == first and other != first
    assert [form["audience"] for form in issuer.exchanged] == [AUDIENCE, "https://other.example"]
