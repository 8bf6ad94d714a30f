"""OAuth 2.1 for remote MCP servers (SPEC 12), on the MCP SDK's client, which the protocol's
conformance suite was written against: discovery from the 401 (`WWW-Authenticate`, RFC 9728
protected resource metadata, RFC 8414 / OpenID metadata), dynamic client registration (RFC
7591), authorization code with PKCE (S256) and the `resource` parameter, scope step-up on
`insufficient_scope`, refresh tokens. What is ours: where sign-ins are kept (`credentials`),
the loopback redirect of `bundlectl auth login`, and that a command which cannot ask anyone
(`exec`, `serve`, `tools --live`) fails with "run `bundlectl auth login SERVER`" (exit 5) where
the flow would need a person, and never waits for one.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import threading
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

import anyio
from mcp.client.auth import OAuthClientProvider, TokenStorage
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)

from bundlectl import credentials
from bundlectl.browser import open_url
from bundlectl.config.expand import expand
from bundlectl.config.urls import HINT as URL_HINT
from bundlectl.config.urls import handed_over_problem
from bundlectl.errors import ServerError
from bundlectl.output import err, visible

if TYPE_CHECKING:
    from bundlectl.mcpio.target import Target

LOGIN_WAIT = 300.0  # seconds `auth login` waits for the browser to come back


class LoginNeeded(ServerError):
    """The server needs a person to sign in, and no one can be asked here."""


def login_needed(target: Target) -> LoginNeeded:
    if target.person is not None:  # a person's own sign-in through the gateway
        credentials.forget(kept_as(target), target.spec.url or "")
        return LoginNeeded(
            f"server {target.name!r} needs you to sign in again",
            hint="call the tool again: the gateway answers with a link to sign in",
        )
    return LoginNeeded(
        f"server {target.name!r} needs you to sign in (OAuth), and this command cannot ask you",
        hint=f"run `bundlectl auth login {target.name}`, then try again",
    )


def kept_as(target: Target) -> str:
    """The name a sign-in to `target` is kept under: the server's, or with `auth.per_person`
    the server's and the person's (`Target.person`), apart from everyone else's."""
    return target.name if target.person is None else f"{target.name}@{target.person}"


class KeptSignIn(TokenStorage):
    """The SDK's token storage over `credentials`: the access token's expiry is kept as a
    moment, so a token read back later is refreshed once it has expired."""

    def __init__(self, server: str, url: str) -> None:
        self.server, self.url = server, url

    async def get_tokens(self) -> OAuthToken | None:
        kept = credentials.load(self.server, self.url)
        if not kept.tokens:
            return None
        left = credentials.expires_in(kept)
        fields = {**kept.tokens, "expires_in": None if left is None else max(0, int(left))}
        return OAuthToken.model_validate(fields)

    async def set_tokens(self, tokens: OAuthToken) -> None:
        kept = credentials.load(self.server, self.url)
        kept.tokens = tokens.model_dump(mode="json", exclude_none=True, exclude={"expires_in"})
        kept.expires_at = time.time() + tokens.expires_in if tokens.expires_in else None
        kept.signed_in_at = kept.signed_in_at or time.time()
        credentials.save(kept)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        kept = credentials.load(self.server, self.url)
        return OAuthClientInformationFull.model_validate(kept.client) if kept.client else None

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        kept = credentials.load(self.server, self.url)
        kept.client = client_info.model_dump(mode="json", exclude_none=True)
        credentials.save(kept)


class _Provider(OAuthClientProvider):
    """The SDK's provider, told when a kept access token expires (it learns that only from a
    token response it received itself), so an expired one is refreshed before it is sent."""

    async def _initialize(self) -> None:
        await super()._initialize()
        tokens = self.context.current_tokens
        if tokens is not None and tokens.expires_in is not None:
            self.context.update_token_expiry(tokens)


def _metadata(target: Target, redirect: str) -> OAuthClientMetadata:
    """What we register as (dynamic registration), or say we are (a pre-registered client)."""
    auth = target.spec.auth
    fields: dict[str, Any] = {
        "client_name": "bundlectl",
        "redirect_uris": [redirect],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    }
    if auth is not None and auth.scopes:
        fields["scope"] = " ".join(auth.scopes)
    return OAuthClientMetadata.model_validate(fields)


