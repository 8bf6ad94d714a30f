"""A streamable HTTP front for a stdio MCP server, so the conformance suite's server scenarios
(which speak HTTP only) can test `bundlectl serve` over stdio.

    python tests/conformance/stdio_bridge.py COMMAND [ARG...]

The whole suite against `serve` over stdio, by hand (in a project like the one of
`tests/test_conformance.py`; the test runs the scenarios where stdio differs):

    python tests/conformance/stdio_bridge.py python -m bundlectl serve --agent suite &
    node tests/npm/node_modules/@modelcontextprotocol/conformance/dist/index.js server --url URL

Each HTTP session starts its own COMMAND and relays JSON-RPC messages both ways, unchanged: the
bridge understands nothing of MCP beyond which request a server message belongs to, so what the
suite sees is what the stdio server said. A server message that is not a response goes on the
stream of the request it belongs to (the request that gave its progress token, else the one
request in flight), else on the session's GET stream. It prints `listening on URL` to stderr.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any
from uuid import uuid4

import anyio
import uvicorn
from anyio.abc import TaskStatus
from mcp import StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.message import ServerMessageMetadata, SessionMessage
from mcp.types import JSONRPCNotification, JSONRPCRequest

# A session's streams closed under a relay: the client ended the session (a DELETE).
ENDED = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream)
# Host and Origin checked as `serve --transport streamable-http` checks them (DNS rebinding).
LOOPBACK = TransportSecuritySettings(
    allowed_hosts=["127.0.0.1:*", "localhost:*"],
    allowed_origins=["http://127.0.0.1:*", "http://localhost:*"],
)


class Relay:
    """One session: the HTTP transport on one side, the stdio server on the other."""

    def __init__(self, params: StdioServerParameters) -> None:
        self.params = params
        self.in_flight: dict[Any, Any] = {}  # request id -> its progress token (or None)

    def related(self, message: Any) -> Any:
        """The client request a server message belongs to, when that can be known."""
        if isinstance(message, JSONRPCNotification) and message.method == "notifications/progress":
            token = (message.params or {}).get("progressToken")
            for request_id, progress in self.in_flight.items():
                if progress is not None and progress == token:
                    return request_id
        if isinstance(message, JSONRPCRequest | JSONRPCNotification) and len(self.in_flight) == 1:
            return next(iter(self.in_flight))
        return None

    async def run(
        self,
        transport: StreamableHTTPServerTransport,
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        async with transport.connect() as (http_read, http_write):
            task_status.started()
            async with (
                stdio_client(self.params) as (server_read, server_write),
                anyio.create_task_group() as tg,
            ):

                async def up() -> None:  # client -> server
                    with contextlib.suppress(*ENDED):  # the client ended the session
                        async for item in http_read:
                            if isinstance(item, Exception):
                                continue
                            message = item.message
                            if isinstance(message, JSONRPCRequest):
                                meta = (message.params or {}).get("_meta") or {}
                                self.in_flight[message.id] = meta.get("progressToken")
                            await server_write.send(SessionMessage(message))
                    tg.cancel_scope.cancel()

                async def down() -> None:  # server -> client
                    with contextlib.suppress(*ENDED):
                        async for item in server_read:
                            if isinstance(item, Exception):
                                continue
                            message = item.message
                            request_id = getattr(message, "id", None)
                            if not isinstance(message, JSONRPCRequest) and request_id is not None:
                                self.in_flight.pop(request_id, None)  # a response
                                await http_write.send(SessionMessage(message))
                                continue
                            meta = ServerMessageMetadata(related_request_id=self.related(message))
                            await http_write.send(SessionMessage(message, meta))
                    tg.cancel_scope.cancel()

                tg.start_soon(up)
                tg.start_soon(down)


class Bridge:
    """The ASGI app: a session per `initialize`, found again by its Mcp-Session-Id."""

    def __init__(self, params: StdioServerParameters) -> None:
        self.params = params
        self.sessions: dict[str, StreamableHTTPServerTransport] = {}
        self.tg: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self.lifespan(receive, send)
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        session = headers.get("mcp-session-id")
        transport = self.sessions.get(session or "")
        if transport is None and session is None:
            transport = StreamableHTTPServerTransport(uuid4().hex, security_settings=LOOPBACK)
            assert transport.mcp_session_id is not None
            self.sessions[transport.mcp_session_id] = transport
            await self.tg.start(self._serve, transport)
            status = []

            async def sent(message: Any) -> None:
                if message["type"] == "http.response.start":
                    status.append(message["status"])
                await send(message)

            await transport.handle_request(scope, receive, sent)
            if not status or status[0] >= 400:  # no session was opened: stop its server
                await transport.terminate()
            return
        if transport is None:
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send({"type": "http.response.body", "body": b"Session not found"})
            return
        await transport.handle_request(scope, receive, send)

    async def _serve(
        self,
        transport: StreamableHTTPServerTransport,
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        try:
            await Relay(self.params).run(transport, task_status=task_status)
        finally:
            self.sessions.pop(transport.mcp_session_id or "", None)

    async def lifespan(self, receive: Any, send: Any) -> None:
        async with anyio.create_task_group() as tg:
            self.tg = tg
            await receive()  # lifespan.startup
            await send({"type": "lifespan.startup.complete"})
            await receive()  # lifespan.shutdown
            tg.cancel_scope.cancel()
        await send({"type": "lifespan.shutdown.complete"})


def main() -> None:
    command, *args = sys.argv[1:]
    # The whole environment (the SDK passes a few variables only): BUNDLECTL_HOME among them.
    bridge = Bridge(StdioServerParameters(command=command, args=args, env=dict(os.environ)))
    config = uvicorn.Config(bridge, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)

    async def serve() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve)
            while not server.started:
                await anyio.sleep(0.01)
            port = server.servers[0].sockets[0].getsockname()[1]
            print(f"listening on http://127.0.0.1:{port}/mcp", file=sys.stderr, flush=True)

    anyio.run(serve)


if __name__ == "__main__":
    main()
