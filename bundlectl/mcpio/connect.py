"""Open a client session to one configured server, over its transport, with a connect deadline.

Every failure becomes one of our errors (exit 5 server failure, 6 timeout) with a one-line reason
and the tail of the server's stderr.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import subprocess
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import pydantic

from bundlectl import __version__, servers, telemetry
from bundlectl.config.expand import expand
from bundlectl.config.urls import HINT as URL_HINT
from bundlectl.config.urls import handed_over_problem
from bundlectl.errors import (
    BundlectlError,
    CallTimeout,
    ClientLacks,
    ServerCrashed,
    ServerError,
    ToolCallError,
    UsageError,
)
from bundlectl.mcpio.child import Child
from bundlectl.mcpio.stdio import child_transport
from bundlectl.mcpio.target import Target, start_child
from bundlectl.output import visible
from bundlectl.suggest import Suggester

if TYPE_CHECKING:
    import ssl

MISSING_CAPABILITY = -32021  # MCP 2026-07-28: a capability the client did not declare


def _client_target(target: Target, child: Child | None) -> Any:
    """What `mcp.Client` connects to: a server object, or a transport context manager."""
    spec = target.spec
    if target.builtin:
        return servers.build(target.builtin, target.builtin_root(), target.builtin_unprotected())
    if spec.transport == "stdio":
        return child_transport(child or start_child(target), tap=target.tap)
    where = f"server {target.name!r}"
    environ = dict(os.environ)
    url = expand(spec.url or "", environ, where=where)
    headers = {
        k: expand(v, environ, where=f"{where} (headers.{k})") for k, v in spec.headers.items()
    }
    if spec.auth is not None and spec.auth.exchange is not None:  # on behalf of a person
        if target.bearer is None:
            raise UsageError(
                f"server {target.name!r} takes calls only on behalf of a person (its "
                "auth.exchange trades the caller's identity token for one made for it)",
                hint="call it through `bundlectl serve --transport streamable-http` with "
                "gateway.auth.issuers, whose callers' tokens it exchanges",
            )
        headers["Authorization"] = f"Bearer {target.bearer}"
    auth = _oauth(target, url, headers)
    if spec.transport == "sse":
        from mcp.client.sse import sse_client

        return sse_client(
            url,
            headers=headers,
            timeout=30,
            sse_read_timeout=spec.timeout + 30,
            auth=auth,
            httpx_client_factory=functools.partial(_http_client, target, home=url),
        )
    return _streamable_http(url, headers, target, auth)


@functools.cache
def _tls() -> ssl.SSLContext:
    """httpx's own default TLS context (its CA roots; `SSL_CERT_FILE`/`SSL_CERT_DIR` honoured),
    made once per process: making one reads the whole CA bundle, ~60 ms, which every client
    paid — each call of `exec`, each connection of the gateway to a remote server."""
    import httpx2

    return httpx2.create_ssl_context()


def _http_client(
    target: Target,
    headers: dict[str, str] | None = None,
    timeout: Any = None,
    auth: Any = None,
    *,
    home: str = "",
) -> Any:
    """Our HTTP client for a remote server at `home` (SSE and streamable HTTP; the SDK's
    client factory's parameters): the call's trace context goes to the server as HTTP headers
    too (`_meta` is the SDK's), and a 401 or 403 is noted on the target (the SDK reports it
    only as "an error response"). A request elsewhere — the sign-in's metadata, registration
    and token endpoints the server names, a redirect — obeys the URL rule (`config.urls`).
    Default timeouts as the SDK's: a server may hold a response stream open."""
    import httpx2

    async def note(response: Any) -> None:
        if response.status_code in (401, 403):
            target.refused = response.status_code

    async def within_the_rule(request: Any) -> None:
        url = str(request.url)
        why = handed_over_problem(home, url)
        if why is not None:
            raise ServerError(
                f"server {target.name!r} sends bundlectl to {visible(url)}, which {why}; "
                "nothing was sent there",
                hint=URL_HINT,
            )

    return httpx2.AsyncClient(
        headers=headers,
        timeout=timeout or httpx2.Timeout(30, read=300),
        verify=_tls(),
        auth=auth,
        event_hooks={
            "request": [within_the_rule]
            + ([telemetry.inject_headers] if telemetry.active() else []),
            "response": [note],
        },
    )


def _oauth(target: Target, url: str, headers: dict[str, str]) -> Any:
    """OAuth for a remote server: the sign-in flow of `auth login`, or the kept sign-in (its
    tokens sent and refreshed); none when the config sends its own Authorization header."""
    if any(name.lower() == "authorization" for name in headers):
        return None
    if target.auth is not None:
        return target.auth
    from bundlectl.mcpio.oauth import kept_auth, unattended_auth  # noqa: PLC0415 - remote only

    auth = target.spec.auth
    if auth is not None and auth.grant == "client_credentials":
        return unattended_auth(target, url)
    return kept_auth(target, url)


@asynccontextmanager
async def _streamable_http(
    url: str, headers: dict[str, str], target: Target, auth: Any = None
) -> AsyncIterator[Any]:
    """The streamable HTTP transport on our HTTP client (`_http_client`), which we own and close."""
    from mcp.client.streamable_http import streamable_http_client

    http = _http_client(target, headers, auth=auth, home=url)
    async with http, streamable_http_client(url, http_client=http) as streams:
        yield streams


@asynccontextmanager
async def connect(
    target: Target,
    *,
    connect_timeout: float,
    child: Child | None = None,
    option: str = "--connect-timeout",
    options: Mapping[str, Any] | None = None,
) -> AsyncIterator[Any]:
    """An initialised `mcp.Client`; errors come out as BundlectlError subclasses.

    `child` is a stdio server already started with `start_child`; `options`: more arguments of
    `mcp.Client` (callbacks for the server's requests and notifications).
    """
    from mcp import Client
    from mcp_types import Implementation

    from bundlectl.mcpio.tasks import TaskPolling  # noqa: PLC0415 - it imports the SDK

    client_target = _client_target(target, child)
    me = Implementation(name="bundlectl", version=__version__)
    scope = anyio.CancelScope(deadline=anyio.current_time() + connect_timeout)
    try:
        with scope:
            async with Client(
                client_target,
                mode="auto",
                client_info=me,
                extensions=[TaskPolling()],  # a server's tasks, followed to their result
                **(options or {}),
            ) as client:
                scope.deadline = math.inf  # connected: only the call's own timeout applies now
                yield client
    except BundlectlError:
        raise
    except BaseException as exc:
        error = classify(exc, target)
        if error is None:
            raise
        raise error from None
    if scope.cancelled_caught:
        raise connect_timed_out(target, connect_timeout, option)


def connect_timed_out(target: Target, limit: float, option: str) -> CallTimeout:
    """The error of a server that did not finish its handshake within `limit` seconds."""
    return CallTimeout(
        f"server {target.name!r} did not finish connecting within {limit:g} s; it was stopped"
        + tail_of(target),
        hint=f"raise {option}, or check that the server starts on its own",
    )


def leaves(exc: BaseException) -> list[BaseException]:
    """The non-group exceptions inside (possibly nested) exception groups."""
    if isinstance(exc, BaseExceptionGroup):
        out: list[BaseException] = []
        for inner in exc.exceptions:
            out.extend(leaves(inner))
        return out
    return [exc]


def tail_of(target: Target) -> str:
    """The last lines of the server's stderr, for a message (empty when there are none to
    show)."""
    tee = target.stderr
    if tee is None:
        return ""
    if target.child is not None and target.child.process.poll() is not None:
        tee.close(wait=0.5)  # the server is gone: let the copy reach the end of what it wrote
    lines = tee.last_lines()
    if not lines:
        return "\n(it wrote nothing to stderr)"
    return "\nlast lines of its stderr:\n" + "\n".join(f"  | {line}" for line in lines)


def classify(exc: BaseException, target: Target) -> BundlectlError | None:
    """Map an exception from the SDK or the OS to our error, or None when it is not ours."""
    import httpx2
    from mcp.shared.exceptions import MCPError

    found = leaves(exc)
    ours = [e for e in found if isinstance(e, BundlectlError)]
    if ours:
        return ours[0]
    for leaf in found:
        if isinstance(leaf, KeyboardInterrupt | anyio.get_cancelled_exc_class()):
            return None
    name = target.name
    noted = _oauth_failed(found, target) or _noted(target)
    if noted is not None:
        return noted
    # The most telling failure first: the SDK's own errors, then the OS's, then the rest.
    found.sort(key=lambda e: 0 if isinstance(e, MCPError) else 1)
    for leaf in found:
        if isinstance(leaf, FileNotFoundError | PermissionError):
            cmd = target.spec.command
            return ServerError(
                f"could not start server {name!r}: {cmd!r}: {leaf.strerror}",
                hint=f"install {cmd!r} or fix servers.{name}.command",
            )
        if isinstance(leaf, MCPError):
            return _answered_error(leaf, target)
        if isinstance(leaf, httpx2.HTTPError):
            return ServerError(
                f"cannot reach server {name!r} at {target.spec.url}: "
                f"{type(leaf).__name__}: {leaf}" + tail_of(target),
                hint="check that the server is running and the url is right",
            )
        if isinstance(leaf, pydantic.ValidationError | ValueError | RuntimeError):
            first = str(leaf).splitlines()[0] if str(leaf) else type(leaf).__name__
            return broke_protocol(target, first)
        if isinstance(
            leaf,
            OSError
            | EOFError
            | anyio.BrokenResourceError
            | anyio.ClosedResourceError
            | anyio.EndOfStream,
        ):
            return ServerCrashed(
                f"lost the connection to server {name!r}: "
                f"{type(leaf).__name__}: {leaf}" + tail_of(target)
            )
    return None


def _answered_error(leaf: Any, target: Target) -> BundlectlError:
    """A JSON-RPC error the server (or the SDK on its behalf) answered a request with."""
    from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

    if leaf.code == REQUEST_TIMEOUT:
        return call_timed_out(target)
    # The SDK's own "Connection closed" has the code JSON-RPC leaves to servers, and servers use
    # it too: only the SDK's message says the connection ended.
    if leaf.code == CONNECTION_CLOSED and leaf.error.message == "Connection closed":
        return connection_closed(target)
    return returned_error(target, leaf.error.message, leaf.code, leaf.error.data)


def call_timed_out(target: Target) -> CallTimeout:
    return CallTimeout(f"server {target.name!r} did not answer in time" + tail_of(target))


def connection_closed(target: Target) -> ServerError:
    """The error of a server whose connection ended under a call."""
    child = target.child
    if child is not None and child.violation:
        return broke_protocol(target, child.violation)
    if child is not None:  # its stdout ended: it is exiting; let it finish, so that what it
        with contextlib.suppress(subprocess.TimeoutExpired):  # said last is in the message
            child.process.wait(timeout=0.2)
    return ServerCrashed(
        f"server {target.name!r} closed the connection (it exited or crashed)" + tail_of(target)
    )


def returned_error(target: Target, message: str, code: Any, data: Any = None) -> ServerError:
    """The error of a server that answered a request with a JSON-RPC error (every session's:
    the SDK's client, the raw pipes): -32021, a capability the client did not declare, is
    `ClientLacks`, with the server's `data` naming it."""
    message = visible(str(message))  # the server's words: one line, nothing it can hide
    if code == MISSING_CAPABILITY:
        return ClientLacks(
            f"server {target.name!r} needs a capability the client did not declare: {message}",
            data,
            hint="the tool asks its client for this during the call; use a client that can "
            "answer it",
        )
    return ServerError(
        f"server {target.name!r} returned an error: {message} (code {code})" + tail_of(target)
    )


def _oauth_failed(found: list[BaseException], target: Target) -> ServerError | None:
    """The SDK's OAuth flow stopped (metadata, registration, token): say why, before the 401
    that it leaves behind."""
    from mcp.client.auth import OAuthFlowError

    for leaf in found:
        if isinstance(leaf, OAuthFlowError):
            name = target.name
            return ServerError(
                f"the OAuth sign-in to server {name!r} failed: {leaf or type(leaf).__name__}",
                hint=f"check servers.{name}.url and .auth; `bundlectl auth login {name}` "
                "starts the sign-in afresh",
            )
    return None


def _noted(target: Target) -> ServerError | None:
    """What the transport saw that the SDK reports less clearly: garbage on a stdio server's
    stdout, an HTTP server's refusal of our credentials."""
    if target.child is not None and target.child.violation:
        return broke_protocol(target, target.child.violation)
    if target.refused is not None:
        return unauthorized(target, target.refused)
    return None


def unauthorized(target: Target, status: int) -> ServerError:
    """A server that answered 401 (no or a wrong credential) or 403 (not enough of one)."""
    name = target.name
    what = "requires authorization" if status == 401 else "refused our credentials"
    sent = ", ".join(sorted(target.spec.headers)) or "no headers"
    return ServerError(
        f"server {name!r} {what} (HTTP {status}); bundlectl sent {sent}",
        hint=f"sign in: `bundlectl auth login {name}` (OAuth); or give a static credential: "
        f'servers.{name}.headers: {{Authorization: "Bearer ${{TOKEN}}"}} with TOKEN set in the '
        "environment",
    )


def broke_protocol(target: Target, what: str) -> ServerError:
    return ServerCrashed(f"server {target.name!r} broke the protocol: {what}" + tail_of(target))


def missing_tool(name: str, tool: str, available: list[str]) -> ToolCallError:
    close = Suggester(available).closest(tool, n=3, cutoff=0.5)
    hint = (
        f"did you mean {', '.join(f'{name}.{c}' for c in close)}?"
        if close
        else f"`bundlectl tools --live --server {name}` lists what it has"
    )
    return ToolCallError(f"server {name!r} has no tool {tool!r}", hint=hint)
