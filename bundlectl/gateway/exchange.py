"""Calls on behalf of the person at the gateway: RFC 8693 token exchange.

A remote server with `auth: {exchange: {audience: ...}}` never gets a shared credential from
`serve`: each call carries a token made for the person whose verified identity token came with
the request. The gateway trades that token at the token endpoint of the issuer that signed it
(its metadata's `token_endpoint`), authenticating as its own client there (`auth.client_id`,
`client_secret`), for one whose audience is the server; a compliant issuer names the gateway's
client as the actor (`act`). The result is kept per person and server until shortly before it
expires; a token the issuer refuses fails the call (it never falls back to another credential),
and no token is ever logged or written.
"""

from __future__ import annotations

import base64
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

import anyio

from bundlectl.config import urls
from bundlectl.config.expand import expand
from bundlectl.config.models import ServerAuth
from bundlectl.errors import BundlectlError, ServerError
from bundlectl.gateway.identity import FETCH_TIMEOUT, METADATA, Caller, _get_json

GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN = "urn:ietf:params:oauth:token-type:access_token"
EARLY = 30.0  # seconds before its expiry a kept token is exchanged afresh
DEFAULT_LIFETIME = 300.0  # an answer without `expires_in` is kept this long


class ExchangeRefused(ServerError):
    """The issuer would not exchange the caller's token for the server: the call fails."""


@dataclass
class Exchanger:
    """The gateway's exchanged tokens, per server and person, and its issuers' token
    endpoints."""

    # by server, person and what was asked for (a reload that changes the audience or the
    # scopes asks again)
    _kept: dict[tuple[str, ...], tuple[str, float]] = field(default_factory=dict, repr=False)
    _endpoints: dict[str, str] = field(default_factory=dict)
    exchanges: int = 0  # made with the issuer (not taken from what was kept)

    async def token(self, server: str, auth: ServerAuth, caller: Caller) -> str:
        """A token for `caller`'s calls to `server`: kept, or exchanged now."""
        key = _key(server, auth, caller)
        kept = self._kept.get(key)
        if kept is not None and time.time() < kept[1]:
            return kept[0]
        endpoint = self._endpoints.get(caller.issuer)
        if endpoint is None:
            endpoint = await anyio.to_thread.run_sync(_token_endpoint, caller.issuer)
            self._endpoints[caller.issuer] = endpoint
        token, lifetime = await anyio.to_thread.run_sync(_exchange, endpoint, server, auth, caller)
        self.exchanges += 1
        if len(self._kept) >= 10_000:
            self._kept.clear()
        self._kept[key] = (token, time.time() + max(0.0, lifetime - EARLY))
        return token



def _key(server: str, auth: ServerAuth, caller: Caller) -> tuple[str, ...]:
    exchange = auth.exchange
    assert exchange is not None
    return (server, caller.issuer, caller.subject, exchange.audience, *exchange.scopes)


def _token_endpoint(issuer: str) -> str:
    """The issuer's token endpoint, from its OpenID Connect or OAuth metadata."""
    base = issuer.rstrip("/")
    for where in METADATA:
        try:
            found = _get_json(base + where).get("token_endpoint")
        except (OSError, ValueError):
            continue
        if isinstance(found, str):
            return urls.checked(found, f"the token endpoint of {issuer}")
    raise ExchangeRefused(
        f"the issuer {issuer} publishes no token endpoint, so no token can be exchanged for "
        "the caller",
        hint="check that its /.well-known/openid-configuration names a token_endpoint",
    )


def _exchange(endpoint: str, server: str, auth: ServerAuth, caller: Caller) -> tuple[str, float]:
    """The exchanged token and its lifetime in seconds (RFC 8693 section 2)."""
    exchange = auth.exchange
    assert exchange is not None
    form = {
        "grant_type": GRANT,
        "subject_token": caller.token,
        "subject_token_type": ACCESS_TOKEN,
        "requested_token_type": ACCESS_TOKEN,
        "audience": exchange.audience,
    }
    if exchange.scopes:
        form["scope"] = " ".join(exchange.scopes)
    headers = {"Accept": "application/json", "Content-Type": "application/x-www-form-urlencoded"}
    secret = (
        expand(auth.client_secret, os.environ, where=f"servers.{server}.auth.client_secret")
        if auth.client_secret
        else None
    )
    method = auth.token_endpoint_auth_method or ("client_secret_basic" if secret else "none")
    assert auth.client_id is not None  # the model requires it with exchange
    if method == "client_secret_basic" and secret is not None:
        pair = f"{urllib.parse.quote(auth.client_id)}:{urllib.parse.quote(secret)}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
    else:
        form["client_id"] = auth.client_id
        if method == "client_secret_post" and secret is not None:
            form["client_secret"] = secret
    request = urllib.request.Request(
        endpoint, data=urllib.parse.urlencode(form).encode(), headers=headers, method="POST"
    )
    who = (
        f"the issuer {caller.issuer} would not exchange the token of {caller.subject!r} "
        f"for one for server {server!r}"
    )
    try:
        with urls.fetch(request, timeout=FETCH_TIMEOUT) as response:
            answer = json.loads(response.read(1 << 20))
    except urllib.error.HTTPError as exc:
        raise ExchangeRefused(f"{who}: {_said(exc)}", hint=_HINT) from None
    except (OSError, ValueError) as exc:
        raise ExchangeRefused(f"{who}: {exc}", hint=_HINT) from None
    except BundlectlError:
        raise
    token = answer.get("access_token") if isinstance(answer, dict) else None
    if not isinstance(token, str) or not token:
        raise ExchangeRefused(f"{who}: its answer holds no access_token", hint=_HINT)
    lifetime = answer.get("expires_in")
    return token, float(lifetime) if isinstance(lifetime, int | float) else DEFAULT_LIFETIME


_HINT = (
    "the call was not made; check that the issuer allows the gateway's client (auth.client_id) "
    "to exchange tokens for this audience (auth.exchange.audience)"
)


def _said(error: urllib.error.HTTPError) -> str:
    """The issuer's OAuth error (`error`, `error_description`), or the HTTP status."""
    try:
        body = json.loads(error.read(1 << 16))
    except (OSError, ValueError):
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        described = body.get("error_description")
        return str(body["error"]) + (f" ({described})" if isinstance(described, str) else "")
    return f"HTTP {error.code}"
