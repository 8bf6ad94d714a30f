"""A stdio transport for a server process we start ourselves, before the MCP SDK is imported.

Importing the SDK takes about a second, and so does starting a Python MCP server. Starting the
child first lets the two overlap. The transport speaks newline-delimited JSON-RPC over the
child's pipes and shuts down as the MCP spec says: close stdin, wait, SIGTERM the process group,
wait, SIGKILL — with the same grace periods the SDK uses.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel

from bundlectl.mcpio.child import Child
from bundlectl.mcpio.pipes import Oversized, PipeWriter, json_line, read_pipe
from bundlectl.mcpio.requests import Requests

if TYPE_CHECKING:
    from mcp.shared.message import SessionMessage


def _sdk_encode(message: Any) -> bytes:
    data: str = message.message.model_dump_json(by_alias=True, exclude_unset=True)
    return (data + "\n").encode()


class Tap:
    """Requests written to a child's stdin past the SDK's client session (the gateway's express
    lane, `gateway/stdio_calls.py`): their answers and progress are taken out of the child's stdout
    before the SDK reads it. The SDK's own requests are watched for the `_meta` it stamps on
    every request of the session (protocol version, client info and capabilities on the
    2026-07-28 protocol; nothing on older ones), so that ours carry the same.

    One tap serves a server across restarts: each session opens it and closes it; closing
    answers every request still waiting with None (the connection is gone). Its requests are
    tracked by `requests` (the express lane's; ids the SDK never uses, each also the request's
    progress token) and `in_order` (the SDK path's tool calls, `mcpio/pipe_session.py`).
    Their answers and progress are taken as soon as they are read — unless the SDK's client has
    not yet read everything the server sent before them (a log message during the call): then
    they wait in its stream and are taken as it reads on, so what the server said first reaches
    the client first, as it would if the SDK had made the call.
    """

    def __init__(self) -> None:
        self.requests = Requests()
        self.in_order = Requests("bundlectl-pipe")
        # the child's messages passed on towards the SDK's client, and those it has read
        self.passed = self.consumed = 0
        self.stamp: dict[str, Any] | None = None  # known once the SDK sent a request
        self.version: str | None = None  # the session's protocol, told by its owner
        self.changed: Callable[[], None] | None = None  # the server said its tools changed
        self._out: Any = None  # the transport's PipeWriter while a session is open

    @property
    def ready(self) -> bool:
        return self._out is not None and self.stamp is not None and self.version is not None

    @property
    def caught_up(self) -> bool:
        """Whether the SDK's client has read every message of the child's passed on to it:
        then what it has not acted on yet already waits in line ahead of any task woken now
        (its reader starts the handling of each message before it reads the next)."""
        return self.consumed == self.passed

    def opened(self, out: Any) -> None:
        self._out = out
        self.passed = self.consumed = 0

    def closed(self) -> None:
        self._out, self.stamp, self.version = None, None, None
        self.requests.close()
        self.in_order.close()

    def watch(self, message: Any) -> None:
        """An SDK message on its way to the child: learn the session's request stamp."""
        if self.stamp is not None:
            return
        inner = getattr(message, "message", None)
        method = getattr(inner, "method", None)
        if getattr(inner, "id", None) is None or method in (None, "initialize", "server/discover"):
            return
        params = getattr(inner, "params", None) or {}
        meta = params.get("_meta") if isinstance(params, dict) else None
        keys = meta.items() if isinstance(meta, dict) else ()
        self.stamp = {k: v for k, v in keys if k.startswith("io.modelcontextprotocol/")}

    def post(self, message: dict[str, Any]) -> bool:
        """Write a message to the child (a request: stamped as the session's are), now or
        queued; False when it cannot be (no session, or the queue is full)."""
        if self._out is None:
            return False
        params = message.get("params")
        if "id" in message and isinstance(params, dict) and self.stamp:
            params["_meta"] = {**self.stamp, **(params.get("_meta") or {})}
        post: Callable[[bytes], bool] = self._out.post
        return post(json_line(message))

    def take(self, message: Any) -> bool:
        """Whether `message` (from the child) answers one of our requests or reports its
        progress; if so it went to the request's handler, and the SDK never sees it. A change
        of the server's tools is told to `changed` at once (before a call read after it is
        decided), and goes on to the SDK."""
        if not isinstance(message, dict):
            return False
        if message.get("method") == "notifications/tools/list_changed":
            if self.changed is not None:
                self.changed()
            return False
        return self.requests.take(message)


@dataclass(frozen=True)
class _InOrder:
    """An answer (or progress) for one of a tap's requests, in line in the SDK's stream."""

    message: dict[str, Any]
    requests: Requests  # whose request it is (the tap's `requests` or `in_order`)


class _Reading:
    """The stream the SDK's client reads a child's messages from, with the answers held in
    line for the tap's requests (`_InOrder`) handed to them as it reaches them (it never sees
    them)."""

    def __init__(self, stream: Any, tap: Tap) -> None:
        self.stream, self.tap = stream, tap

    async def receive(self) -> Any:
        while True:
            item = await self.stream.receive()
            self.tap.consumed += 1
            if not isinstance(item, _InOrder):
                return item
            # Handed over after what the client has started for the messages before it (its
            # reader starts a task for each notification): the express lane answers its client
            # in place, and must come after a log message passed on before. (A request given up
            # meanwhile is not there: dropped.)
            asyncio.get_running_loop().call_soon(item.requests.take, item.message)

    def __aiter__(self) -> _Reading:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _Reading:
        await self.stream.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stream.__aexit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


@contextlib.asynccontextmanager
async def child_transport(
    child: Child,
    *,
    decode: Callable[[bytes | bytearray], Any] | None = None,
    encode: Callable[[Any], bytes] = _sdk_encode,
    tap: Tap | None = None,
) -> AsyncIterator[tuple[Any, Any]]:
    """(read stream, write stream) over an already started child: of the SDK's messages for
    `mcp.Client`, or of what `decode`/`encode` make of a line (plain JSON). `tap`: requests
    made past the SDK session (the SDK's messages only)."""
    decode = decode or decode_message

    proc = child.process
    assert proc.stdin is not None
    assert proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout
    incoming_send, incoming = anyio.create_memory_object_stream[Any](16)
    writer = PipeWriter(stdin, encode, watch=tap.watch if tap is not None else None)
    outgoing = writer.queue

    async def read_messages() -> None:
        try:
            await _read_messages(child, incoming_send, decode, tap)
        finally:
            if tap is not None:  # nothing more will come: whoever waits on the tap hears so
                tap.closed()

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(read_messages)
            group.start_soon(writer.run)
            if tap is not None:
                tap.opened(writer)
            try:
                yield (incoming if tap is None else _Reading(incoming, tap)), outgoing
            finally:
                with anyio.CancelScope(shield=True):
                    if tap is not None:
                        tap.closed()
                    outgoing.close()
                    await child.stop()
                    incoming_send.close()  # an unclosed stream is a ResourceWarning at exit
                group.cancel_scope.cancel()
    finally:
        # Once its reader is gone: the loop watched this pipe, and a close while it did could
        # land between a poll that saw the server's end and the read it leads to ("Fatal read
        # error on pipe transport", EBADF, a traceback on stderr at shutdown).
        with contextlib.suppress(OSError):
            stdout.close()


async def _read_messages(
    child: Child, incoming: Any, decode: Callable[[bytes | bytearray], Any], tap: Tap | None
) -> None:
    """The child's messages to `incoming`, until its stdout ends or breaks the protocol."""
    assert child.process.stdout is not None

    def convert(raw: bytes | bytearray) -> Any:
        """A line's message, decoded as it arrives (None: the tap took it), or the line
        itself when it is not JSON-RPC."""
        if isinstance(raw, Oversized):
            return raw
        try:
            if tap is None:
                return decode(raw)
            parsed = json.loads(raw)
            if not tap.caught_up:  # an answer waits behind what is on its way to the SDK
                for requests in (tap.requests, tap.in_order):
                    if requests.owns(parsed):
                        tap.passed += 1
                        return _InOrder(parsed, requests)
            if tap.take(parsed) or tap.in_order.take(parsed):
                return None
            tap.passed += 1
            return session_message(parsed)
        except (ValueError, RecursionError):
            return bytes(raw[:120])

    async with incoming:
        async for item in await read_pipe(child.process.stdout, convert, child.max_message):
            if isinstance(item, Oversized):
                child.violation = (
                    f"it sent a message of {item.size:,} bytes, over the limit of "
                    f"{child.max_message // (1024 * 1024)} MiB (raise servers.NAME.max_message_mb "
                    "if that is expected)"
                )
                return
            if isinstance(item, bytes):
                # Garbage on stdout: the SDK would only log it and wait. End the connection
                # so the caller fails now, and say what the server wrote.
                shown = item[:120].decode("utf-8", errors="replace").strip()
                child.violation = f"its stdout has a line that is not JSON-RPC: {shown!r}"
                return
            try:
                await incoming.send(item)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return


def decode_message(raw: bytes | bytearray) -> Any:
    """One JSON-RPC message (a line) as the SDK's SessionMessage; ValueError when it is none.

    json.loads, then pydantic on the objects: pydantic's own JSON parser holds a second copy of
    every string while it builds the first (a 100 MB result peaked at +380 MB instead of
    +190 MB), and is 3x slower on a tools/list.
    """
    return session_message(json.loads(raw))


def session_message(parsed: object) -> SessionMessage:
    """A parsed JSON-RPC message as the SDK's SessionMessage; ValueError when it is none."""
    from mcp.shared.message import SessionMessage
    from mcp_types import jsonrpc_message_adapter

    return SessionMessage(jsonrpc_message_adapter.validate_python(parsed, by_name=False))
