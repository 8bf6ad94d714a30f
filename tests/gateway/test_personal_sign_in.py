"""Each person signs in to a server with its own authorization server themselves (#54 item 4,
`servers.NAME.auth.per_person`): through `serve` over HTTP, a person's first call ends with a
URL-mode elicitation (-32042) carrying a link of the gateway's; the link checks at the person's
identity provider that whoever opens it made the call, then runs the server's own OAuth; the
person's later calls carry their own tokens, and nobody else's.

The identity provider is the suite's issuer, extended with OpenID Connect's authorization code
flow (discovery, an authorization endpoint that signs in whoever the test says is at the
browser, a token endpoint that gives an ID token for the client with the sign-in's nonce). The
server is `tests/servers/oauth_server.py` (the SDK's server-side OAuth: discovery, dynamic
registration, PKCE), whose `sign_in` tool says which of its sign-ins a token is of. The browser
is a cookie-keeping HTTP client that follows redirects, as a browser does through these pages."""

from __future__ import annotations

import http.cookiejar
import json
import secrets
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import jwt
import pytest

from tests.cli.test_exec import free_port, listening
from tests.conftest import TEST_SERVERS, audit_records, send_json, write
from tests.gateway.test_gateway_http import client, gateway, refused_at_start, texts
from tests.gateway.test_gateway_identity import Issuer

WEB_CLIENT = "bundlectl-gateway-web"


class SigningInIssuer(Issuer):
    """The suite's issuer with OpenID Connect's authorization code flow for one public client:
    whoever `at_browser` names is signed in at once (no login page)."""

    def __init__(self) -> None:
        super().__init__()
        self.at_browser = "ana@example.test"
        self.codes: dict[str, dict[str, str]] = {}
        outer, handler = self, self.server.RequestHandlerClass
        original_get = handler.do_GET  # type: ignore[attr-defined]

        def do_get(self: Any) -> None:
            path, _, query = self.path.partition("?")
            if path == "/.well-known/openid-configuration":
                send_json(
                    self,
                    {
                        "issuer": outer.url,
                        "jwks_uri": f"{outer.url}/jwks",
                        "authorization_endpoint": f"{outer.url}/authorize",
                        "token_endpoint": f"{outer.url}/token",
                    },
                )
            elif path == "/authorize":
                asked = dict(urllib.parse.parse_qsl(query))
                code = secrets.token_urlsafe(16)
                outer.codes[code] = {**asked, "login": outer.at_browser}
                back = {"code": code, "state": asked["state"]}
                self.send_response(302)
                location = asked["redirect_uri"] + "?" + urllib.parse.urlencode(back)
                self.send_header("Location", location)
                self.end_headers()
            else:
                original_get(self)

        def do_post(self: Any) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
            asked = outer.codes.pop(form.get("code", ""), None)
            if asked is None or form.get("client_id") != WEB_CLIENT:
                self.send_response(400)
                self.end_headers()
                return
            now = int(time.time())
            claims = {
                "iss": outer.url,
                "sub": asked["login"],
                "aud": WEB_CLIENT,
                "nonce": asked["nonce"],
                "email": asked["login"],
                "iat": now,
                "exp": now + 300,
            }
            id_token = jwt.encode(claims, outer.key, algorithm="RS256", headers={"kid": outer.kid})
            send_json(self, {"id_token": id_token, "access_token": "x", "token_type": "Bearer"})

        handler.do_GET = do_get  # type: ignore[attr-defined]
        handler.do_POST = do_post  # type: ignore[attr-defined]


@pytest.fixture
def issuer() -> Iterator[SigningInIssuer]:
    found = SigningInIssuer()
    yield found
    found.server.shutdown()
    found.server.server_close()


@pytest.fixture
def linear() -> Iterator[int]:
    with listening([sys.executable, str(TEST_SERVERS / "oauth_server.py")]) as port:
        yield port


def _config(project: Path, issuer: Issuer, port: int) -> None:
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          linear:
            transport: streamable-http
            url: "http://127.0.0.1:{port}/mcp"
            auth: {{per_person: true}}
            tools: [{{name: sign_in}}]
        agents:
          dev:
            match: {{sub: "*@example.test"}}
            allow: [linear.sign_in]
        gateway:
          auth:
            issuers:
              - issuer: "{issuer.url}"
                audience: [bundlectl-gateway]
                client_id: {WEB_CLIENT}
        policy: {{default: deny}}
        """,
    )


def _browser() -> urllib.request.OpenerDirector:
    """A browser's part in the sign-in: its cookies kept, redirects followed."""
    jar = http.cookiejar.CookieJar()
    return urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))


