"""A stdio transport for a server process we start ourselves, before the MCP SDK is imported.

Importing the SDK takes about a second, and so does starting a Python MCP server. Starting the
child first lets the two overlap. The transport speaks newline-delimited JSON-RPC over the
child's pipes and shuts down as the MCP spec says: close stdin, wait, SIGTERM the process group,
wait, SIGKILL — with the same grace periods the SDK uses.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any

import anyio
import anyio.lowlevel

from bundlectl.executor import watchdog
from bundlectl.executor.watchdog import group_alive, stop_group

GRACE = 2.0  # seconds after closing stdin, and again after SIGTERM


@dataclass
class Child:
    """A started server process with pipes to its stdin and stdout."""

    process: subprocess.Popen[bytes]
    # What broke the protocol, if anything (first non-JSON-RPC line on stdout).
    violation: str | None = None
    # Set once the result is printed: the rest of the shutdown need not hold the user up.
    detach: bool = False

    @classmethod
    def start(cls, argv: list[str], *, env: dict[str, str], cwd: str, stderr: IO[str]) -> Child:
        """Start now. A missing executable raises FileNotFoundError, as the SDK would."""
        kwargs: dict[str, Any] = {}
        if sys.platform != "win32":
            kwargs["start_new_session"] = True  # its own process group: we can stop the tree
        process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=env,
            cwd=cwd,
            bufsize=0,
            **kwargs,
        )
        return cls(process)

    async def stop(self) -> None:
        """Close stdin, wait, then terminate and kill the whole process group.

        The group is stopped even when the server itself exits at once: whatever it started
        (`sleep 600 &`) must not outlive the call. With `detach`, a server still running shortly
        after EOF is left to a detached watchdog that applies the same escalation, so bundlectl
        can exit as soon as the result is out.
        """
        proc = self.process
        with contextlib.suppress(OSError):
            if proc.stdin is not None:
                proc.stdin.close()
        if sys.platform == "win32":
            await self._stop_windows()
            return
        exited = await self._wait(0.05 if self.detach else GRACE)
        if exited and not group_alive(proc.pid):
            return
        if self.detach:
            self._watchdog()
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            self._signal(sig)
            if await self._wait_group(GRACE):
                return

    def terminate_now(self) -> None:
        """Without an event loop (we are failing): SIGTERM the group, wait, SIGKILL."""
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.process.stdin.close()
        if sys.platform == "win32":
            self.process.terminate()
            return

        if self.process.poll() is None or group_alive(self.process.pid):
            self._signal(signal.SIGTERM)
            stop_group(self.process.pid, GRACE)
        self.process.poll()

    async def _stop_windows(self) -> None:
        if await self._wait(GRACE):
            return
        self.process.terminate()
        await self._wait(GRACE)

    def _watchdog(self) -> None:
        """A detached Python process that stops the server's group if it outlives GRACE."""
        with contextlib.suppress(OSError):
            subprocess.Popen(
                [sys.executable, "-I", "-S", watchdog.__file__, str(self.process.pid), str(GRACE)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )

    async def _wait(self, seconds: float) -> bool:
        with anyio.move_on_after(seconds):
            while self.process.poll() is None:
                await anyio.sleep(0.01)
        return self.process.poll() is not None

    async def _wait_group(self, seconds: float) -> bool:
        """Until the server is reaped and nothing of its group is left."""
        with anyio.move_on_after(seconds):
            while self.process.poll() is None or group_alive(self.process.pid):
                await anyio.sleep(0.02)
            return True
        return False

    def _signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
            os.killpg(self.process.pid, sig)


@contextlib.contextmanager
def stop_on_failure(child: Child | None) -> Iterator[None]:
    """Stop `child` (and its process group) when the block fails or is interrupted."""
    try:
        yield
    except BaseException:
        if child is not None:
            child.terminate_now()
        raise


def _sdk_encode(message: Any) -> bytes:
    data: str = message.message.model_dump_json(by_alias=True, exclude_unset=True)
    return (data + "\n").encode()


@contextlib.asynccontextmanager
async def child_transport(
    child: Child,
    *,
    decode: Callable[[bytes | bytearray], Any] | None = None,
    encode: Callable[[Any], bytes] = _sdk_encode,
) -> AsyncIterator[tuple[Any, Any]]:
    """(read stream, write stream) over an already started child: of the SDK's messages for
    `mcp.Client`, or of what `decode`/`encode` make of a line (plain JSON)."""
    decode = decode or decode_message

    proc = child.process
    assert proc.stdin is not None
    assert proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout
    incoming_send, incoming = anyio.create_memory_object_stream[Any](16)
    outgoing, outgoing_receive = anyio.create_memory_object_stream[Any](16)

    async def read_messages() -> None:
        async with incoming_send:
            async for raw in await read_pipe(stdout):
                if raw.isspace():
                    continue
                try:
                    item = decode(raw)
                except ValueError:
                    # Garbage on stdout: the SDK would only log it and wait. End the connection
                    # so the caller fails now, and say what the server wrote.
                    shown = raw[:120].decode("utf-8", errors="replace").strip()
                    child.violation = f"its stdout has a line that is not JSON-RPC: {shown!r}"
                    return
                del raw
                try:
                    await incoming_send.send(item)
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    return

    async def write_messages() -> None:
        async with outgoing_receive:
            async for message in outgoing_receive:
                try:
                    await write_pipe(stdin, encode(message))
                except (OSError, ValueError):  # the server is gone or stdin is closed
                    return

    async with anyio.create_task_group() as group:
        group.start_soon(read_messages)
        group.start_soon(write_messages)
        try:
            yield incoming, outgoing
        finally:
            with anyio.CancelScope(shield=True):
                outgoing.close()
                await child.stop()
                with contextlib.suppress(OSError):
                    stdout.close()
                incoming_send.close()  # an unclosed stream is a ResourceWarning at exit
            group.cancel_scope.cancel()


def decode_message(raw: bytes | bytearray) -> Any:
    """One JSON-RPC message (a line) as the SDK's SessionMessage; ValueError when it is none.

    json.loads, then pydantic on the objects: pydantic's own JSON parser holds a second copy of
    every string while it builds the first (a 100 MB result peaked at +380 MB instead of
    +190 MB), and is 3x slower on a tools/list.
    """
    from mcp.shared.message import SessionMessage
    from mcp_types import jsonrpc_message_adapter

    return SessionMessage(jsonrpc_message_adapter.validate_python(json.loads(raw), by_name=False))


class _Splitter:
    """Newline-delimited messages out of chunks, however the reads cut them.

    A message that ends a chunk is handed over as the buffer itself, not copied: a tool result of
    hundreds of megabytes is then held once as bytes while it is parsed.
    """

    def __init__(self) -> None:
        self.buffer = bytearray()

    def feed(self, data: bytes) -> list[bytes | bytearray]:
        """The messages `data` completes, in order (the list holds the only reference)."""
        found: list[bytes | bytearray] = []
        buffer = self.buffer
        searched = len(buffer)
        buffer += data
        while (end := buffer.find(b"\n", searched)) != -1:
            if end == len(buffer) - 1:
                found.append(buffer)
                self.buffer = bytearray()
                return found
            found.append(bytes(buffer[: end + 1]))
            del buffer[: end + 1]
            searched = 0
        return found

    def rest(self) -> bytearray | None:
        """What is left when the stream ends: a last message without a newline."""
        rest, self.buffer = self.buffer, bytearray()
        return rest or None


def _lines(pipe: IO[bytes], chunk: int = 1 << 16) -> Iterator[bytes | bytearray]:
    """The messages of an unbuffered pipe read by a thread, a chunk per system call.

    (`readline` on an unbuffered pipe reads one byte per system call: 50 s for a 50 MB result.)
    """
    splitter = _Splitter()
    while data := pipe.read(chunk):
        found = splitter.feed(data)
        found.reverse()
        while found:
            yield found.pop()  # keeps no reference: the consumer frees it after parsing
    rest = splitter.rest()
    if rest is not None:
        yield rest


class _PipeReader(asyncio.Protocol):
    """`_lines` for the event loop: the messages of a pipe, read as they arrive, without a
    thread (a thread's hand-over to the loop cost about 0.3 ms per message of a warm call).
    Reading pauses while 64 messages wait to be taken."""

    def __init__(self) -> None:
        self.splitter = _Splitter()
        self.ready: collections.deque[bytes | bytearray] = collections.deque()
        self.done = False
        self.paused = False
        self.transport: Any = None
        self.wakeup: asyncio.Future[None] | None = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.ready.extend(self.splitter.feed(data))
        if len(self.ready) >= 64 and not self.paused:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        rest = self.splitter.rest()
        if rest is not None:
            self.ready.append(rest)
        self.done = True
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.done = True
        self._wake()

    def _wake(self) -> None:
        if self.wakeup is not None and not self.wakeup.done():
            self.wakeup.set_result(None)

    async def lines(self) -> AsyncIterator[bytes | bytearray]:
        try:
            while True:
                while self.ready:
                    if self.paused and len(self.ready) <= 16:
                        self.paused = False
                        self.transport.resume_reading()
                    yield self.ready.popleft()
                if self.done:
                    return
                self.wakeup = asyncio.get_running_loop().create_future()
                await self.wakeup
        finally:
            self.transport.close()


async def read_pipe(pipe: IO[bytes]) -> AsyncIterator[bytes | bytearray]:
    """The newline-delimited messages of a pipe (a server's stdout, the gateway's stdin): read
    by the event loop itself (`_PipeReader`), or by a thread when the stream is not a pipe or
    socket (a file given as stdin)."""
    loop = asyncio.get_running_loop()
    reader = _PipeReader()
    try:
        await loop.connect_read_pipe(lambda: reader, pipe)
    except (ValueError, OSError, NotImplementedError):
        return _thread_lines(pipe)
    return reader.lines()


async def _thread_lines(pipe: IO[bytes]) -> AsyncIterator[bytes | bytearray]:
    send, receive = anyio.create_memory_object_stream[bytes | bytearray](16)
    token = anyio.lowlevel.current_token()

    def pump() -> None:
        # A daemon thread, not an anyio worker: a blocking read that never ends must never
        # keep our process alive (it is abandoned at shutdown).
        try:
            for raw in _lines(pipe):
                anyio.from_thread.run(send.send, raw, token=token)
        except (
            anyio.ClosedResourceError,
            anyio.BrokenResourceError,
            anyio.RunFinishedError,
            RuntimeError,
            OSError,
            ValueError,  # the file closed under a read in progress (we are shutting down)
        ):
            pass
        finally:
            with contextlib.suppress(RuntimeError, anyio.RunFinishedError):
                anyio.from_thread.run_sync(send.close, token=token)

    threading.Thread(target=pump, name="pipe-reader", daemon=True).start()
    async with receive:
        async for raw in receive:
            yield raw


# A message this small fits the pipe's buffer (64 KiB on Linux) and is written at once; a thread
# hop would add a few hundred microseconds to every call of a warm session.
_DIRECT_WRITE = 16 * 1024


async def write_pipe(stream: IO[bytes], data: bytes) -> None:
    """Write and flush `data`: small messages directly, large ones from a worker thread (a full
    pipe must not block the event loop)."""
    if len(data) <= _DIRECT_WRITE:
        _write(stream, data)
    else:
        await anyio.to_thread.run_sync(_write, stream, data)


def _write(stream: IO[bytes], data: bytes) -> None:
    stream.write(data)
    stream.flush()
