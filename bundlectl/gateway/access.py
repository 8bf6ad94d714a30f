"""Who may use the HTTP gateway: the agents' bearer tokens (`Access`, read with the config), the
keys that seal a pending confirmation for every replica (`StateKeys`), and the refused requests,
counted and audited in bursts (`Refusals`)."""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bundlectl.config.expand import expand
from bundlectl.config.urls import loopback_host
from bundlectl.errors import UsageError
from bundlectl.resolve.resolved import Resolution

if TYPE_CHECKING:
    from mcp.server.request_state import AESGCMRequestStateCodec

    from bundlectl.gateway.hub import Hub


APPROVER_TOKEN = "BUNDLECTL_APPROVER_TOKEN"  # opens the approvers' page and API
METRICS_TOKEN = "BUNDLECTL_METRICS_TOKEN"  # opens /metrics
PEOPLE_TOKEN_LENGTH = 32  # characters at least, of a token that opens /approvals or /metrics


def people_tokens(agents: dict[str, str]) -> dict[str, str]:
    """The tokens of the gateway's other doors (`$BUNDLECTL_APPROVER_TOKEN`,
    `$BUNDLECTL_METRICS_TOKEN`), by variable, checked with every load of the config (a
    reload may give an agent the same token): each at least `PEOPLE_TOKEN_LENGTH` characters
    and none an agent's or the other's, so an agent can never approve its own calls or read the
    metrics, and a metrics scraper never approve a call."""
    found: dict[str, str] = {}
    for variable in (APPROVER_TOKEN, METRICS_TOKEN):
        value = os.environ.get(variable, "").strip()
        if not value:
            continue
        if len(value) < PEOPLE_TOKEN_LENGTH:
            raise UsageError(
                f"${variable} is shorter than {PEOPLE_TOKEN_LENGTH} characters",
                hint="use a long random value, e.g. `python -c 'import secrets; "
                "print(secrets.token_urlsafe(32))'`",
            )
        for agent, token in agents.items():
            if hmac.compare_digest(value.encode(), token.encode()):
                what = "approve its own calls" if variable == APPROVER_TOKEN else "read metrics"
                raise UsageError(
                    f"${variable} is also agent {agent!r}'s token: the agent could {what}",
                    hint=f"give ${variable} a value of its own",
                )
        found[variable] = value
    approver, metrics = found.get(APPROVER_TOKEN), found.get(METRICS_TOKEN)
    if approver and metrics and hmac.compare_digest(approver.encode(), metrics.encode()):
        raise UsageError(
            f"${METRICS_TOKEN} is also ${APPROVER_TOKEN}: whatever scrapes the metrics could "
            "approve held calls",
            hint=f"give ${METRICS_TOKEN} a value of its own",
        )
    return found


def is_loopback(host: str) -> bool:
    """Whether the gateway's address is this machine's alone (`urls.loopback_host`)."""
    return loopback_host(host)


@dataclass(frozen=True)
class Access:
    """Who may use the endpoint: tokens by agent, or one agent that needs none."""

    tokens: dict[str, str]  # agent → token
    open_agent: str | None = None  # served without a token (loopback only)
    matched: frozenset[str] = frozenset()  # identified by the claims of a verified JWT

    def agent_for(self, authorization: str | None) -> str | None:
        """The agent a request's Authorization header identifies (constant-time compares)."""
        if self.open_agent is not None:
            return self.open_agent
        if not authorization or authorization[:7].lower() != "bearer ":
            return None
        offered = authorization[7:].strip().encode()
        found = None
        for agent, token in self.tokens.items():
            if hmac.compare_digest(offered, token.encode()):
                found = agent
        return found

    @property
    def agents(self) -> set[str]:
        """Every agent this access lets in."""
        return (
            set(self.tokens) | set(self.matched) | ({self.open_agent} if self.open_agent else set())
        )

    def state_key(self) -> bytes | None:
        """The key that seals `requestState`: derived from the tokens, so replicas that share
        the configuration share it; None (a key of this process) when no agent has one."""
        if not self.tokens:
            return None
        material = "\0".join(f"{a}={t}" for a, t in sorted(self.tokens.items()))
        return hashlib.sha256(b"bundlectl request state\0" + material.encode()).digest()


class StateKeys:
    """The `requestState` codec, following the tokens: when they change on a reload, the key
    derived from the new ones seals and the previous one still opens what it sealed (the
    rotation ring the SDK's codec supports), so a pending confirmation survives a rotation."""

    def __init__(self, access: Access) -> None:
        self._key = access.state_key() or os.urandom(32)
        self._ring = [self._key]
        self._codec = self._make()

    def _make(self) -> AESGCMRequestStateCodec:
        from mcp.server.request_state import AESGCMRequestStateCodec

        return AESGCMRequestStateCodec(self._ring)

    def rotate(self, access: Access) -> None:
        key = access.state_key()
        if key is not None and key != self._key:
            self._key, self._ring = key, [key, self._ring[0]]
            self._codec = self._make()

    def seal(self, payload: bytes) -> str:
        return str(self._codec.seal(payload))

    def unseal(self, token: str) -> bytes:
        return bytes(self._codec.unseal(token))