def _pre_registered(target: Target, redirect: str) -> dict[str, Any] | None:
    """The client the server's owner registered for us (`servers.NAME.auth.client_id`), as the
    SDK keeps a client registration; None: we register ourselves."""
    auth = target.spec.auth
    if auth is None or auth.client_id is None:
        return None
    secret = None
    if auth.client_secret is not None:
        where = f"servers.{target.name}.auth.client_secret"
        secret = expand(auth.client_secret, os.environ, where=where)
    method = auth.token_endpoint_auth_method or ("client_secret_basic" if secret else "none")
    client = {
        "client_id": auth.client_id,
        "redirect_uris": [redirect],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": method,
    }
    if secret is not None:
        client["client_secret"] = secret
    if auth.scopes:
        client["scope"] = " ".join(auth.scopes)
    return client


def unattended_auth(target: Target, url: str) -> Any:
    """OAuth client credentials (`auth.grant: client_credentials`): tokens for the client
    itself, fetched (and kept, and fetched again) without anyone signing in."""
    auth = target.spec.auth
    assert auth is not None
    assert auth.client_id is not None
    assert auth.client_secret is not None
    where = f"servers.{target.name}.auth.client_secret"
    method = auth.token_endpoint_auth_method
    return ClientCredentialsOAuthProvider(
        url,
        KeptSignIn(target.name, url),
        auth.client_id,
        expand(auth.client_secret, os.environ, where=where),
        token_endpoint_auth_method="client_secret_post"
        if method == "client_secret_post"
        else "client_secret_basic",
        scope=" ".join(auth.scopes) or None,
    )


def kept_auth(target: Target, url: str) -> Any:
    """The OAuth of a server someone signed in to (`auth login`): its kept tokens sent and
    refreshed. A flow that needs a person again fails with `login_needed` — unless a person is
    at this terminal (`target.sign_in`: exec) and the server asks for more access than the
    token has (step-up on `insufficient_scope`): then they sign in again in the browser, on the
    loopback redirect the sign-in was registered with, and the call goes on. None: no sign-in
    kept for it (a 401 then says how to sign in)."""
    kept = credentials.load(kept_as(target), url)
    if not kept.tokens:
        return None
    redirect = ((kept.client or {}).get("redirect_uris") or ["http://127.0.0.1/callback"])[0]
    opened: list[_Loopback] = []

    async def cannot_ask(authorization_url: str) -> None:
        if not target.sign_in:
            raise login_needed(target)
        try:
            opened.append(_Loopback(urllib.parse.urlsplit(redirect).port or 0))
        except OSError:  # its port is taken now: a new sign-in registers another
            raise login_needed(target) from None
        err(f"server {target.name!r} asks for more access than your sign-in gives")
        await opened[0].show(target, authorization_url, browser=True)

    async def no_callback() -> AuthorizationCodeResult:
        if not opened:
            raise login_needed(target)
        try:
            return await opened[0].code(target, LOGIN_WAIT)
        finally:
            opened.pop().close()

    return _signing_in(target, url, redirect, cannot_ask, no_callback)


def _signing_in(
    target: Target,
    url: str,
    redirect: str,
    show: Callable[[str], Awaitable[None]],
    back: Callable[[], Awaitable[AuthorizationCodeResult]],
) -> Any:
    """The SDK's authorization-code flow for `target`'s sign-in kept under `kept_as(target)`:
    the authorization URL handed to `show`, the code awaited from `back`, and
    `auth.client_metadata_url` as the client id where the server takes metadata documents."""
    auth = target.spec.auth

    async def shown(authorization_url: str) -> None:
        """The sign-in page the server's authorization server names, when the URL rule lets a
        person be sent there (a plain-http page elsewhere would take their password)."""
        why = handed_over_problem(url, authorization_url)
        if why is not None:
            raise ServerError(
                f"server {target.name!r} names {visible(authorization_url)} as its sign-in "
                f"page, which {why}; no browser was sent there",
                hint=URL_HINT,
            )
        await show(authorization_url)

    return _Provider(
        url,
        _metadata(target, redirect),
        KeptSignIn(kept_as(target), url),
        redirect_handler=shown,
        callback_handler=back,
        client_metadata_url=auth.client_metadata_url if auth is not None else None,
    )


