"""A streamable HTTP front for a stdio MCP server, so the conformance suite's server scenarios
(which speak HTTP only) can test `bundlectl serve` over stdio.

    python tests/conformance/stdio_bridge.py COMMAND [ARG...]

The whole suite against `serve` over stdio, by hand (in a project like the one of
`tests/test_conformance.py`; the test runs the scenarios where stdio differs):

    python tests/conformance/stdio_bridge.py python -m bundlectl serve --agent suite &
    node tests/npm/node_modules/@modelcontextprotocol/conformance/dist/index.js server --url URL

and on the 2026-07-28 protocol (every scenario passes but those that test HTTP itself:
`server-stateless`'s status codes and header checks, `dns-rebinding-protection`, the pending
header scenarios, and the one in `baseline-2026-07-28.yml`):

    node ... server --url URL --requirements 2026-07-28

Each HTTP session starts its own COMMAND and relays JSON-RPC messages both ways, unchanged: the
bridge understands nothing of MCP beyond which request a server message belongs to, so what the
suite sees is what the stdio server said. A 2026-07-28 request (no session) goes to one COMMAND
for them all, as a client of that protocol keeps one process; one without the protocol's
envelope gets a COMMAND of its own (it would turn that pipe to the older protocol). A server
message that is not a response goes on the stream of the request it belongs to (the request that
gave its progress token, or the listen stream it names, else the one request in flight), else on
the session's GET stream. It prints `listening on URL` to stderr.
"""

from __future__ import annotations

import contextlib
import itertools
import json
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
from mcp.shared.inbound import ERROR_CODE_HTTP_STATUS
from mcp.shared.message import ServerMessageMetadata, SessionMessage
from mcp.types import JSONRPCNotification, JSONRPCRequest

MODERN = "2026-07-28"
# What names the listen stream (`subscriptions/listen`: its request) a notification is for
SUBSCRIPTION = "io.modelcontextprotocol/subscriptionId"
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


