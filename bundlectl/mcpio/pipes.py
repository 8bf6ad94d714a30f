"""Reading and writing a child process's pipes as JSON-RPC lines: a reader that splits lines
without ever holding more than one message (a line over the limit is `Oversized`), an asyncio
protocol or a thread where the pipe cannot be polled, and a writer that never blocks the loop.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import stat
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import IO, Any

import anyio
import anyio.lowlevel

from bundlectl.mcpio.child import MAX_MESSAGE


class Oversized(bytes):
    """Stands for a message longer than the limit, which was dropped as it arrived (never held
    whole): its first bytes, and its size."""

    size: int = 0


def oversized(head: bytes, size: int) -> Oversized:
    marker = Oversized(head)
    marker.size = size
    return marker


class _Splitter:
    """Newline-delimited messages out of chunks, however the reads cut them.

    A message that ends a chunk is handed over as the buffer itself, not copied: a tool result of
    hundreds of megabytes is then held once as bytes while it is parsed. A message longer than
    `limit` is not held: it is dropped as it arrives and an `Oversized` marker stands for it.
    """

    def __init__(self, limit: int = MAX_MESSAGE) -> None:
        self.buffer = bytearray()
        self.limit = limit
        self.skipping: tuple[bytes, int] | None = None  # an oversized message: (head, size)

    def feed(self, data: bytes) -> list[bytes | bytearray]:
        """The messages `data` completes, in order (the list holds the only reference)."""
        found: list[bytes | bytearray] = []
        if self.skipping is not None:
            head, size = self.skipping
            end = data.find(b"\n")
            if end == -1:
                self.skipping = (head, size + len(data))
                return found
            found.append(oversized(head, size + end))
            self.skipping = None
            data = data[end + 1 :]
        buffer = self.buffer
        searched = len(buffer)
        buffer += data
        while (end := buffer.find(b"\n", searched)) != -1:
            if end > self.limit:
                found.append(oversized(bytes(buffer[:120]), end))
                del buffer[: end + 1]
                searched = 0
                continue
            if end == len(buffer) - 1:
                found.append(buffer)
                self.buffer = bytearray()
                return found
            found.append(bytes(buffer[: end + 1]))
            del buffer[: end + 1]
            searched = 0
        if len(buffer) > self.limit:  # no end in sight: drop it as it comes
            self.skipping = (bytes(buffer[:120]), len(buffer))
            self.buffer = bytearray()
        return found

    def rest(self) -> bytes | bytearray | None:
        """What is left when the stream ends: a last message without a newline (an oversized
        one as its marker)."""
        if self.skipping is not None:
            head, size = self.skipping
            self.skipping = None
            return oversized(head, size)
        rest, self.buffer = self.buffer, bytearray()
        return rest or None


def _lines(
    pipe: IO[bytes], chunk: int = 1 << 16, limit: int = MAX_MESSAGE
) -> Iterator[bytes | bytearray]:
    """The messages of an unbuffered pipe read by a thread, a chunk per system call.

    (`readline` on an unbuffered pipe reads one byte per system call: 50 s for a 50 MB result.)
    """
    splitter = _Splitter(limit)
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
    Each line is converted in the callback that read it (`read_pipe`). Reading pauses while 64
    messages wait to be taken."""

    def __init__(self, convert: Callable[[bytes | bytearray], Any], limit: int) -> None:
        self.convert = convert
        self.splitter = _Splitter(limit)
        self.ready: collections.deque[Any] = collections.deque()
        self.done = False
        self.paused = False
        self.transport: Any = None
        self.wakeup: asyncio.Future[None] | None = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        found = self.splitter.feed(data)
        found.reverse()
        while found:
            self._add(found.pop())  # the list keeps no reference to a line being converted
        if not self.ready:  # all taken in the callback (the express lane): no one to wake
            return
        if len(self.ready) >= 64 and not self.paused:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        rest = self.splitter.rest()
        if rest is not None:
            self._add(rest)
        self.done = True
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.done = True
        self._wake()

    def _add(self, line: bytes | bytearray) -> None:
        if not line.isspace() and (item := self.convert(line)) is not None:
            self.ready.append(item)

    def _wake(self) -> None:
        if self.wakeup is not None and not self.wakeup.done():
            self.wakeup.set_result(None)

    async def lines(self) -> AsyncIterator[Any]:
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


