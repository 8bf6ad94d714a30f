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

import time
from dataclasses import dataclass, field

import anyio

from bundlectl.config.models import ServerAuth
from bundlectl.errors import ServerError
from bundlectl.gateway import oauth
from bundlectl.gateway.identity import Caller

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
            endpoint = await anyio.to_thread.run_sync(
                oauth.endpoint, caller.issuer, "token_endpoint", ExchangeRefused
            )
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


def _exchange(endpoint: str, server: str, auth: ServerAuth, caller: Caller) -> tuple[str, float]:
    """The exchanged token and its lifetime in seconds (RFC 8693 section 2)."""
    exchange = auth.exchange
    assert exchange is not None
    assert auth.client_id is not None  # the model requires it with exchange
    form = {
        "grant_type": GRANT,
        "subject_token": caller.token,
        "subject_token_type": ACCESS_TOKEN,
        "requested_token_type": ACCESS_TOKEN,
        "audience": exchange.audience,
    }
    if exchange.scopes:
        form["scope"] = " ".join(exchange.scopes)
    who = (
        f"the issuer {caller.issuer} would not exchange the token of {caller.subject!r} "
        f"for one for server {server!r}"
    )
    answer = oauth.token_request(
        endpoint,
        form,
        client_id=auth.client_id,
        secret=oauth.secret_of(auth.client_secret, f"servers.{server}.auth.client_secret"),
        method=auth.token_endpoint_auth_method,
        refused=ExchangeRefused,
        who=who,
        hint=_HINT,
    )
    token = answer.get("access_token")
    if not isinstance(token, str) or not token:
        raise ExchangeRefused(f"{who}: its answer holds no access_token", hint=_HINT)
    lifetime = answer.get("expires_in")
    return token, float(lifetime) if isinstance(lifetime, int | float) else DEFAULT_LIFETIME


_HINT = (
    "the call was not made; check that the issuer allows the gateway's client (auth.client_id) "
    "to exchange tokens for this audience (auth.exchange.audience)"
)