class Modern:
    """2026-07-28 requests, each a POST of its own with no session: all go to one stdio server
    (a client of that protocol over stdio keeps one process), each under an id of the bridge's
    (clients' ids may collide), answered with what the server sent for it — its notifications
    (by progress token, else the one request in flight) as an event stream when the client
    takes one, then its response, with the HTTP status the protocol gives its error code."""

    def __init__(self, params: StdioServerParameters) -> None:
        self.params = params
        self.write: Any = None
        self.waiting: dict[int, Any] = {}  # the bridge's id -> where its messages go
        self.tokens: dict[Any, int] = {}  # a request's progress token -> the bridge's id
        self.ids = itertools.count(1)
        self.lock = anyio.Lock()
        self.scope: anyio.CancelScope | None = None  # its server's life, once it runs

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        with anyio.CancelScope() as self.scope:
            await self._run(task_status)

    async def _run(self, task_status: TaskStatus[None]) -> None:
        async with stdio_client(self.params) as (read, write):
            self.write = write
            task_status.started()
            async for item in read:
                if isinstance(item, Exception):
                    continue
                message = item.message
                mine = getattr(message, "id", None) if not hasattr(message, "method") else None
                if mine is None:  # a notification: of a listen stream, or with a progress token
                    params = getattr(message, "params", None) or {}
                    meta = params.get("_meta") or {}
                    mine = meta.get(SUBSCRIPTION) or self.tokens.get(params.get("progressToken"))
                if mine is None and len(self.waiting) == 1:
                    mine = next(iter(self.waiting))
                ones = [mine] if mine is not None else []
                for key in ones:  # (a stream no one reads any more drops it)
                    with contextlib.suppress(anyio.WouldBlock, KeyError, *ENDED):
                        self.waiting[key].send_nowait(message)

    async def __call__(self, tg: Any, body: bytes, accept: str, receive: Any, send: Any) -> None:
        async with self.lock:
            if self.write is None:
                await tg.start(self.run)
        try:
            request = json.loads(body)
            assert isinstance(request, dict)
        except (ValueError, AssertionError):  # not one JSON-RPC message: no server gets it
            error = {"code": -32700, "message": "Parse error: one JSON-RPC message per request"}
            await _start(send, 400, b"application/json")
            line = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
            await send({"type": "http.response.body", "body": line})
            return
        if "id" not in request:  # a notification: nothing comes back for it
            await self.write.send(SessionMessage(JSONRPCNotification.model_validate(request)))
            await send({"type": "http.response.start", "status": 202, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        theirs, mine = request["id"], next(self.ids)
        token = ((request.get("params") or {}).get("_meta") or {}).get("progressToken")
        if token is not None:
            self.tokens[token] = mine
        inbox, outbox = anyio.create_memory_object_stream[Any](64)
        self.waiting[mine] = inbox
        answered = False
        try:
            async with anyio.create_task_group() as inner:

                async def gone() -> None:  # the client went away: the request is withdrawn
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    inner.cancel_scope.cancel()

                inner.start_soon(gone)
                sent = JSONRPCRequest.model_validate({**request, "id": mine})
                await self.write.send(SessionMessage(sent))
                answered = await self._answer(outbox, theirs, "text/event-stream" in accept, send)
                inner.cancel_scope.cancel()
        finally:
            self.waiting.pop(mine, None)
            self.tokens.pop(token, None)
            if not answered:
                with anyio.CancelScope(shield=True), contextlib.suppress(*ENDED):
                    cancelled = {"method": "notifications/cancelled", "params": {"requestId": mine}}
                    notice = JSONRPCNotification.model_validate({"jsonrpc": "2.0", **cancelled})
                    await self.write.send(SessionMessage(notice))

    async def _answer(self, outbox: Any, theirs: Any, streamed: bool, send: Any) -> bool:
        """What the server sends for the request, until its response (True) or its end: an
        event stream once a notification comes first (when the client takes one), else the
        response alone, with the HTTP status of its error code."""
        opened = False
        async for message in outbox:
            data = message.model_dump(by_alias=True, mode="json", exclude_none=True)
            answer = "method" not in data
            if answer:
                data["id"] = theirs
            line = json.dumps(data).encode()
            if not answer and not streamed:
                continue
            if not answer and not opened:
                opened = True
                await _start(send, 200, b"text/event-stream")
            if opened:
                event = b"event: message\ndata: " + line + b"\n\n"
                await send({"type": "http.response.body", "body": event, "more_body": not answer})
            elif answer:
                code = (data.get("error") or {}).get("code")
                await _start(send, ERROR_CODE_HTTP_STATUS.get(code, 200), b"application/json")
                await send({"type": "http.response.body", "body": line})
            if answer:
                return True
        return False


def _handshake(body: bytes) -> bool:
    """Whether the request is the 2025-11-25 handshake (`initialize`, `initialized`): one
    message of it on the 2026-07-28 server's pipe would turn it to the older protocol."""
    try:
        request = json.loads(body)
    except ValueError:
        return False
    method = request.get("method") if isinstance(request, dict) else None
    return method in ("initialize", "notifications/initialized")


def _enveloped(body: bytes) -> bool:
    """Whether the request carries the 2026-07-28 envelope (`_meta` protocol version)."""
    try:
        request = json.loads(body)
    except ValueError:
        return False
    params = request.get("params") if isinstance(request, dict) else None
    meta = (params.get("_meta") if isinstance(params, dict) else None) or {}
    return isinstance(meta, dict) and meta.get("io.modelcontextprotocol/protocolVersion") == MODERN


async def _start(send: Any, status: int, kind: bytes) -> None:
    await send(
        {"type": "http.response.start", "status": status, "headers": [(b"content-type", kind)]}
    )


class Bridge:
    """The ASGI app: a session per `initialize`, found again by its Mcp-Session-Id; a
    2026-07-28 request (no session) to the one `Modern` server."""

    def __init__(self, params: StdioServerParameters) -> None:
        self.params = params
        self.sessions: dict[str, StreamableHTTPServerTransport] = {}
        self.modern = Modern(params)
        self.tg: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self.lifespan(receive, send)
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        session = headers.get("mcp-session-id")
        if session is None and headers.get("mcp-protocol-version") == MODERN:
            if scope["method"] != "POST":  # no stream outlives a request on this protocol
                await send({"type": "http.response.start", "status": 405, "headers": []})
                await send({"type": "http.response.body", "body": b""})
                return
            body, more = b"", True
            while more:
                chunk = await receive()
                body, more = body + chunk.get("body", b""), chunk.get("more_body", False)
            if not _handshake(body):  # (a handshake opens a session, whatever it says)
                # A request without the 2026-07-28 envelope would turn a server's pipe to the
                # older protocol: it gets a server of its own, as it would get a process.
                modern = self.modern if _enveloped(body) else Modern(self.params)
                try:
                    await modern(self.tg, body, headers.get("accept", ""), receive, send)
                finally:
                    if modern is not self.modern and modern.scope is not None:
                        modern.scope.cancel()
                return

            given, later = [{"type": "http.request", "body": body, "more_body": False}], receive

            async def again() -> Any:  # the body read here, then what comes after it
                return given.pop() if given else await later()

            receive = again
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