async def read_pipe(
    pipe: IO[bytes], convert: Callable[[bytes | bytearray], Any], limit: int = MAX_MESSAGE
) -> AsyncIterator[Any]:
    """What `convert` makes of each newline-delimited message of a pipe (a server's stdout,
    the gateway's stdin), blank lines skipped and None dropped. The pipe is read by the event
    loop itself (`_PipeReader`), and `convert` runs in the callback that read the line: what it
    handles itself (the express lane's messages) costs no task switch. When the loop cannot
    watch the stream (a file or /dev/null given as stdin), a thread reads it. A message over
    `limit` bytes reaches `convert` as an `Oversized` marker."""
    if not _pollable(pipe):
        return _converted(_thread_lines(pipe, limit), convert)
    loop = asyncio.get_running_loop()
    reader = _PipeReader(convert, limit)
    try:
        await loop.connect_read_pipe(lambda: reader, pipe)
    except (ValueError, OSError, NotImplementedError):
        return _converted(_thread_lines(pipe, limit), convert)
    return reader.lines()


def _pollable(pipe: IO[bytes]) -> bool:
    """Whether the event loop can watch the stream: a pipe, a socket or a terminal. (asyncio
    also takes other character devices, then fails in a callback: epoll refuses /dev/null.)"""
    try:
        mode = os.fstat(pipe.fileno()).st_mode
    except (OSError, ValueError):
        return False
    if stat.S_ISCHR(mode):
        return os.isatty(pipe.fileno())
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


async def _converted(
    lines: AsyncIterator[bytes | bytearray], convert: Callable[[bytes | bytearray], Any]
) -> AsyncIterator[Any]:
    async for raw in lines:
        if not raw.isspace() and (item := convert(raw)) is not None:
            yield item


async def _thread_lines(pipe: IO[bytes], limit: int) -> AsyncIterator[bytes | bytearray]:
    send, receive = anyio.create_memory_object_stream[bytes | bytearray](16)
    token = anyio.lowlevel.current_token()

    def pump() -> None:
        # A daemon thread, not an anyio worker: a blocking read that never ends must never
        # keep our process alive (it is abandoned at shutdown).
        try:
            for raw in _lines(pipe, limit=limit):
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


_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def json_line(message: dict[str, Any]) -> bytes:
    """A JSON-RPC message as one line of the wire."""
    return _ENCODE(message).encode() + b"\n"


class PipeWriter:
    """The writes to one pipe, in order. Messages sent to `queue` (the SDK's write stream:
    its message objects) are encoded and written by `run`, large ones from a worker thread.
    `post` writes a line (the express lane's) at once, without a hand-over to `run`, when it
    is small, when no line posted before it is still queued, and when `run` is not in the
    middle of a large write; otherwise it queues it. Lines of the two sources may pass each
    other; each source's own stay in order."""

    def __init__(
        self,
        stream: IO[bytes],
        encode: Callable[[Any], bytes],
        *,
        watch: Callable[[Any], None] | None = None,
    ) -> None:
        self.stream, self.encode, self.watch = stream, encode, watch
        self.queue, self._queued = anyio.create_memory_object_stream[Any](16)
        self._posted = 0  # posted lines still in the queue
        self._writing = False  # a large write is under way in a worker thread

    def post(self, data: bytes) -> bool:
        """Write `data` now or queue it; False when the queue is full or the pipe is gone."""
        try:
            if not self._posted and not self._writing and len(data) <= _DIRECT_WRITE:
                _write(self.stream, data)
                return True
            self.queue.send_nowait(data)
        except (anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError):
            return False
        except (OSError, ValueError):  # the reader is gone or the pipe is closed
            return False
        self._posted += 1
        return True

    async def put(self, data: bytes) -> None:
        """Queue a line `post` could not, waiting for room."""
        self._posted += 1
        try:
            await self.queue.send(data)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._posted -= 1

    async def run(self) -> None:
        async with self._queued:
            async for message in self._queued:
                if isinstance(message, bytes):
                    self._posted -= 1
                    data = message
                else:
                    if self.watch is not None:
                        self.watch(message)
                    data = self.encode(message)
                self._writing = len(data) > _DIRECT_WRITE
                try:
                    await write_pipe(self.stream, data)
                except (OSError, ValueError):  # the reader is gone or the pipe is closed
                    return
                finally:
                    self._writing = False
