"""Identities in front of the gateway (SPEC 12): access tokens (JWTs) from the team's identity
provider, verified here, and mapped to an agent by their claims (`agents.NAME.match`).

A token is accepted only when it is signed by a key of one of `gateway.auth.issuers` (fetched
from the issuer's JWKS, found through its OpenID / RFC 8414 metadata), with one of the
algorithms allowed for it (never `none` or a shared secret), its `iss` exactly the issuer, an
`aud` the gateway is configured for, and `exp` / `nbf` holding (a minute's leeway for clocks).
Keys are cached for `JWKS_TTL` and fetched again, at most every `REFETCH_EVERY`, when a token
names a key we do not have (the issuer rotated its keys). Exactly one agent's `match` must fit
the claims: none, or more than one, is a refusal that says so (403), never a guess.
"""

from __future__ import annotations

import dataclasses
import hmac
import json
import time
import urllib.request
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio
import jwt

from bundlectl.config import urls
from bundlectl.config.models import ProjectConfig
from bundlectl.config.settings import TokenIssuer
from bundlectl.mcpio.requests import JsonObject
from bundlectl.policy.claims import fits

if TYPE_CHECKING:
    from jwt.algorithms import AllowedPublicKeys

JWKS_TTL = 600.0  # seconds a fetched key set is used before it is fetched again
REFETCH_EVERY = 30.0  # at most one fetch per issuer this often for an unknown key id
REMEMBER = 60.0  # seconds a verified token's verdict is reused (never past its `exp`)
REMEMBERED = 4096  # verdicts kept at most
FETCH_TIMEOUT = 5.0
METADATA = ("/.well-known/openid-configuration", "/.well-known/oauth-authorization-server")
LEEWAY = 60  # seconds of clock difference tolerated for exp and nbf


@dataclass(frozen=True)
class Verdict:
    """What a bearer token says: the agent it identifies, or why it does not (`status` 401 for
    a token that is not valid, 403 for a valid one that identifies no agent)."""

    agent: str | None = None
    status: int = 401
    reason: str = ""
    subject: str | None = None
    until: float | None = None  # a verified token: when it expires
    unmatched: bool = False  # a valid token whose claims fit no agent's match:
    caller: Caller | None = None  # a verified identity token: the person, for token exchange


@dataclass(frozen=True)
class Caller:
    """The person behind a request, as a verified identity token says: what a server with
    `auth.exchange` gets a token for (`gateway/exchange.py`)."""

    subject: str
    issuer: str
    token: str = field(repr=False)  # the verified token itself: never shown or logged


def looks_like_jwt(token: str) -> bool:
    return token.count(".") == 2 and len(token) > 20


@dataclass
class _Keys:
    fetched: float = 0.0
    tried: float = 0.0
    keys: dict[str, AllowedPublicKeys] = field(default_factory=dict)  # by kid ("": none)


