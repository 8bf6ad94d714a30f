"""Each person's own sign-in to a server with its own authorization server (issue 54, item 4:
`servers.NAME.auth.per_person`, `serve` over HTTP).

A person whose verified identity token came with a call, and who has no sign-in kept for the
server, gets no shared credential: the call ends with a link to sign in (an MCP URL-mode
elicitation, `-32042`, for clients that declare URL elicitation; else the link in the
result's text), and the agent calls again once they have. The link is the gateway's own
(`/connect/ID`), good for `LINK_TTL`, and only for the person who made the call:

1. `/connect/ID` sends the browser to the caller's issuer to say who is at it (OpenID Connect
   authorization code with PKCE, `gateway.auth.issuers[].client_id`, as the approvers' page
   signs people in), the way back bound to that browser by a cookie;
2. `/connect/identified` takes the issuer's answer, and goes on only when its ID token names the
   caller (same issuer, same `sub`) — someone else who opens a forwarded link is refused;
3. the gateway then runs the server's own OAuth (the MCP SDK's client: discovery, dynamic
   registration or the pre-registered client, PKCE, `resource`) with `/connect/callback` as the
   redirect URI, sending the browser to the server's authorization server;
4. `/connect/callback` hands the code to that flow; its tokens are kept for that person alone
   (`oauth.kept_as`: the server's name and the person's key) and renewed with their refresh
   token like any kept sign-in.

No token is shown, logged or written anywhere but the sign-in store.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from bundlectl import credentials
from bundlectl.config.expand import expand
from bundlectl.errors import BundlectlError, ServerError
from bundlectl.gateway.approvals_html import html_response, page, shown
from bundlectl.gateway.signin import SignIn, SignInFailed

if TYPE_CHECKING:
    from collections.abc import Callable

    from anyio.abc import TaskGroup
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from bundlectl.calls.pipeline import Pipeline
    from bundlectl.config.settings import TokenIssuer
    from bundlectl.gateway.identity import Caller
    from bundlectl.mcpio.target import Target
    from bundlectl.resolve.resolved import Resolution

LINK_TTL = 600.0  # seconds a sign-in link is good for
LINKS = 256  # links kept at most; the oldest is dropped beyond that
FLOW_WAIT = 30.0  # seconds the server's sign-in may take to give its authorization URL
CODE_WAIT = 300.0  # seconds the person may take at the server's authorization server
COOKIE = "bundlectl_connect"  # binds the identity check to the browser that started it


class SignInNeeded(ServerError):
    """The person has no sign-in for the server: they are given a link to make one."""

    def __init__(self, server: str, caller: Caller) -> None:
        super().__init__(
            f"server {server!r} needs {caller.subject} to sign in to it first",
            hint="open the sign-in link, then call the tool again",
        )
        self.server, self.caller = server, caller


def person_key(caller: Caller) -> str:
    """Who a kept sign-in belongs to: a digest of the caller's issuer and subject (a name for
    the sign-in store, never the subject itself)."""
    return hashlib.sha256(f"{caller.issuer}\0{caller.subject}".encode()).hexdigest()[:24]


def signed_in(target: Target) -> bool:
    """Whether the person of `target` (`Target.person`) has a sign-in kept for it."""
    from bundlectl.mcpio.oauth import kept_as  # noqa: PLC0415 - the SDK's OAuth: here only

    url = expand(target.spec.url or "", os.environ, where=f"server {target.name!r}")
    return bool(credentials.load(kept_as(target), url).tokens)


@dataclass
class _Link:
    """A sign-in link: whose, for which server."""

    server: str
    issuer: str
    subject: str
    made: float


@dataclass
class _Flow:
    """The server's own sign-in for one person, in progress."""

    link: _Link
    opened: anyio.Event = field(default_factory=anyio.Event)  # the authorization URL is known
    url: str | None = None
    coded: anyio.Event = field(default_factory=anyio.Event)  # the code came back
    code: dict[str, str] = field(default_factory=dict)
    done: anyio.Event = field(default_factory=anyio.Event)
    failed: BundlectlError | None = None

    async def show(self, authorization_url: str) -> None:
        self.url = authorization_url
        self.opened.set()

    async def back(self) -> Any:
        from mcp.shared.auth import AuthorizationCodeResult

        with anyio.fail_after(CODE_WAIT):
            await self.coded.wait()
        if "code" not in self.code:
            why = self.code.get("error_description") or self.code.get("error") or "no code"
            raise ServerError(f"the server's authorization server refused the sign-in: {why}")
        # `iss` (RFC 9207): the SDK checks it names the authorization server it asked
        return AuthorizationCodeResult(
            code=self.code["code"], state=self.code.get("state"), iss=self.code.get("iss")
        )


