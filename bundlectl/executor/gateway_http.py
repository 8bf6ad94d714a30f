"""`bundlectl serve --transport streamable-http`: the gateway for many agents over HTTP (SPEC 7).

Each request names its agent with `Authorization: Bearer <token>` (the agent's `token` in
bundlectl.yaml) unless one agent is served (`--agent`) without a token, which is allowed on a
loopback address only. A missing or wrong token is answered 401 and audited; a session belongs to
the agent whose token opened it (the SDK answers 404 to another agent's token). The MCP endpoint is
`/mcp`; `GET /healthz` answers 200 with the policy digest in force. `--stateless` keeps no session
in the process (any replica answers any request), and the `requestState` of a pending
confirmation is sealed with a key derived from the agents' tokens, so every replica can open it.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import ipaddress
import json
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anyio

from bundlectl.errors import UsageError
from bundlectl.executor.gateway import Hub, _log_line, mcp_server
from bundlectl.executor.pipeline import Pipeline

AGENT = "bundlectl.agent"  # the ASGI scope key the gate fills in for the handlers


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Access:
    """Who may use the endpoint: tokens by agent, or one agent that needs none."""

    tokens: dict[str, str]  # agent → token
    open_agent: str | None = None  # served without a token (loopback only)

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

    def state_keys(self) -> list[bytes] | None:
        """The key that seals `requestState`: derived from the tokens, so replicas that share
        the configuration share it; None (a key of this process) when no agent has one."""
        if not self.tokens:
            return None
        material = "\0".join(f"{a}={t}" for a, t in sorted(self.tokens.items()))
        return [hashlib.sha256(b"bundlectl request state\0" + material.encode()).digest()]


def access_for(pipeline: Pipeline, agent: str | None, host: str) -> Access:
    """Read the agents' tokens (references expanded now; never logged) and check the address."""
    from bundlectl.expand import expand

    config = pipeline.resolution.project.config
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
    if agent is not None and agent not in tokens:
        access = Access({}, open_agent=agent)
    elif not tokens:
        raise UsageError(
            "serving many agents over HTTP needs tokens, and no agent declares one",
            hint='add agents.NAME.token: "${NAME_TOKEN}" to bundlectl.yaml, '
            "or serve one agent with --agent",
        )
    else:
        access = Access(tokens)
    if access.open_agent is not None and not is_loopback(host):
        raise UsageError(
            f"refusing to serve {host} without tokens: anyone who can reach it could call "
            f"agent {agent!r}'s tools",
            hint=f'bind 127.0.0.1, or set agents.{agent}.token: "${{TOKEN_VARIABLE}}"',
        )
    return access


class Gate:
    """ASGI middleware in front of `/mcp`: the bearer token picks the agent, or 401."""

    def __init__(self, app: Any, access: Access, hub: Hub) -> None:
        self.app, self.access, self.hub = app, access, hub

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
        from mcp.server.auth.provider import AccessToken

        headers = dict(scope.get("headers") or [])
        raw = headers.get(b"authorization")
        agent = self.access.agent_for(raw.decode("latin-1") if raw else None)
        if agent is None:
            client = scope.get("client") or ("?", 0)
            self.hub.pipeline.audit.unauthorized(f"{client[0]}:{client[1]}")
            body = json.dumps({"error": "unauthorized: send Authorization: Bearer <token>"})
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"www-authenticate", b'Bearer realm="bundlectl"'),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body.encode()})
            return
        # The SDK binds a session to the user that opened it: another agent's token gets 404.
        user = AuthenticatedUser(AccessToken(token="-", client_id=agent, scopes=[]))
        await self.app({**scope, AGENT: agent, "user": user}, receive, send)


def _security(host: str) -> Any:
    """DNS-rebinding protection (Host and Origin checked) on a loopback address, as the SDK
    itself does; a public address is protected by its tokens instead."""
    from mcp.server.transport_security import TransportSecuritySettings

    if not is_loopback(host):
        return None
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
    )


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before anything else starts (a busy port: exit 2)."""
    try:
        family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
        sock = socket.create_server((host.strip("[]"), port), family=family, backlog=512)
    except OSError as exc:
        raise UsageError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}",
            hint="choose another --port (0 picks a free one)",
        ) from None
    sock.set_inheritable(False)
    return sock


@contextlib.contextmanager
def _no_signal_capture() -> Iterator[None]:
    yield


async def serve_http(
    pipeline: Pipeline,
    *,
    access: Access,
    sock: socket.socket,
    mode: str = "direct",
    stateless: bool = False,
) -> None:
    """Serve until a stop signal: the first one lets the requests in flight finish (3 s at
    most), then every downstream server is stopped."""
    import uvicorn
    from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
    from mcp.server.streamable_http_manager import (
        StreamableHTTPASGIApp,
        StreamableHTTPSessionManager,
    )
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from bundlectl.executor import runner

    host, port = sock.getsockname()[:2]
    async with anyio.create_task_group() as group:
        served = set(access.tokens) | ({access.open_agent} if access.open_agent else set())
        hub = Hub(pipeline, group, log=_log_line, agents=served)
        server = mcp_server(
            hub, mode, lambda ctx: ctx.request.scope[AGENT], state_keys=access.state_keys()
        )
        manager = StreamableHTTPSessionManager(
            app=server, stateless=stateless, security_settings=_security(str(host))
        )
        endpoint = Gate(AuthContextMiddleware(StreamableHTTPASGIApp(manager)), access, hub)

        async def healthz(request: Request) -> JSONResponse:
            await hub.refresh()
            digest = hub.resolution.lock.policy_digest
            return JSONResponse({"status": "ok", "policy_digest": digest})

        app = Starlette(
            routes=[Route("/mcp", endpoint=endpoint), Route("/healthz", healthz)],
            lifespan=lambda app: manager.run(),
        )
        config = uvicorn.Config(
            app,
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=3,
            server_header=False,
        )
        web = uvicorn.Server(config)
        web.capture_signals = _no_signal_capture  # type: ignore[method-assign]  # ours: below

        def stop() -> bool:
            web.should_exit = True
            return True

        shown = f"[{host}]" if ":" in str(host) else host
        _log_line(
            f"serving {mode} mode on http://{shown}:{port}/mcp"
            f"{' (stateless)' if stateless else ''}; agents: {', '.join(sorted(served))}"
        )
        with runner.on_stop(stop):
            await web.serve(sockets=[sock])
        group.cancel_scope.cancel()
