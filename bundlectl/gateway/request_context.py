"""What the gateway reads of an MCP request's context (the client's connection, its owner, its
protocol, what it can be asked) and the errors it answers with."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import mcp_types as types
from mcp.server.connection import Connection, allowed_log_levels
from mcp.server.context import ServerRequestContext
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, ValidationError

from bundlectl.errors import BundlectlError
from bundlectl.mcpio.requests import JsonObject

# The context the SDK gives a request handler (its lifespan and transport request unused but
# for `request.scope`, which HTTP's front door reads).
SdkContext = ServerRequestContext[dict[str, Any], Any]
_Result = TypeVar("_Result", bound=BaseModel)


class Lane(Protocol):
    """The stdio client's line as a request on the express lane reads it (`express.StdioCalls`):
    the client's connection once the SDK served one of its requests, a request sent to the
    client and its answer, a notification posted to it."""

    @property
    def connection(self) -> Connection | None: ...

    async def ask(self, method: str, params: JsonObject) -> JsonObject: ...

    def post(self, message: JsonObject) -> None: ...


@dataclass
class StdioCallContext:
    """What the gateway uses of an MCP request context, for a call on the express lane: the
    client's capabilities, its log level opt-in (2026-07-28), and requests to the client
    (possible on older protocols only, as through the SDK)."""

    lane: Lane
    request_id: types.RequestId | None
    protocol_version: str
    meta: JsonObject

    @property
    def session(self) -> StdioCallContext:
        return self

    @property
    def modern(self) -> bool:
        return self.protocol_version in MODERN_PROTOCOL_VERSIONS

    @functools.cached_property
    def client_capabilities(self) -> types.ClientCapabilities | None:
        if not self.modern:
            known = self.lane.connection
            return known.client_capabilities if known is not None else None
        try:
            declared = self.meta.get(types.CLIENT_CAPABILITIES_META_KEY) or {}
            return types.ClientCapabilities.model_validate(declared)
        except ValidationError:
            return None

    @property
    def can_send_request(self) -> bool:
        return not self.modern

    async def send_request(
        self, request: BaseModel, result_type: type[_Result], metadata: object = None
    ) -> _Result:
        """(`metadata`, the request it relates to, as the SDK's session takes it: stdio has
        one stream, which carries everything.)"""
        data = request.model_dump(by_alias=True, mode="json", exclude_none=True)
        return result_type.model_validate(await self.lane.ask(data["method"], data["params"]))

    async def send_log_message(
        self,
        level: types.LoggingLevel,
        data: object,
        logger: str | None = None,
        related_request_id: types.RequestId | None = None,
    ) -> None:
        if level not in allowed_log_levels(self.protocol_version, self.meta):
            return
        params = {"level": level, "data": data, **({"logger": logger} if logger else {})}
        self.lane.post({"jsonrpc": "2.0", "method": "notifications/message", "params": params})


# The request a piece of the gateway's work answers: through the SDK, or on the express lane.
RequestContext = SdkContext | StdioCallContext
# One client's connection, as a key of what is kept per client (the SDK's connection, the
# session standing for it, or the express lane).
ConnectionKey = object

LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


@contextlib.contextmanager
def as_protocol_error() -> Iterator[None]:
    """Our errors as JSON-RPC errors with our message (prompts and resources have no error
    results; the SDK would say only "internal error")."""

    try:
        yield
    except BundlectlError as exc:
        raise MCPError(code=types.INTERNAL_ERROR, message=exc.explained) from None


def not_found(message: str, uri: str | None = None) -> Exception:
    """A JSON-RPC error for an unknown prompt or resource (those have no error results); a
    resource's names its URI (`data.uri`, SEP-2164)."""
    return MCPError(
        code=types.INVALID_PARAMS, message=message, data=None if uri is None else {"uri": uri}
    )


def error_result(message: str) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=message)], is_error=True
    )


def connection_of(ctx: RequestContext) -> ConnectionKey:
    """The client connection a request context belongs to (the SDK's `Connection`; for a call
    on the express lane, the connection the lane learnt, else the lane itself)."""
    if isinstance(ctx, StdioCallContext):
        lane = ctx.lane
        return lane.connection if lane.connection is not None else lane
    return getattr(ctx.session, "_connection", ctx.session)


def owner_of(ctx: RequestContext) -> object:
    """Which client connection a request context belongs to (the express lane's calls: the
    lane, which is one stdio client)."""
    if isinstance(ctx, StdioCallContext):
        return ("lane", id(ctx.lane))
    return session_key(ctx.session)


def session_key(session: ServerSession) -> int:
    """One key per client connection (a session object may be made per request)."""
    return id(getattr(session, "_connection", session))


def answers_by_retry(ctx: SdkContext) -> bool:
    """Whether the client of request `ctx` answers a server's elicitation or sampling by
    retrying its call (2026-07-28, declared) rather than on its session."""
    if ctx.session.can_send_request or ctx.protocol_version < MODERN:
        return False
    declared = ctx.session.client_capabilities
    return declared is not None and (
        declared.elicitation is not None or declared.sampling is not None
    )


MODERN = "2026-07-28"  # the protocol with input-required results instead of server requests
