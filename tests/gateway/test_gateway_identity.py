"""Identities in front of the gateway (issue 38, SPEC 12): access tokens (JWTs) of an OIDC
issuer written here (its metadata and JWKS on loopback, a real RSA key), verified by
`serve --transport streamable-http` and mapped to agents by their claims; every kind of bad
token refused; RFC 9728 metadata and the 401's `resource_metadata`."""

from __future__ import annotations

import functools
import http.server
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.conftest import audit_records, make_registry, send_json, tls, write
from tests.gateway.test_gateway_http import client, gateway, refused_at_start


@functools.cache
def _signing_keys() -> tuple[rsa.RSAPrivateKey, rsa.RSAPrivateKey]:
    """The issuers' signing key and a key that is not theirs, made once a process: a 2048-bit
    key takes ~0.1 s to make, two for each of some 60 tests. Each test's issuer is its own
    server, at its own address."""
    made = [rsa.generate_private_key(public_exponent=65537, key_size=2048) for _ in range(2)]
    return made[0], made[1]


class Issuer:
    """An OIDC provider's public side: discovery metadata and its signing keys (JWKS)."""

    def __init__(self) -> None:
        self.key, self.other = _signing_keys()
        self.jwks_fetches = 0
        self.kid = "k1"
        issuer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/.well-known/openid-configuration":
                    body = {"issuer": issuer.url, "jwks_uri": f"{issuer.url}/jwks"}
                elif self.path == "/jwks":
                    issuer.jwks_fetches += 1
                    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(issuer.key.public_key()))
                    body = {"keys": [{**public, "kid": issuer.kid, "use": "sig", "alg": "RS256"}]}
                else:
                    self.send_error(404)
                    return
                send_json(self, body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def token(self, *, key: Any = None, kid: str = "k1", **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": self.url, "aud": "bundlectl-gateway", "iat": now, "exp": now + 300}
        body.update(claims)
        body = {k: v for k, v in body.items() if v is not None}
        return jwt.encode(body, key or self.key, algorithm="RS256", headers={"kid": kid})


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    found = Issuer()
    yield found
    found.server.shutdown()
    found.server.server_close()


def _config(project: Path, issuer: Issuer) -> None:
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        bundles: [basic]
        agents:
          reviewer:
            match: {{sub: "*@example.test", groups: [reviewers]}}
            allow: [files.read_file]
          ci:
            match: {{client_id: ci-bot}}
            allow: [files.list_directory]
          both:
            match: {{client_id: "twin-*"}}
            allow: [files.read_file]
          twin:
            match: {{client_id: "twin-?"}}
            allow: [files.read_file]
        gateway:
          auth:
            issuers:
              - {{issuer: "{issuer.url}", audience: [bundlectl-gateway]}}
        policy: {{default: deny}}
        """,
    )


async def _tools(url: str, token: str) -> list[str]:
    async with client(url, token) as c:
        return sorted(t.name for t in (await c.list_tools()).tools)


def _raw(url: str, token: str | None) -> Any:
    import httpx2

    headers = {"Accept": "application/json, text/event-stream"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    return httpx2.post(f"{url}/mcp", json=body, headers=headers, timeout=30, verify=tls())


def test_verified_tokens_pick_their_agent_by_claims(
    project: Path, issuer: Issuer, isolated_home: Path
) -> None:
    _config(project, issuer)
    alice = issuer.token(sub="alice@example.test", groups=["staff", "reviewers"])
    robot = issuer.token(sub="svc-123", client_id="ci-bot")
    (project / "a.txt").write_text("hi")

    async def read(url: str, token: str) -> Any:
        async with client(url, token) as c:
            return await c.call_tool("files__read_file", {"path": "a.txt"})

    with gateway(project, home=isolated_home) as (url, _):
        assert anyio.run(_tools, url, alice) == ["files__read_file"]
        assert anyio.run(_tools, url, robot) == ["files__list_directory"]
        assert not anyio.run(read, url, alice).is_error
        metadata = __import__("httpx2").get(f"{url}/.well-known/oauth-protected-resource/mcp")
    assert metadata.json()["authorization_servers"] == [issuer.url]
    assert metadata.json()["resource"] == f"{url}/mcp"
    assert issuer.jwks_fetches == 1  # the keys are cached
    records = audit_records(isolated_home / "state" / "audit.jsonl")
    calls = [r for r in records if r["tool"] == "read_file"]
    # (the `pending` record of the call is checked against this one by audit_records)
    assert [(r["agent"], r["subject"], r["outcome"]) for r in calls] == [
        ("reviewer", "alice@example.test", "ok")
    ]
    raw = (isolated_home / "state" / "audit.jsonl").read_text()
    assert alice not in raw and robot not in raw


def test_every_bad_token_is_refused_with_a_reason(
    project: Path, issuer: Issuer, isolated_home: Path
) -> None:
    _config(project, issuer)
    now = int(time.time())
    unsigned = jwt.encode(
        {"iss": issuer.url, "aud": "bundlectl-gateway", "exp": now + 300, "client_id": "ci-bot"},
        key=None,
        algorithm="none",
    )
    shared = jwt.encode(  # HS256 with the public key as the secret: the classic confusion
        {"iss": issuer.url, "aud": "bundlectl-gateway", "exp": now + 300, "client_id": "ci-bot"},
        "a-shared-secret-of-enough-length-for-hs256",
        algorithm="HS256",
    )
    cases = {
        "no token": (None, 401, "send Authorization: Bearer"),
        "not a jwt, not a token": ("x" * 40, 401, "unknown token"),
        "expired": (issuer.token(client_id="ci-bot", exp=now - 3600), 401, "expired"),
        "not yet valid": (issuer.token(client_id="ci-bot", nbf=now + 3600), 401, "not yet valid"),
        "another audience": (
            issuer.token(client_id="ci-bot", aud="other"),
            401,
            "Audience doesn't match",
        ),
        "another issuer": (issuer.token(client_id="ci-bot", iss="https://evil"), 401, "issuer"),
        "no expiry": (issuer.token(client_id="ci-bot", exp=None), 401, "exp"),
        "alg none": (unsigned, 401, "algorithm 'none' is not accepted"),
        "alg HS256": (shared, 401, "algorithm 'HS256' is not accepted"),
        "a key it does not publish": (
            issuer.token(client_id="ci-bot", key=issuer.other, kid="k9"),
            401,
            "a key the issuer does not publish",
        ),
        "the right kid, the wrong key": (
            issuer.token(client_id="ci-bot", key=issuer.other),
            401,
            "Signature verification failed",
        ),
        "no agent's claims": (
            issuer.token(sub="mallory", client_id="x"),
            403,
            "(it carries: aud, client_id, exp, iat, iss, sub); the matches are under "
            "agents.NAME.match",  # the claims' names, never their values (#56)
        ),
        "several agents' claims": (issuer.token(client_id="twin-1"), 403, "several agents"),
    }
    with gateway(project, home=isolated_home) as (url, _):
        for name, (token, status, said) in cases.items():
            answer = _raw(url, token)
            assert answer.status_code == status, (name, answer.text)
            assert said in answer.json()["error"], (name, answer.text)
            challenge = answer.headers["www-authenticate"]
            assert f'resource_metadata="{url}/.well-known/oauth-protected-resource/mcp"' in (
                challenge
            )
        assert anyio.run(_tools, url, issuer.token(client_id="ci-bot")) == ["files__list_directory"]
    # an unknown key id ("k9") fetches the keys again at most every 30 s: not so soon
    assert issuer.jwks_fetches == 1


def test_a_token_that_fits_no_agent_gets_policy_default_only_when_the_config_says_so(
    project: Path, issuer: Issuer, isolated_home: Path
) -> None:
    """#38: `gateway.auth.unmatched: default` serves a valid token that fits no agent's
    `match:` as agent `default` (what policy.default gives); a token that fits several agents
    is still refused, and so is every invalid one."""
    _config(project, issuer)
    text = (project / "bundlectl.yaml").read_text()
    text = text.replace(
        "audience: [bundlectl-gateway]}", "audience: [bundlectl-gateway]}\n    unmatched: default"
    )
    text = text.replace(
        "policy: {default: deny}", "policy: {default: allow, deny: [files.write_file]}"
    )
    write(project / "bundlectl.yaml", text)
    stranger = issuer.token(sub="mallory", client_id="x")
    with gateway(project, home=isolated_home) as (url, _):
        tools = anyio.run(_tools, url, stranger)
        assert "files__read_file" in tools and "files__write_file" not in tools
        assert _raw(url, issuer.token(client_id="twin-1")).status_code == 403
        assert _raw(url, issuer.token(sub="mallory", exp=int(time.time()) - 60)).status_code == 401
    records = audit_records(isolated_home / "state" / "audit.jsonl")
    assert not [r for r in records if r["agent"] == "default" and r["outcome"] == "unauthorized"]


def test_unmatched_tokens_never_get_a_listed_agent_named_default(
    project: Path, issuer: Issuer, run: Any
) -> None:
    """#52 item 2: with `unmatched: default`, an agent listed as `default` (with a `match:` of
    its own) would go to every stranger: the combination is refused at load, naming both."""
    _config(project, issuer)
    text = (project / "bundlectl.yaml").read_text()
    text = text.replace(
        "audience: [bundlectl-gateway]}", "audience: [bundlectl-gateway]}\n    unmatched: default"
    )
    text = text.replace(
        "agents:\n", "agents:\n  default: {match: {groups: [ops-oncall]}, allow: [files.*]}\n"
    )
    write(project / "bundlectl.yaml", text)
    for command in (("resolve",), ("serve", "--transport", "streamable-http"), ("lint",)):
        refused = run(*command)
        assert refused.code == 2 if command[0] != "lint" else refused.code == 1, refused.err
        said = refused.err + refused.out
        assert "bundlectl.yaml:21:16: " in said and "'default' serves every valid token" in said
        assert "bundlectl.yaml:4:3: " in said and "the agent that gateway.auth.unmatched" in said


def test_a_default_agent_from_a_bundle_or_the_user_file_is_refused_beside_unmatched_default(
    project: Path, issuer: Issuer, run: Any
) -> None:
    """#52 item 2, the variants the project file cannot show: an agent `default` that a
    bundle's agent defaults or the user-level file bring would also go to every stranger. The
    project resolves with an error naming `unmatched` and where the agent comes from, for every
    command that resolves (`serve` included, so a reload keeps the gateway as it was), and lint
    says it at the same position."""
    from bundlectl.config import paths

    _config(project, issuer)
    text = (
        (project / "bundlectl.yaml")
        .read_text()
        .replace(
            "audience: [bundlectl-gateway]}",
            "audience: [bundlectl-gateway]}\n    unmatched: default",
        )
    )
    make_registry(
        project / "registry",
        {"team": {"1.0.0": {"description": "t", "agents": {"default": {"allow": ["files.*"]}}}}},
    )
    bundled = text.replace("bundles: [basic]", "bundles: [basic, team]\nregistries: [./registry]")
    write(project / "bundlectl.yaml", bundled)
    for command in (("resolve",), ("serve", "--transport", "streamable-http"), ("lint",)):
        refused = run(*command)
        assert refused.code == (1 if command[0] == "lint" else 2), refused.err
        said = refused.err + refused.out
        assert "bundlectl.yaml:21:16: " in said, said
        assert "the agent defaults of bundle team@1.0.0 (" in said and "strangers" in said

    write(project / "bundlectl.yaml", text)
    user = paths.user_project_file()
    assert user is not None
    write(user, "version: 1\nagents:\n  default: {allow: [files.write_file]}\n")
    refused = run("resolve")
    assert refused.code == 2 and "bundlectl.yaml:20:16: " in refused.err, refused.err
    assert "the user-level file (" in refused.err
    assert "config/bundlectl.yaml:3:12) lists an agent of that name" in refused.err
    user.unlink()
    assert run("resolve").code == 0


def test_issuers_without_any_agent_to_match_are_refused_at_start(
    project: Path, issuer: Issuer, isolated_home: Path
) -> None:
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        bundles: [basic]
        agents:
          reader: {{allow: [files.read_file]}}
        gateway: {{auth: {{issuers: [{{issuer: "{issuer.url}", audience: [gw]}}]}}}}
        policy: {{default: deny}}
        """,
    )
    assert "no agent has a match: for their tokens' claims" in refused_at_start(project)