class _Callback(http.server.BaseHTTPRequestHandler):
    """The loopback redirect: takes the code and state of the one sign-in it waits for."""

    server: _CallbackServer

    def do_GET(self) -> None:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        if not self.path.startswith("/callback"):
            self.send_error(404)
            return
        self.server.result = {key: values[0] for key, values in query.items()}
        ok = "code" in query
        body = (
            b"<!doctype html><title>bundlectl</title><p>Signed in. You can close this tab."
            if ok
            else b"<!doctype html><title>bundlectl</title><p>Sign-in failed; see the terminal."
        )
        self.send_response(200 if ok else 400)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.server.arrived.set()

    def log_message(self, *args: Any) -> None:
        pass


class _CallbackServer(http.server.HTTPServer):
    result: dict[str, str]
    arrived: threading.Event


class _Loopback:
    """The loopback redirect of one sign-in: a server on 127.0.0.1 (`port`, or any free one)
    that takes the code the browser brings back."""

    def __init__(self, port: int = 0) -> None:
        self.server = _CallbackServer(("127.0.0.1", port), _Callback)
        self.server.result, self.server.arrived = {}, threading.Event()
        self.redirect = f"http://127.0.0.1:{self.server.server_address[1]}/callback"
        threading.Thread(
            target=self.server.serve_forever, name="oauth-callback", daemon=True
        ).start()

    async def show(self, target: Target, authorization_url: str, *, browser: bool) -> None:
        err(f"sign in to {target.name!r} in your browser:\n  {visible(authorization_url)}")
        if browser:
            await anyio.to_thread.run_sync(open_url, authorization_url)

    async def code(self, target: Target, wait: float) -> AuthorizationCodeResult:
        arrived = await anyio.to_thread.run_sync(self.server.arrived.wait, wait)
        if not arrived:
            raise ServerError(
                f"no answer from the browser within {wait:.0f} s; nothing was signed in",
                hint=f"run `bundlectl auth login {target.name}` again (--no-browser prints the "
                "URL to open yourself)",
            )
        # taken: a second authorization in the same sign-in (the server moved to another
        # authorization server, or asks for more scope) waits for its own answer
        result, self.server.result = self.server.result, {}
        self.server.arrived.clear()
        if "code" not in result:
            why = result.get("error_description") or result.get("error") or "no code"
            raise ServerError(f"the authorization server refused the sign-in: {why}")
        # `iss` (RFC 9207): which authorization server sent the browser back; the SDK checks it
        # against the one it asked, where that server says it sends one (mix-up attacks)
        return AuthorizationCodeResult(
            code=result["code"], state=result.get("state"), iss=result.get("iss")
        )

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def fresh_auth(
    target: Target,
    url: str,
    redirect: str,
    show: Callable[[str], Awaitable[None]],
    back: Callable[[], Awaitable[AuthorizationCodeResult]],
) -> Any:
    """The OAuth of a new sign-in, kept under `kept_as(target)`: what was kept is dropped, and
    the client registers anew (or as pre-registered) with `redirect`; the authorization URL is
    handed to `show` and the code awaited from `back` — `auth login`'s loopback, or the
    gateway's callback route for one person's sign-in (`auth.per_person`)."""
    kept = credentials.load(kept_as(target), url)
    kept.tokens, kept.expires_at, kept.signed_in_at = None, None, None
    kept.client = _pre_registered(target, redirect)
    credentials.save(kept)
    return _signing_in(target, url, redirect, show, back)


@contextlib.contextmanager
def login_auth(
    target: Target, url: str, *, browser: bool, wait: float = LOGIN_WAIT
) -> Iterator[Any]:
    """The OAuth of `bundlectl auth login`: a loopback redirect on 127.0.0.1, the authorization
    URL printed (and opened in the browser when `browser`), a fresh registration and sign-in."""
    loopback = _Loopback()

    async def show(authorization_url: str) -> None:
        await loopback.show(target, authorization_url, browser=browser)

    async def back() -> AuthorizationCodeResult:
        return await loopback.code(target, wait)

    try:
        yield fresh_auth(target, url, loopback.redirect, show, back)
    finally:
        loopback.close()