class Verifier:
    """The issuers of one loaded config, and the agents their tokens may stand for."""

    def __init__(self, config: ProjectConfig) -> None:
        auth = config.gateway.auth
        self.issuers: dict[str, TokenIssuer] = {i.issuer: i for i in (auth.issuers if auth else [])}
        self.matches = {name: rules.match for name, rules in config.agents.items() if rules.match}
        self._keys: dict[str, _Keys] = {}
        # Tokens verified lately (a client sends the same one with every request): the verdict
        # until the token expires, for at most `REMEMBER` seconds.
        self._verdicts: dict[str, tuple[float, Verdict]] = {}

    def __bool__(self) -> bool:
        return bool(self.issuers)

    def renewed(self, config: ProjectConfig) -> Verifier:
        """The verifier of a reloaded config, keeping the keys fetched for the same issuers."""
        fresh = Verifier(config)
        fresh._keys = {k: v for k, v in self._keys.items() if k in fresh.issuers}
        return fresh

    async def verdict(self, token: str) -> Verdict:
        remembered = self._verdicts.get(token)
        if remembered is not None and time.time() < remembered[0]:
            return remembered[1]
        verdict, until = await self._verified(token)
        if until is not None:
            if len(self._verdicts) >= REMEMBERED:
                self._verdicts.clear()
            self._verdicts[token] = (min(until, time.time() + REMEMBER), verdict)
        return verdict

    async def _verified(self, token: str) -> tuple[Verdict, float | None]:
        """The verdict on a token, and until when it holds (None: not a valid token)."""
        verdict = await self._judged(token)
        return verdict, verdict.until

    async def _judged(self, token: str) -> Verdict:
        verified, reason = await self.claims(token)
        if verified is None:
            return Verdict(reason=reason)
        found = self._agent(verified)
        caller = Caller(found.subject or "?", str(verified["iss"]), token)
        return dataclasses.replace(found, until=float(verified["exp"]), caller=caller)

    async def claims(self, token: str) -> tuple[JsonObject | None, str]:
        """A token's claims once its signature, issuer, audience and times are checked; else
        None and why (the agents' tokens and the approvers' are checked alike)."""
        try:
            claims = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError as exc:
            return None, f"not a JWT: {exc}"
        issuer = self.issuers.get(str(claims.get("iss", "")))
        if issuer is None:
            return None, "its issuer is not one this gateway accepts"
        return await self._decoded(token, issuer, list(issuer.audience))

    async def id_token(
        self, token: str, issuer: str, client_id: str, nonce: str
    ) -> tuple[JsonObject | None, str]:
        """An OpenID Connect ID token's claims, for a sign-in the gateway started at `issuer`
        as its client `client_id` with `nonce`: signed by the issuer's keys, for that client,
        carrying that nonce; else None and why."""
        known = self.issuers.get(issuer)
        if known is None:
            return None, "its issuer is not one this gateway accepts"
        claims, reason = await self._decoded(token, known, [client_id])
        if claims is None:
            return None, reason
        if not hmac.compare_digest(str(claims.get("nonce", "")).encode(), nonce.encode()):
            return None, "not the answer to this sign-in (its nonce differs)"
        return claims, ""

    async def _decoded(
        self, token: str, issuer: TokenIssuer, audience: list[str]
    ) -> tuple[JsonObject | None, str]:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            return None, f"not a JWT: {exc}"
        algorithm = header.get("alg")
        if algorithm not in issuer.algorithms:
            return None, f"algorithm {algorithm!r} is not accepted for this issuer"
        key = await self._key(issuer, str(header.get("kid") or ""))
        if key is None:
            return None, "signed with a key the issuer does not publish"
        try:
            verified: JsonObject = jwt.decode(
                token,
                key,
                algorithms=list(issuer.algorithms),
                audience=audience,
                issuer=issuer.issuer,
                leeway=LEEWAY,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.PyJWTError as exc:
            return None, f"not valid: {exc}"
        return verified, ""

    def _agent(self, claims: JsonObject) -> Verdict:
        subject = str(claims.get("sub") or claims.get("client_id") or "?")
        found = [name for name, wanted in self.matches.items() if fits(claims, wanted)]
        if len(found) == 1:
            return Verdict(found[0], 200, subject=subject)
        if not found:
            seen = ", ".join(sorted(claims)) or "none"
            reason = (
                f"no agent's match: fits its claims (it carries: {seen}); the matches are "
                "under agents.NAME.match in the gateway's bundlectl.yaml, and `bundlectl policy "
                "explain --token FILE` says why each does not fit"
            )
            return Verdict(status=403, reason=reason, subject=subject, unmatched=True)
        return Verdict(
            status=403,
            reason=f"its claims fit several agents ({', '.join(sorted(found))}); make their "
            "match: exclusive",
            subject=subject,
        )

    async def _key(self, issuer: TokenIssuer, kid: str) -> AllowedPublicKeys | None:
        held = self._keys.setdefault(issuer.issuer, _Keys())
        now = time.monotonic()
        stale = now - held.fetched > JWKS_TTL
        unknown = kid not in held.keys and not (kid == "" and len(held.keys) == 1)
        if (stale or unknown) and now - held.tried > (0 if stale else REFETCH_EVERY):
            held.tried = now
            try:
                held.keys = await anyio.to_thread.run_sync(_fetch_keys, issuer)
                held.fetched = now
            except (OSError, ValueError, jwt.PyJWTError):
                pass  # keep what we had: the token is judged with it (or refused)
        if kid in held.keys:
            return held.keys[kid]
        if kid == "" and len(held.keys) == 1:
            return next(iter(held.keys.values()))
        return None


def get_json(url: str) -> JsonObject:
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    with urls.fetch(request, timeout=FETCH_TIMEOUT) as response:
        data = json.loads(response.read(1 << 20))
    if not isinstance(data, dict):
        raise ValueError(f"{url} did not answer with a JSON object")
    return data


def _fetch_keys(issuer: TokenIssuer) -> dict[str, AllowedPublicKeys]:
    """The issuer's signing keys by kid, from its JWKS (found through its metadata)."""
    url = issuer.jwks_url
    if url is None:
        base = issuer.issuer.rstrip("/")
        for where in (
            "/.well-known/openid-configuration",
            "/.well-known/oauth-authorization-server",
        ):
            try:
                url = get_json(base + where).get("jwks_uri")
            except (OSError, ValueError):
                continue
            if url:
                break
        if not isinstance(url, str) or not url:
            raise ValueError(f"no jwks_uri in the metadata of {issuer.issuer}")
        urls.checked(url, f"the jwks_uri of {issuer.issuer},")  # a URL the metadata hands us
    keys = jwt.PyJWKSet.from_dict(get_json(url))
    return {str(key.key_id or ""): key.key for key in keys.keys}
