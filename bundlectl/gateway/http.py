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
import dataclasses
import hmac
import json
import os
import socket
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import anyio

from bundlectl import metrics, telemetry
from bundlectl.calls.pipeline import Pipeline
from bundlectl.errors import UsageError
from bundlectl.gateway.access import (
    APPROVER_TOKEN,
    METRICS_TOKEN,
    Access,
    Refusals,
    StateKeys,
    access_for,
    is_loopback,
    people_tokens,
)
from bundlectl.gateway.approvers import ApprovalsPage, Approvers, People
from bundlectl.gateway.downstream import log_line
from bundlectl.gateway.handlers import mcp_server
from bundlectl.gateway.hub import Hub
from bundlectl.gateway.identity import Verdict, Verifier, looks_like_jwt
from bundlectl.gateway.personal import PersonalSignIns
from bundlectl.gateway.request_context import SdkContext
from bundlectl.mcpio import runner
from bundlectl.policy.rules import DEFAULT_AGENT
from bundlectl.resolve.resolved import Resolution

if TYPE_CHECKING:
    from mcp.server.lowlevel import Server
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from mcp.server.transport_security import TransportSecuritySettings
    from starlette.requests import Request
    from starlette.routing import BaseRoute
    from starlette.types import ASGIApp, Receive, Scope, Send

AGENT = "bundlectl.agent"  # the ASGI scope key the gate fills in for the handlers
SUBJECT = "bundlectl.subject"  # and the subject of a verified identity token (None: a static one)
CALLER = "bundlectl.caller"  # and the person behind it (`identity.Caller`), for token exchange


class Gate:
    """ASGI middleware in front of `/mcp`: the bearer token picks the agent, or 401.

    The tokens are read again with the config (`Hub.refresh` before each request): a token
    edited, added or removed in bundlectl.yaml counts from the next request; an edit that
    leaves a token unusable keeps the last good config, as any broken edit does.
    """

    def __init__(
        self, app: ASGIApp | None, access: Access, hub: Hub, agent: str | None, host: str
    ) -> None:
        self.app, self.access, self.hub = app, access, hub
        self.keys = StateKeys(access)
        self.refusals = Refusals(hub)
        self._agent, self._host = agent, host
        self.verifier = Verifier(hub.resolution.project.config)
        hub.agents = access.agents
        hub.vet = self._vet

    def stopped(self) -> None:
        """Serving stops: the refusals left out are counted; tasks held for a person are left
        to a replica, those under way fail saying so (`Tasks.release`)."""
        self.refusals.flush()
        self.hub.tasks.release()

    def _vet(self, fresh: Resolution) -> None:
        access = access_for(fresh, self._agent, self._host)  # raises: the old one stays
        self.access, self.hub.agents = access, access.agents
        self.verifier = self.verifier.renewed(fresh.project.config)
        self.keys.rotate(access)

    async def identify(self, authorization: str | None) -> Verdict:
        """The agent of a request: a static token's, or a verified JWT's by its claims."""
        agent = self.access.agent_for(authorization)
        if agent is not None:
            return Verdict(agent, 200)
        if not authorization or authorization[:7].lower() != "bearer ":
            return Verdict(reason="send Authorization: Bearer <token>")
        token = authorization[7:].strip()
        if not self.verifier or not looks_like_jwt(token):
            return Verdict(reason="unknown token")
        verdict = await self.verifier.verdict(token)
        auth = self.hub.resolution.project.config.gateway.auth
        if verdict.unmatched and auth is not None and auth.unmatched == "default":
            # served as the unlisted agent: policy.default decides what it may call
            return dataclasses.replace(verdict, agent=DEFAULT_AGENT, status=200, reason="")
        if verdict.agent is not None and verdict.agent not in self.access.matched:
            reason = f"agent {verdict.agent!r} is not served here"
            return Verdict(status=403, reason=reason, subject=verdict.subject)
        return verdict

    def metadata_url(self, scope: Scope) -> str:
        """Where this gateway's RFC 9728 metadata is, as the client reached it."""
        return self.resource(scope).replace("/mcp", "/.well-known/oauth-protected-resource/mcp")

    def resource(self, scope: Scope) -> str:
        auth = self.hub.resolution.project.config.gateway.auth
        if auth is not None and auth.resource:
            return str(auth.resource)
        headers = dict(scope.get("headers") or [])
        host = headers.get(b"host", b"").decode("latin-1") or self._host
        return f"{scope.get('scheme', 'http')}://{host}/mcp"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
        from mcp.server.auth.provider import AccessToken

        await self.hub.refresh()
        headers = dict(scope.get("headers") or [])
        raw = headers.get(b"authorization")
        verdict = await self.identify(raw.decode("latin-1") if raw else None)
        agent = verdict.agent
        if agent is None:
            client = scope.get("client") or ("?", 0)
            self.refusals.refused(str(client[0]), int(client[1]))
            word = "unauthorized" if verdict.status == 401 else "forbidden"
            body = json.dumps({"error": f"{word}: {verdict.reason}"})
            challenge = 'Bearer realm="bundlectl"'
            if self.verifier:  # RFC 9728: where to learn who issues tokens for this gateway
                challenge += f', resource_metadata="{self.metadata_url(scope)}"'
            await send(
                {
                    "type": "http.response.start",
                    "status": verdict.status,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"www-authenticate", challenge.encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body.encode()})
            return
        # The SDK binds a session to the user that opened it: another agent's token gets 404.
        user = AuthenticatedUser(AccessToken(token="-", client_id=agent, scopes=[]))
        scoped = {
            **scope,
            AGENT: agent,
            "user": user,
            SUBJECT: verdict.subject,
            CALLER: verdict.caller,
        }
        if self.app is None:
            raise RuntimeError("the gateway's app was not set up")
        with telemetry.from_headers(headers):  # the client's trace, sent as HTTP headers
            await self.app(scoped, receive, send)