def test_keys_the_issuer_rotated_in_are_fetched(
    project: Path, issuer: Issuer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bundlectl.config.project import load_project
    from bundlectl.gateway import identity

    _config(project, issuer)
    verifier = identity.Verifier(load_project(project / "bundlectl.yaml").config)
    first = anyio.run(verifier.verdict, issuer.token(client_id="ci-bot"))
    assert (first.agent, issuer.jwks_fetches) == ("ci", 1)
    issuer.key, issuer.kid = issuer.other, "k2"  # the issuer rotates its signing key
    rotated = issuer.token(client_id="ci-bot", kid="k2")
    assert anyio.run(verifier.verdict, rotated).agent is None  # too soon to fetch again
    monkeypatch.setattr(identity, "REFETCH_EVERY", 0.0)
    assert anyio.run(verifier.verdict, rotated).agent == "ci"
    assert issuer.jwks_fetches == 2


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1.evil.example/",
        "http://localhost.evil.example",
        "http://localhost@evil.example/",
        "http://evil.example/",
        "file:///etc/passwd",
    ],
)
def test_plain_http_reaches_this_machine_only(project: Path, run: Any, url: str) -> None:
    """#52 item 6: the loopback exception of issuer, JWKS and registry URLs is the host
    itself (a loopback address or exactly `localhost`), never a look-alike or userinfo."""
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        registries: ["{url}"]
        agents:
          a: {{match: {{sub: x}}}}
        gateway:
          auth:
            issuers: [{{issuer: "{url}", jwks_url: "{url}", audience: [gw]}}]
        """,
    )
    refused = run("resolve")
    assert refused.code == 2, refused.err
    for where in ("2:14: registries[0]", "7:24: gateway.auth.issuers[0].issuer", "jwks_url"):
        assert where in refused.err, refused.err
    assert refused.err.count("use https://, or plain http:// to 127.0.0.1") == 3


def test_a_jwks_uri_the_metadata_hands_over_obeys_the_same_rule(issuer: Issuer) -> None:
    from bundlectl.config.settings import TokenIssuer
    from bundlectl.config.urls import RefusedUrl
    from bundlectl.gateway.identity import _fetch_keys

    class Metadata(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            send_json(self, {"issuer": url, "jwks_uri": "http://127.0.0.1.evil.example/jwks"})

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metadata)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(RefusedUrl, match=r"plain http to 127\.0\.0\.1\.evil\.example"):
            _fetch_keys(TokenIssuer(issuer=url, audience=["gw"]))
        assert len(_fetch_keys(TokenIssuer(issuer=issuer.url, audience=["gw"]))) == 1
    finally:
        server.shutdown()
        server.server_close()


def test_a_mailbox_claim_fits_only_when_verified_and_by_its_exact_domain() -> None:
    """#52 item 9: `*@acme.example` fitted `eve@evil.example#@acme.example`, and
    `email_verified` was never read."""
    from bundlectl.policy.claims import fits as _fits

    wanted: dict[str, str | list[str]] = {"email": "*@acme.example"}

    def fits(email: str, verified: object = True) -> bool:
        return _fits({"email": email, "email_verified": verified}, wanted)

    assert fits("ana@acme.example") and fits("Ana@ACME.example")
    assert not fits("ana@acme.example", verified=False)
    assert not fits("ana@acme.example", verified="true")  # a string is not the boolean
    assert not _fits({"email": "ana@acme.example"}, wanted)  # no email_verified at all
    for forged in (
        "eve@evil.example#@acme.example",
        "eve@evil.example@acme.example",
        "eve@sub.acme.example",
        "eve@acme.example.evil.example",
        "@acme.example",
        "eve@acme.example ",
    ):
        assert not fits(forged), forged
    assert _fits({"email": "x@y.z", "email_verified": True}, {"email": "*"})
    # An address glob is an address in every claim (no verification to ask for there): the
    # same forgeries fail in `sub`, `upn`, `preferred_username`.
    for claim in ("sub", "upn", "preferred_username"):
        assert _fits({claim: "ana@ACME.example"}, {claim: "*@acme.example"})
        for forged in ("eve@evil.example#@acme.example", "eve@evil.example@acme.example"):
            assert not _fits({claim: forged}, {claim: "*@acme.example"}), (claim, forged)
    subdomains: dict[str, str | list[str]] = {"sub": "ci-*@*.acme.example"}
    assert _fits({"sub": "ci-1@eu.acme.example"}, subdomains)
    assert not _fits({"sub": "ci-1@evil.example/@eu.acme.example"}, subdomains)
    assert not _fits({"sub": "ci-1@evil.example#.acme.example"}, subdomains)


def test_approvers_are_people_with_their_own_tokens_and_never_approve_their_own_calls(
    project: Path, issuer: Issuer, isolated_home: Path, run: Any
) -> None:
    """#54 items 1-2: `policy.approvals.approvers: {match: ...}` — the approvers' API takes an
    approver's own access token, records who decided (the verified email, else the name) in
    the request, `approvals show` and the audit; a person without the approvers' match gets
    403 naming the match; the person who made a call cannot approve it (403, audited); with
    `approvals: 2`, two different people approve before the call runs."""
    import httpx2

    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        bundles: [basic]
        agents:
          dev:
            match: {{groups: [devs]}}
            ask: [{{tool: files.write_file, approve: out-of-band, approvals: 2}}]
        gateway:
          auth:
            issuers: [{{issuer: "{issuer.url}", audience: [bundlectl-gateway]}}]
        policy:
          default: deny
          approvals:
            ttl: 10m
            approvers: {{match: {{groups: [platform-approvers]}}}}
        """,
    )
    dave = issuer.token(sub="dave", groups=["platform-approvers"], preferred_username="dave")
    ana = issuer.token(sub="ana", groups=["devs", "platform-approvers"], name="Ana")
    bob = issuer.token(sub="bob", groups=["devs"])
    carol = issuer.token(
        sub="carol", groups=["platform-approvers"], email="carol@acme.example",
        email_verified=True,
    )  # fmt: skip
    arguments = {"path": "deploy.txt", "content": "go"}

    async def write_as(url: str, token: str) -> str:
        async with client(url, token) as session:
            answer = await session.call_tool("files__write_file", arguments)
            return str(answer.content[0].text)

    def decide(url: str, request_id: str, token: str) -> Any:
        return httpx2.post(
            f"{url}/approvals/{request_id}.json",
            json={"decision": "approve"},
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )

    with gateway(project, home=isolated_home) as (url, _):
        held = anyio.run(write_as, url, ana)
        assert "approval request" in held, held
        [request] = json.loads(run("approvals", "list", "--format", "json").out)["approvals"]
        assert request["requested_by"] == "ana"
        own = decide(url, request["id"], ana)
        assert own.status_code == 403 and "Ana made this call" in own.json()["error"]
        stranger = decide(url, request["id"], bob)
        assert stranger.status_code == 403
        assert "you are not an approver" in stranger.json()["error"]
        assert "groups: ['platform-approvers']" in stranger.json()["error"]
        assert decide(url, request["id"], "not-a-token").status_code == 401
        half = decide(url, request["id"], carol)
        assert half.status_code == 200, half.text
        assert half.json()["status"] == "pending"  # two people: one more to go
        assert half.json()["approved_by"] == ["carol@acme.example"]
        assert (
            "1 of 2 approvals (carol@acme.example)" in run("approvals", "show", request["id"]).out
        )
        assert "approval request" in anyio.run(write_as, url, ana)  # still held
        again = decide(url, request["id"], carol)
        assert again.status_code == 409 and "already" in again.json()["error"]
        approved = decide(url, request["id"], dave)
        assert approved.json()["decided_by"] == "carol@acme.example, dave"
        assert anyio.run(write_as, url, ana).startswith("wrote")
    assert (project / "deploy.txt").read_text() == "go"
    assert "approved by carol@acme.example, dave" in run("approvals", "show", request["id"]).out
    records = audit_records(isolated_home / "state" / "audit.jsonl")
    steps = [(r["outcome"], r.get("approver_sub"), r.get("subject")) for r in records]
    assert ("approval-refused", "ana", "ana") in steps
    assert ("approval-counted", "carol", "ana") in steps
    assert ("approved", "dave", "ana") in steps


