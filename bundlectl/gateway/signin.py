"""Approvers sign in to the approvers' page as themselves, through the team's identity provider
(issue 54): OpenID Connect authorization code with PKCE (RFC 7636), the gateway being the client
`gateway.auth.issuers[].client_id`.

`/approvals/sign-in` sends the browser to the issuer's `authorization_endpoint` with a fresh
`state`, `nonce` and code challenge (S256), and binds the `state` to that browser in a short-lived
cookie; `/approvals/callback` takes the issuer's code back only with that cookie, redeems it at
the `token_endpoint` with the code verifier (and the client's secret, when the issuer makes the
gateway a confidential client), and accepts the ID token only when it is signed by the issuer's
keys, made for this client and carries this sign-in's nonce. Each sign-in is good once and for
`FLOW_TTL`. Whether the person may decide is then `policy.approvals.approvers`' match of the ID
token's claims, as for the approvers' API; tokens are never kept, shown or logged.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio

from bundlectl.errors import ServerError
from bundlectl.gateway import oauth
from bundlectl.mcpio.requests import JsonObject

if TYPE_CHECKING:
    from bundlectl.config.settings import TokenIssuer
    from bundlectl.gateway.identity import Verifier

FLOW_TTL = 600.0  # seconds a sign-in may take between the page and the issuer's answer
FLOWS = 256  # sign-ins in progress kept at most; the oldest is dropped beyond that
SCOPES = "openid email profile"


class SignInFailed(ServerError):
    """A sign-in through the identity provider did not name a person."""


@dataclass(frozen=True)
class _Flow:
    issuer: str
    client_id: str
    client_secret: str | None  # its ${VAR} reference
    verifier: str  # PKCE code verifier
    nonce: str
    redirect: str
    started: float


@dataclass
class SignIn:
    """The sign-ins in progress (by `state`), and the issuers' endpoints found so far."""

    _flows: dict[str, _Flow] = field(default_factory=dict)
    _endpoints: dict[tuple[str, str], str] = field(default_factory=dict)

    async def _endpoint(self, issuer: str, name: str) -> str:
        found = self._endpoints.get((issuer, name))
        if found is None:
            found = await anyio.to_thread.run_sync(oauth.endpoint, issuer, name, SignInFailed)
            self._endpoints[issuer, name] = found
        return found

    async def start(self, issuer: TokenIssuer, redirect: str) -> tuple[str, str]:
        """Where to send the browser to sign in at `issuer`, and the sign-in's `state`."""
        assert issuer.client_id is not None  # only issuers with a client are offered
        authorize = await self._endpoint(issuer.issuer, "authorization_endpoint")
        state, nonce = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        verifier = secrets.token_urlsafe(48)  # 64 characters of RFC 7636's alphabet
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
        now = time.time()
        for old in [s for s, f in self._flows.items() if now - f.started > FLOW_TTL]:
            del self._flows[old]
        while len(self._flows) >= FLOWS:
            del self._flows[next(iter(self._flows))]
        self._flows[state] = _Flow(
            issuer.issuer,
            issuer.client_id,
            issuer.client_secret,
            verifier,
            nonce,
            redirect,
            now,
        )
        query = {
            "response_type": "code",
            "client_id": issuer.client_id,
            "redirect_uri": redirect,
            "scope": SCOPES,
            "state": state,
            "nonce": nonce,
            "code_challenge": challenge.rstrip(b"=").decode(),
            "code_challenge_method": "S256",
        }
        joiner = "&" if "?" in authorize else "?"
        return authorize + joiner + urllib.parse.urlencode(query), state

    async def redeemed(self, state: str, code: str, verifier: Verifier) -> JsonObject:
        """The claims of the person the issuer signed in for the sign-in `state` (good once),
        from its verified ID token; else SignInFailed saying why."""
        flow = self._flows.pop(state, None)
        if flow is None or time.time() - flow.started > FLOW_TTL:
            raise SignInFailed(
                "this sign-in is unknown, used or older than 10 minutes",
                hint="start again from the approvers' page",
            )
        token_url = await self._endpoint(flow.issuer, "token_endpoint")
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": flow.redirect,
            "code_verifier": flow.verifier,
        }
        who = f"the issuer {flow.issuer} would not redeem the sign-in's code"
        hint = (
            "check that the issuer knows the client gateway.auth.issuers[].client_id with the "
            f"redirect URI {flow.redirect}"
        )
        answer = await anyio.to_thread.run_sync(
            lambda: oauth.token_request(
                token_url,
                form,
                client_id=flow.client_id,
                secret=oauth.secret_of(flow.client_secret, "gateway.auth.issuers[].client_secret"),
                method=None,
                refused=SignInFailed,
                who=who,
                hint=hint,
            )
        )
        id_token = answer.get("id_token")
        if not isinstance(id_token, str) or not id_token:
            raise SignInFailed(f"{who}: its answer holds no id_token", hint="ask for scope openid")
        claims, reason = await verifier.id_token(id_token, flow.issuer, flow.client_id, flow.nonce)
        if claims is None:
            raise SignInFailed(f"the ID token of {flow.issuer} is {reason}", hint=hint)
        return claims