class Refusals:
    """Audit records of refused requests (401), at most `burst` per client address in each
    `window` seconds: a flood of bad tokens cannot fill the disk. What was left out is counted
    in one record (`repeated`) when that address's next window opens, or when serving stops."""

    def __init__(self, hub: Hub, *, burst: int = 10, window: float = 60.0) -> None:
        self.hub, self.burst, self.window = hub, burst, window
        self._windows: dict[str, list[float]] = {}  # address → [opened, recorded, left out]

    def refused(self, host: str, port: int) -> None:
        now = time.monotonic()
        state = self._windows.get(host)
        if state is None or now - state[0] >= self.window:
            if state is not None:
                self._summary(host, state)
            elif len(self._windows) >= 10_000:  # many addresses: close the expired windows
                for old in [h for h, s in self._windows.items() if now - s[0] >= self.window]:
                    self._summary(old, self._windows.pop(old))
            state = self._windows[host] = [now, 0, 0]
        if state[1] < self.burst:
            state[1] += 1
            self.hub.pipeline.audit.unauthorized(f"{host}:{port}")
        else:
            state[2] += 1

    def flush(self) -> None:
        for host, state in self._windows.items():
            self._summary(host, state)
        self._windows.clear()

    def _summary(self, host: str, state: list[float]) -> None:
        if state[2]:
            self.hub.pipeline.audit.unauthorized(host, repeated=int(state[2]))
            state[2] = 0


def _links_checkable(resolution: Resolution) -> None:
    """A server people sign in to themselves (`auth.per_person`) needs an issuer the gateway
    is a client of: who opens a sign-in link is checked there."""
    auth = resolution.project.config.gateway.auth
    if any(issuer.client_id for issuer in (auth.issuers if auth else [])):
        return
    for name, merged in resolution.merged.servers.items():
        if merged.spec.auth is not None and merged.spec.auth.per_person:
            raise UsageError(
                f"servers.{name}.auth.per_person: each person signs in through a link, and "
                "the gateway checks who opens it with their identity provider: give one of "
                "gateway.auth.issuers a client_id",
                hint="docs/gateway.md: each person's own sign-in",
            )


def access_for(resolution: Resolution, agent: str | None, host: str) -> Access:
    """Read the agents' tokens (references expanded now; never logged), check the address, and
    that every agent served has a sound policy."""

    config = resolution.project.config
    tokens: dict[str, str] = {}
    for name, rules in config.agents.items():
        if rules.token is None or (agent is not None and name != agent):
            continue
        value = expand(rules.token, os.environ, where=f"agents.{name}.token").strip()
        if len(value) < 16:
            raise UsageError(
                f"agents.{name}.token is {'empty' if not value else 'shorter than 16 characters'}",
                hint="use a long random value, e.g. `python -c 'import secrets; "
                "print(secrets.token_urlsafe(32))'`",
            )
        tokens[name] = value
    if len(set(tokens.values())) < len(tokens):
        raise UsageError(
            "two agents have the same token; a token must say which agent calls",
            hint="give each agent its own token",
        )
    people_tokens(tokens)
    _links_checkable(resolution)
    auth = config.gateway.auth  # (unmatched: default beside a listed `default`: refused as
    # the project resolves, `resolved.unmatched_default`)
    matched = frozenset(
        name
        for name, rules in config.agents.items()
        if auth is not None and auth.issuers and rules.match and agent in (None, name)
    )
    if auth is not None and auth.issuers and not matched and agent is None:
        raise UsageError(
            "gateway.auth.issuers names token issuers, and no agent has a match: for their "
            "tokens' claims",
            hint="add agents.NAME.match: {sub: ...} (or client_id, groups, ...) to the agents "
            "their tokens stand for",
        )
    if agent is not None and agent not in tokens and agent not in matched:
        access = Access({}, open_agent=agent)
    elif not tokens and not matched:
        raise UsageError(
            "serving many agents over HTTP needs tokens, and no agent declares one",
            hint='add agents.NAME.token: "${NAME_TOKEN}" to bundlectl.yaml, '
            "or serve one agent with --agent",
        )
    else:
        access = Access(tokens, matched=matched)
    if access.open_agent is not None and not is_loopback(host):
        raise UsageError(
            f"refusing to serve {host} without tokens: anyone who can reach it could call "
            f"agent {agent!r}'s tools",
            hint=f'bind 127.0.0.1, or set agents.{agent}.token: "${{TOKEN_VARIABLE}}"',
        )
    for name in access.agents:
        resolution.policy.agent(name)  # extends errors and the like: now, not on a call
    return access