def _agent_of(ctx: SdkContext) -> str:
    """The agent the gate found for a request (every request passed the gate)."""
    if ctx.request is None:  # not over HTTP: no agent was found for it
        raise RuntimeError("a request without its HTTP request reached the gateway")
    agent: str = ctx.request.scope[AGENT]
    return agent


def _security(host: str) -> TransportSecuritySettings | None:
    """DNS-rebinding protection (Host and Origin checked) on a loopback address, as the SDK
    itself does; a public address is protected by its tokens instead."""
    from mcp.server.transport_security import TransportSecuritySettings

    if not is_loopback(host):
        return None
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{name}:*" for name in LOOPBACK_NAMES],
        allowed_origins=[f"http://{name}:*" for name in LOOPBACK_NAMES],
    )


# The names a browser may use for a loopback gateway (Host and Origin, DNS-rebinding checks).
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def trusted(request: Request, host: str) -> bool:
    """Whether a request's Host and Origin pass the DNS-rebinding check `/mcp` applies (on a
    loopback address; elsewhere tokens protect and nothing is checked)."""
    return trusted_headers(request.headers.get("host"), request.headers.get("origin"), host)


def trusted_headers(given_host: str | None, origin: str | None, host: str) -> bool:
    """`trusted`, from the Host and Origin header values: a loopback name with a port of
    digits (or none), and an Origin that is `http://` one of them, exactly."""
    if not is_loopback(host):
        return True
    if given_host is None or not _loopback_authority(given_host):
        return False
    if origin is None:
        return True
    scheme, _, rest = origin.partition("://")
    return scheme == "http" and _loopback_authority(rest)


def _loopback_authority(text: str) -> bool:
    name, colon, port = text.rpartition(":") if not text.endswith("]") else (text, "", "")
    if not colon:
        name, port = text, ""
    elif not port.isdigit() or not port.isascii():
        return False
    return name in LOOPBACK_NAMES


class HostChecked:
    """ASGI middleware: the DNS-rebinding check of `/mcp` (Host and Origin, `trusted`) on every
    route of the gateway — `/healthz`, `/metrics`, the RFC 9728 metadata, the approvers'
    page — so a page a browser was led to by DNS rebinding reads none of them (421)."""

    def __init__(self, app: ASGIApp, host: str) -> None:
        self.app, self.host = app, host

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and is_loopback(self.host):
            headers = dict(scope.get("headers") or [])
            given, origin = headers.get(b"host"), headers.get(b"origin")
            if not trusted_headers(
                given.decode("latin-1") if given is not None else None,
                origin.decode("latin-1") if origin is not None else None,
                self.host,
            ):
                body = json.dumps({"error": "Host or Origin not allowed"}).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 421,
                        "headers": [(b"content-type", b"application/json")],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def bind(host: str, port: int, *, shared: bool = False, listen: bool = True) -> socket.socket:
    """The listening socket, bound before anything else starts (a busy port: exit 2).
    `shared`: one of several (`SO_REUSEPORT`), each worker's own, among which the kernel
    spreads the connections; `listen=False`: the port claimed (and learned, for port 0) by the
    workers' supervisor, which takes no connection itself."""
    try:
        sock = _listening(host.strip("[]"), port, shared=shared, listen=listen)
    except OSError as exc:
        raise UsageError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}",
            hint="choose another --port (0 picks a free one)",
        ) from None
    sock.set_inheritable(False)
    return sock