def test_two_people_approve_across_two_stateless_replicas_on_one_redis(
    project: Path, issuer: Issuer, tmp_path: Path, redis_url: str
) -> None:
    """#54: a two-person rule holds across `serve --stateless` replicas sharing one Redis —
    one approver on each replica, the call then runs on either; the same person on the other
    replica counts once; the caller cannot approve on any of them."""
    import httpx2

    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        bundles: [basic]
        agents:
          dev:
            match: {{groups: [devs]}}
            ask: [{{tool: files.write_file, approve: out-of-band, approvals: 2}}]
        gateway:
          auth:
            issuers: [{{issuer: "{issuer.url}", audience: [bundlectl-gateway]}}]
        state: {{url: "{redis_url}"}}
        policy:
          default: deny
          approvals:
            ttl: 10m
            approvers: {{match: {{groups: [platform-approvers]}}}}
        """,
    )
    ana = issuer.token(sub="ana", groups=["devs"])
    carol = issuer.token(sub="carol", groups=["platform-approvers"], name="Carol")
    dave = issuer.token(sub="dave", groups=["platform-approvers"], name="Dave")
    arguments = {"path": "deploy.txt", "content": "go"}

    async def write_as(url: str) -> str:
        async with client(url, ana) as session:
            answer = await session.call_tool("files__write_file", arguments)
            return str(answer.content[0].text)

    def decide(url: str, request_id: str, token: str) -> Any:
        return httpx2.post(
            f"{url}/approvals/{request_id}.json",
            json={"decision": "approve"},
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )

    home = tmp_path / "home"
    with (
        gateway(project, "--stateless", home=home) as (one, _),
        gateway(project, "--stateless", home=home) as (two, _),
    ):
        held = anyio.run(write_as, one)
        request_id = held.split("approval request ")[1].split()[0].strip(".:;,")
        assert decide(two, request_id, ana).status_code == 403  # the caller, on either
        first = decide(one, request_id, carol)
        assert first.json()["status"] == "pending", first.text
        assert decide(two, request_id, carol).status_code == 409  # the same person again
        assert "approval request" in anyio.run(write_as, two)  # one of two: still held
        second = decide(two, request_id, dave)
        assert second.json()["decided_by"] == "Carol, Dave", second.text
        assert anyio.run(write_as, two).startswith("wrote")
    assert (project / "deploy.txt").read_text() == "go"
