"""What the gateway reads of an MCP request's context (the client's connection, its owner, its
protocol, what it can be asked) and the errors it answers with."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError

from bundlectl.errors import (
    BundlectlError,
)

LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


@contextlib.contextmanager
def _as_protocol_error() -> Iterator[None]:
    """Our errors as JSON-RPC errors with our message (prompts and resources have no error
    results; the SDK would say only "internal error")."""

    try:
        yield
    except BundlectlError as exc:
        raise MCPError(code=types.INTERNAL_ERROR, message=exc.explained) from None


def _not_found(message: str) -> Exception:
    """A JSON-RPC error for an unknown prompt or resource (those have no error results)."""
    return MCPError(code=types.INVALID_PARAMS, message=message)


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=message)], is_error=True
    )


def _connection(ctx: Any) -> Any:
    """The client connection a request context belongs to (the SDK's `Connection`; for a call
    on the express lane, the connection the lane learnt, else the lane itself)."""
    lane = getattr(ctx, "lane", None)
    if lane is not None:
        return lane.connection if lane.connection is not None else lane
    return getattr(ctx.session, "_connection", ctx.session)


def _owner(ctx: Any) -> Any:
    """Which client connection a request context belongs to (the express lane's calls: the
    lane, which is one stdio client)."""
    lane = getattr(ctx, "lane", None)
    return ("lane", id(lane)) if lane is not None else _session_key(ctx.session)


def _session_key(session: Any) -> int:
    """One key per client connection (a session object may be made per request)."""
    return id(getattr(session, "_connection", session))


def _answers_by_retry(ctx: Any) -> bool:
    """Whether the client of request `ctx` answers a server's elicitation or sampling by
    retrying its call (2026-07-28, declared) rather than on its session."""
    if ctx.session.can_send_request or ctx.protocol_version < MODERN:
        return False
    declared = ctx.session.client_capabilities
    return declared is not None and (
        declared.elicitation is not None or declared.sampling is not None
    )


MODERN = "2026-07-28"  # the protocol with input-required results instead of server requests