@dataclass
class PersonalSignIns:
    """The gateway's sign-in links and the sign-ins they lead to (see the module)."""

    pipeline: Pipeline  # the policy in force (its config, as reloaded) and its servers' targets
    group: TaskGroup  # where a sign-in's OAuth runs
    log: Callable[[str], None]
    verifier: Any  # () -> Verifier: the gateway's, as reloaded
    _links: dict[str, _Link] = field(default_factory=dict)
    _identifying: dict[str, str] = field(default_factory=dict)  # issuer state → link id
    _flows: dict[str, _Flow] = field(default_factory=dict)  # the server's OAuth state → flow
    signin: SignIn = field(default_factory=SignIn)

    def link(self, needed: SignInNeeded, base: str) -> str:
        """A new link for the person of `needed` to sign in to its server (good once)."""
        now = time.time()
        for old in [k for k, v in self._links.items() if now - v.made > LINK_TTL]:
            del self._links[old]
        while len(self._links) >= LINKS:
            del self._links[next(iter(self._links))]
        key = secrets.token_urlsafe(24)
        caller = needed.caller
        self._links[key] = _Link(needed.server, caller.issuer, caller.subject, now)
        return f"{base}/connect/{key}"

    def routes(self) -> list[Route]:
        from starlette.routing import Route

        return [
            Route("/connect/identified", self.identified),
            Route("/connect/callback", self.callback),
            Route("/connect/{link}", self.opened),
        ]

    def _issuer(self, name: str) -> TokenIssuer | None:
        auth = self.pipeline.resolution.project.config.gateway.auth
        for issuer in auth.issuers if auth is not None else []:
            if issuer.issuer.rstrip("/") == name.rstrip("/") and issuer.client_id:
                return issuer
        return None

    async def opened(self, request: Request) -> Response:
        """Step 1: to the caller's issuer, to learn who is at this browser."""
        from starlette.responses import RedirectResponse

        key = request.path_params["link"]
        link = self._links.get(key)
        if link is None or time.time() - link.made > LINK_TTL:
            return _said("Sign in", "This sign-in link is unknown, used or expired.", 404)
        issuer = self._issuer(link.issuer)
        if issuer is None:
            return _said("Sign in", f"The issuer {link.issuer} has no client_id here.", 404)
        try:
            where, state = await self.signin.start(
                issuer,
                public_base(self.pipeline.resolution, request.url.scheme, request.url.netloc)
                + "/connect/identified",
            )
        except SignInFailed as exc:
            return _said("Sign in", exc.message, 502)
        self._identifying[state] = key
        answer = RedirectResponse(where, status_code=303)
        answer.set_cookie(
            COOKIE,
            state,
            max_age=int(LINK_TTL),
            httponly=True,
            samesite="lax",  # the issuer's redirect back is a navigation from another site
            path="/connect/identified",
            secure=request.url.scheme == "https",
        )
        return answer

    async def identified(self, request: Request) -> Response:
        """Step 2 and 3: the person the issuer names, when they made the call; then to the
        server's authorization server."""
        from starlette.responses import RedirectResponse

        query = request.query_params
        state, code = query.get("state", ""), query.get("code", "")
        bound = request.cookies.get(COOKIE, "")
        if not state or not code or not hmac.compare_digest(state.encode(), bound.encode()):
            return _said("Sign in", "This sign-in was not started in this browser.", 400)
        key = self._identifying.pop(state, None)
        link = self._links.pop(key, None) if key is not None else None
        if link is None:
            return _said("Sign in", "This sign-in link is unknown, used or expired.", 404)
        try:
            claims = await self.signin.redeemed(state, code, self.verifier())
        except SignInFailed as exc:
            return _said("Sign in", exc.message, 401)
        if claims.get("sub") != link.subject or str(claims.get("iss", "")).rstrip(
            "/"
        ) != link.issuer.rstrip("/"):
            who = claims.get("email") or claims.get("sub")
            return _said(
                "Not your link",
                f"This link is for the person who made the call; you signed in as {who}.",
                403,
            )
        flow = _Flow(link)
        try:
            target = self._target(link)
            from bundlectl.mcpio.oauth import fresh_auth  # noqa: PLC0415

            url = expand(target.spec.url or "", os.environ, where=f"server {link.server!r}")
            back = public_base(self.pipeline.resolution, request.url.scheme, request.url.netloc)
            back += "/connect/callback"
            target.auth = fresh_auth(target, url, back, flow.show, flow.back)
        except BundlectlError as exc:
            return _said("Sign in", exc.message, 502)
        self.group.start_soon(self._run, flow, target)
        with anyio.move_on_after(FLOW_WAIT):
            await _first(flow.opened, flow.done)
        if flow.url is None:
            why = flow.failed.message if flow.failed else "it did not answer in time"
            return _said("Sign in", f"Server {link.server!r} could not start a sign-in: {why}", 502)
        theirs = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(flow.url).query))
        self._flows[theirs.get("state", "")] = flow
        answer = RedirectResponse(flow.url, status_code=303)
        answer.delete_cookie(COOKIE, path="/connect/identified")
        return answer

    async def callback(self, request: Request) -> Response:
        """Step 4: the server's authorization server sends the person back with a code."""
        query = dict(request.query_params)
        flow = self._flows.pop(query.get("state", ""), None)
        if flow is None:
            return _said("Sign in", "This sign-in is unknown or already finished.", 400)
        flow.code = query
        flow.coded.set()
        with anyio.move_on_after(60):
            await flow.done.wait()
        server = flow.link.server
        if flow.failed is not None or not flow.done.is_set():
            why = flow.failed.message if flow.failed else "it did not finish in time"
            return _said("Sign in", f"The sign-in to {server!r} failed: {why}", 502)
        self.log(f"{flow.link.subject} signed in to server {server!r}")
        return _said(
            "Signed in",
            f"Signed in to {server} as {flow.link.subject}. Go back to your agent: the tool can "
            "be called now.",
            200,
        )

    def _target(self, link: _Link) -> Target:
        from bundlectl.gateway.identity import Caller  # noqa: PLC0415

        target = self.pipeline.target(link.server, quiet=True)
        target.person = person_key(Caller(link.subject, link.issuer, ""))
        return target

    async def _run(self, flow: _Flow, target: Target) -> None:
        """The server's OAuth through the SDK's client, until its tokens are kept."""
        from bundlectl.mcpio.connect import connect  # noqa: PLC0415
        from bundlectl.mcpio.session import SdkSession  # noqa: PLC0415

        try:
            async with connect(target, connect_timeout=CODE_WAIT + 30) as client:
                await SdkSession(client).tools()
        except BundlectlError as exc:
            flow.failed = exc
        except Exception as exc:  # the SDK's OAuth errors: said, never a traceback
            flow.failed = ServerError(str(exc) or type(exc).__name__)
        finally:
            flow.done.set()
            flow.opened.set()
            for state in [k for k, v in self._flows.items() if v is flow]:
                del self._flows[state]  # a person who never came back


async def _first(*events: anyio.Event) -> None:
    """Until the first of `events` is set."""
    async with anyio.create_task_group() as group:

        async def wait(event: anyio.Event) -> None:
            await event.wait()
            group.cancel_scope.cancel()

        for event in events:
            group.start_soon(wait, event)


def public_base(resolution: Resolution, scheme: str, host: str) -> str:
    """The gateway's public origin: gateway.auth.resource's when set (behind a proxy), else
    the request's own scheme and Host (checked on the way in)."""
    auth = resolution.project.config.gateway.auth
    if auth is not None and auth.resource:
        parts = urllib.parse.urlsplit(str(auth.resource))
        return f"{parts.scheme}://{parts.netloc}"
    return f"{scheme}://{host}"


def _said(title: str, text: str, status: int) -> Response:
    return html_response(page(title, f"<p>{shown(text)}</p>"), status)