def _listening(host: str, port: int, *, shared: bool, listen: bool) -> socket.socket:
    """A TCP listening socket made with its protocol named (`IPPROTO_TCP`). asyncio turns Nagle
    off (TCP_NODELAY) on accepted connections only for sockets whose `proto` says TCP, and
    `socket.create_server` leaves it 0: each response on a kept-alive connection then waited
    ~40 ms for the client's delayed ACK. TCP_NODELAY is set here too, for the connections
    that inherit it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        if os.name != "nt":  # as create_server: a restarted gateway rebinds at once
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if shared:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        if listen:
            sock.listen(512)
    except BaseException:
        sock.close()
        raise
    return sock


@contextlib.contextmanager
def _no_signal_capture() -> Iterator[None]:
    yield


async def serve_http(
    pipeline: Pipeline,
    *,
    access: Access,
    agent: str | None,
    sock: socket.socket,
    mode: str = "direct",
    stateless: bool = False,
    names: str | None = None,
    with_metrics: bool = False,
    json_response: bool = False,
) -> None:
    """Serve until a stop signal: the first one lets the requests in flight finish (3 s at
    most), then every downstream server is stopped. `json_response` (with `stateless`): a
    2025-11-25 client's request answered with one JSON body (`ByEra`)."""
    import uvicorn
    from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    host, port = sock.getsockname()[:2]
    async with anyio.create_task_group() as group:
        hub = Hub(pipeline, group, log=log_line, stateless=stateless, naming=names)
        gate = Gate(None, access, hub, agent, str(host))
        server = mcp_server(hub, mode, _agent_of, codec=gate.keys)
        endpoint, managers = _transports(server, str(host), stateless, json_response)
        gate.app = AuthContextMiddleware(endpoint)

        async def healthz(request: Request) -> JSONResponse:
            await hub.refresh()
            digest = hub.resolution.lock.policy_digest
            return JSONResponse({"status": "ok", "policy_digest": digest})

        async def protected_resource(request: Request) -> JSONResponse:
            """RFC 9728: this gateway is a protected resource of the configured issuers."""
            auth = hub.resolution.project.config.gateway.auth
            if auth is None or not auth.issuers:
                return JSONResponse({"error": "no token issuers are configured"}, 404)
            metadata = {
                "resource": gate.resource(request.scope),
                "authorization_servers": [issuer.issuer for issuer in auth.issuers],
                "bearer_methods_supported": ["header"],
                "resource_name": "bundlectl gateway",
            }
            return JSONResponse(metadata)

        async def served_metrics(request: Request) -> Response:
            """Prometheus text, when --metrics; its own token (BUNDLECTL_METRICS_TOKEN) when set,
            never an agent's."""
            if not with_metrics:
                return JSONResponse({"error": "metrics are off (serve --metrics)"}, 404)
            wanted = os.environ.get(METRICS_TOKEN, "").strip()
            given = request.headers.get("authorization", "")
            if wanted and not hmac.compare_digest(given.encode(), f"Bearer {wanted}".encode()):
                return JSONResponse({"error": "unauthorized: the metrics token"}, 401)
            body, kind = metrics.exposition()
            return Response(body, media_type=kind)

        well_known = "/.well-known/oauth-protected-resource"
        approvers = approvers_page(gate, access, str(host))
        hub.personal = PersonalSignIns(hub.pipeline, group, hub.log, lambda: gate.verifier)
        app = Starlette(
            routes=[
                Route("/mcp", endpoint=gate),
                Route("/healthz", healthz),
                Route("/metrics", served_metrics),
                Route(well_known, protected_resource),
                Route(well_known + "/mcp", protected_resource),
                *(approvers.routes() if approvers is not None else []),
                *hub.personal.routes(),
            ],
            lifespan=lambda app: _running(managers),
        )
        config = uvicorn.Config(
            HostChecked(app, str(host)),
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
        log_line(
            f"serving {mode} mode on http://{shown}:{port}/mcp"
            f"{' (stateless)' if stateless else ''}; agents: {', '.join(sorted(access.agents))}"
        )
        if approvers is not None:
            log_line(f"approvals page on http://{shown}:{port}/approvals (the approver token)")
        runner.long_lived()
        try:
            with runner.on_stop(stop):
                await web.serve(sockets=[sock])
        finally:
            gate.stopped()
        group.cancel_scope.cancel()


def _transports(
    server: Server[Any], host: str, stateless: bool, json_response: bool
) -> tuple[ASGIApp, list[StreamableHTTPSessionManager]]:
    """The `/mcp` endpoint and the SDK's session managers behind it (run for the app's life):
    the streaming transport, and with `json_response` the plain one (`ByEra`)."""
    from mcp.server.streamable_http_manager import (
        StreamableHTTPASGIApp,
        StreamableHTTPSessionManager,
    )

    security = _security(host)
    managers = [
        StreamableHTTPSessionManager(
            app=server, stateless=stateless, json_response=plain, security_settings=security
        )
        for plain in ((False, True) if json_response else (False,))
    ]
    endpoints = [StreamableHTTPASGIApp(manager) for manager in managers]
    return (ByEra(*endpoints) if json_response else endpoints[0]), managers


class ByEra:
    """`serve --stateless --json-response`: a request of the handshake era (2025-11-25 and
    before: no MCP-Protocol-Version header, or one of those versions — the SDK's own rule) goes
    to the transport that answers with one JSON body, which costs up to a quarter less CPU
    than an event stream opened for one answer; what its call sends before the answer (progress, log
    messages) is not delivered. A 2026-07-28 request goes to the streaming one, which answers
    with JSON already unless the call sends something first (the progress or the log level
    the client asked for), and then streams it."""

    def __init__(self, streaming: ASGIApp, plain: ASGIApp) -> None:
        from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

        self.streaming, self.plain = streaming, plain
        self.handshake_era = frozenset(HANDSHAKE_PROTOCOL_VERSIONS)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        version = next(
            (v.decode("latin-1") for k, v in scope.get("headers", ()) if k == _VERSION_HEADER),
            None,
        )
        modern = version is not None and version not in self.handshake_era
        await (self.streaming if modern else self.plain)(scope, receive, send)


_VERSION_HEADER = b"mcp-protocol-version"


@contextlib.asynccontextmanager
async def _running(managers: Sequence[StreamableHTTPSessionManager]) -> AsyncIterator[None]:
    async with contextlib.AsyncExitStack() as stack:
        for manager in managers:
            await stack.enter_async_context(manager.run())
        yield


def approvers_page(gate: Gate, access: Access, host: str) -> ApprovalsPage | None:
    """`/approvals` for people holding the approver token ($BUNDLECTL_APPROVER_TOKEN) and for
    the people `policy.approvals.approvers` names, with their own access tokens: the requests
    of this gateway's project; None: neither, no page. An approver is never an agent: a token
    that is also an agent's is refused, at start and on every reload (`people_tokens`, from
    `access_for`), and nobody approves a call they made."""
    hub = gate.hub
    token = people_tokens(access.tokens).get(APPROVER_TOKEN) or ""

    def people() -> People | None:
        approvals = hub.resolution.project.config.policy.approvals
        approvers = approvals.approvers if approvals is not None else None
        if approvers is None or not gate.verifier:
            return None
        auth = hub.resolution.project.config.gateway.auth
        return People(
            gate.verifier,
            dict(approvers.match),
            signing_in=[i for i in (auth.issuers if auth else []) if i.client_id],
            public=auth.resource if auth else None,
        )

    if not token and people() is None:
        return None
    return ApprovalsPage(
        Approvers(token),
        hub.pipeline.store,
        project=lambda: str(hub.resolution.project.root),
        trusted=lambda request: trusted(request, host),
        people=people,
        refresh=hub.refresh,
        schema=lambda b: hub.resolution.catalog.input_schema(b.server, b.tool),
    )


async def serve_routes(routes: Sequence[BaseRoute], sock: socket.socket) -> None:
    """A small web app of `routes` on `sock` until a stop signal (`approvals ui`)."""
    import uvicorn
    from starlette.applications import Starlette

    config = uvicorn.Config(Starlette(routes=routes), log_level="warning", server_header=False)
    web = uvicorn.Server(config)
    web.capture_signals = _no_signal_capture  # type: ignore[method-assign]  # runner's

    def stop() -> bool:
        web.should_exit = True
        return True

    with runner.on_stop(stop):
        await web.serve(sockets=[sock])
