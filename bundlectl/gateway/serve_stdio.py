"""`serve` on stdio: one agent, one client, its requests read from our stdin (the express
lane takes the warm calls, the SDK the rest)."""

from __future__ import annotations

import itertools
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio
import anyio.lowlevel
import mcp_types as types
from mcp.shared.message import SessionMessage

from bundlectl.calls.arguments import loads_message
from bundlectl.calls.pipeline import Pipeline
from bundlectl.gateway.downstream import log_line
from bundlectl.gateway.handlers import mcp_server
from bundlectl.gateway.hub import Hub
from bundlectl.gateway.stdio_calls import StdioCalls
from bundlectl.mcpio import runner
from bundlectl.mcpio.pipes import Oversized, PipeWriter, json_line, read_pipe
from bundlectl.mcpio.stdio import session_message

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream


async def serve_stdio(
    pipeline: Pipeline, agent: str, mode: str = "direct", names: str | None = None
) -> None:
    """Serve the agent over stdin/stdout until the client closes them (or a stop signal)."""
    async with anyio.create_task_group() as group:
        hub = Hub(pipeline, group, log=log_line, agents={agent}, one_client=True, naming=names)
        async with _stdio() as (read, writer, express_to):
            # Warm calls of direct mode skip the SDK on both sides (`express.py`).
            lane = StdioCalls(hub, agent, group, writer) if mode == "direct" else None
            express_to(lane)
            server = mcp_server(hub, mode, lambda ctx: agent, seen=lane.seen if lane else None)
            runner.long_lived()
            await server.run(read, writer.queue, server.create_initialization_options())
        group.cancel_scope.cancel()  # the client is gone: stop every downstream server


def _sdk_line(message: SessionMessage) -> bytes:
    data: str = message.message.model_dump_json(by_alias=True, exclude_unset=True)
    return data.encode() + b"\n"


def _invalid_message(exc: Exception) -> str:
    """What makes a JSON value no JSON-RPC message, in a few words (pydantic's first error)."""
    errors = getattr(exc, "errors", None)
    first = errors()[0] if callable(errors) and errors() else None
    if first is None:
        return str(exc).splitlines()[0]
    where = ".".join(str(p) for p in first.get("loc", ()) if not isinstance(p, int) or p)
    return f"{where}: {first.get('msg')}" if where else str(first.get("msg"))


@asynccontextmanager
async def _stdio() -> AsyncIterator[
    tuple[
        MemoryObjectReceiveStream[SessionMessage | Exception],
        PipeWriter,
        Callable[[StdioCalls | None], None],
    ]
]:
    """Our stdin and stdout as the SDK's message streams, and a way to hand the express lane
    the messages it takes: each line is offered to it as soon as it is read, and the lane
    posts its lines to the same writer (`PipeWriter.post`).

    The SDK's own stdio server reads stdin in a worker thread that cannot be cancelled, so a
    SIGTERM would wait for the client's next line; here the event loop reads it (a daemon thread
    when stdin is a file, simply abandoned), and the shutdown goes ahead at once.
    """

    read_send, read = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    writer = PipeWriter(stdout, _sdk_line)
    lane: list[StdioCalls | None] = [None]

    count = itertools.count(1)

    def parse(raw: bytes | bytearray) -> SessionMessage | None:
        """The SDK's message, or None: the express lane took it, or it is no JSON-RPC message
        (then the client gets the error JSON-RPC prescribes, and our log says why; the SDK
        would drop it without a word)."""
        number, parsed = next(count), None
        try:
            if isinstance(raw, Oversized):
                raise ValueError(f"the message is {raw.size:,} bytes, over the limit")
            parsed = loads_message(raw)
            express = lane[0]
            if express is not None and express.take(parsed):
                return None
            return session_message(parsed)
        except (ValueError, RecursionError) as exc:
            json_error = parsed is None
            if isinstance(exc, RecursionError):
                exc = ValueError("it nests too deeply")
            why = str(exc).splitlines()[0] if json_error else _invalid_message(exc)
            code = types.PARSE_ERROR if json_error else types.INVALID_REQUEST
            what = "Parse error" if json_error else "Invalid Request"
            key = parsed.get("id") if isinstance(parsed, dict) else None
            key = key if isinstance(key, str | int) and not isinstance(key, bool) else None
            error = {"code": code, "message": f"{what}: {why}"}
            writer.post(json_line({"jsonrpc": "2.0", "id": key, "error": error}))
            log_line(
                f"message {number} from the client is not JSON-RPC 2.0 ({why}); it was answered "
                "with an error and ignored — the client must send one JSON-RPC message per line"
            )
            return None

    async def reader() -> None:
        async with read_send:
            async for message in await read_pipe(stdin, parse):
                await read_send.send(message)

    def express_to(express: StdioCalls | None) -> None:
        lane[0] = express

    async with anyio.create_task_group() as group:
        group.start_soon(writer.run)
        group.start_soon(reader)
        try:
            yield read, writer, express_to
        finally:
            writer.queue.close()
            group.cancel_scope.cancel()