def _opened(link: str) -> tuple[int, str]:
    try:
        with _browser().open(link, timeout=60) as page:
            return page.status, page.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read().decode()


async def _call(
    url: str, token: str, *, elicits: bool = True, mode: str = "auto"
) -> tuple[str | None, str]:
    """One call of linear.sign_in as the token's person: (the sign-in link it was answered
    with, or None; what the result says)."""
    from mcp.shared.exceptions import MCPError

    async def never(context: Any, params: Any) -> Any:
        raise AssertionError("the gateway sends no elicitation request: it answers -32042")

    options: dict[str, Any] = {"mode": mode}
    if elicits:
        options["elicitation_callback"] = never
    async with client(url, token, **options) as agent:
        try:
            result = await agent.call_tool("linear__sign_in", {})
        except MCPError as exc:
            error = exc.error
        else:
            return None, texts(result)[0]
    assert error.code == -32042, error
    [asked] = error.data["elicitations"]
    assert asked["mode"] == "url" and "Sign in to linear" in asked["message"]
    return asked["url"], error.message


def test_each_person_signs_in_to_the_server_through_a_link_only_they_can_use(
    project: Path, isolated_home: Path, issuer: SigningInIssuer, linear: int
) -> None:
    _config(project, issuer, linear)
    ana = issuer.token(sub="ana@example.test")
    bo = issuer.token(sub="bo@example.test")
    port = free_port()
    with gateway(project, "--port", str(port), home=isolated_home) as (url, _):
        link, _ = anyio.run(lambda: _call(url, ana))
        assert link is not None and link.startswith(f"{url}/connect/")
        issuer.at_browser = "ana@example.test"
        status, page = _opened(link)
        assert status == 200 and "Signed in to linear as ana@example.test" in page, page
        assert anyio.run(lambda: _call(url, ana)) == (None, "sign-in 1")
        # bo has a sign-in of his own to make (asked the same on the handshake protocol); his
        # link, forwarded to mallory, is no use to her
        assert anyio.run(lambda: _call(url, bo, mode="legacy"))[0] is not None
        bo_link, _ = anyio.run(lambda: _call(url, bo))
        assert bo_link is not None and bo_link != link
        issuer.at_browser = "mallory@example.test"
        status, page = _opened(bo_link)
        assert status == 403 and "you signed in as mallory@example.test" in page
        assert _opened(bo_link)[0] == 404  # good once
        assert anyio.run(lambda: _call(url, bo))[0] is not None  # bo is still not signed in
        # a client without URL elicitation is given the link in the result instead
        said = anyio.run(lambda: _call(url, bo, elicits=False))
        assert said[0] is None and f"Ask the user to open {url}/connect/" in said[1]
        issuer.at_browser = "bo@example.test"
        status, page = _opened(said[1].rsplit(" ", 1)[1])
        assert status == 200 and "as bo@example.test" in page
        assert anyio.run(lambda: _call(url, bo)) == (None, "sign-in 2")
        assert anyio.run(lambda: _call(url, ana)) == (None, "sign-in 1")
        assert _opened(link)[0] == 404  # a used link
    records = audit_records(isolated_home / "state" / "audit.jsonl")
    done = [(r["subject"], r["outcome"]) for r in records if r["outcome"] != "pending"]
    assert ("ana@example.test", "ok") in done and ("bo@example.test", "not-started") in done
    kept = json.dumps([p.read_text() for p in (isolated_home / "state" / "auth").glob("*")])
    log = (isolated_home / "state" / "audit.jsonl").read_text()
    for token in (ana, bo):
        assert token not in log and token not in kept


def test_a_server_people_sign_in_to_needs_an_issuer_that_can_check_who_opens_the_link(
    project: Path, issuer: SigningInIssuer, linear: int, isolated_home: Path
) -> None:
    _config(project, issuer, linear)
    config = project / "bundlectl.yaml"
    config.write_text(config.read_text().replace(f"client_id: {WEB_CLIENT}", ""))
    said = refused_at_start(project)
    assert "servers.linear.auth.per_person" in said and "client_id" in said
