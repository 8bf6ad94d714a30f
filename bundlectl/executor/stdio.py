"""A stdio transport for a server process we start ourselves, before the MCP SDK is imported.

Importing the SDK takes about a second, and so does starting a Python MCP server. Starting the
child first lets the two overlap. The transport speaks newline-delimited JSON-RPC over the
child's pipes and shuts down as the MCP spec says: close stdin, wait, SIGTERM the process group,
wait, SIGKILL — with the same grace periods the SDK uses.
"""

from __future__ import annotations

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

from bundlectl.executor.watchdog import group_alive

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
        from bundlectl.executor.watchdog import stop_group

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
        from bundlectl.executor import watchdog

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

    token = anyio.lowlevel.current_token()

    def read_lines() -> None:
        # A daemon thread, not an anyio worker: a blocking read of a server that is still
        # exiting must never keep our process alive.
        try:
            for raw in _lines(stdout):
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
                anyio.from_thread.run(incoming_send.send, item, token=token)
        except (
            anyio.ClosedResourceError,
            anyio.BrokenResourceError,
            OSError,
            # The pipe closed under a read in progress (we are shutting down): not an error.
            ValueError,
            RuntimeError,
            anyio.RunFinishedError,
        ):
            pass
        finally:
            with contextlib.suppress(RuntimeError, anyio.RunFinishedError):
                anyio.from_thread.run_sync(incoming_send.close, token=token)

    async def write_messages() -> None:
        async with outgoing_receive:
            async for message in outgoing_receive:
                try:
                    await write_pipe(stdin, encode(message))
                except (OSError, ValueError):  # the server is gone or stdin is closed
                    return

    reader = threading.Thread(target=read_lines, name="server-stdout", daemon=True)
    reader.start()
    async with anyio.create_task_group() as group:
        group.start_soon(write_messages)
        try:
            yield incoming, outgoing
        finally:
            with anyio.CancelScope(shield=True):
                outgoing.close()
                await child.stop()
                with contextlib.suppress(OSError):
                    stdout.close()
                # Closed here too: the reader thread's own close cannot reach an event loop that
                # has already finished, and an unclosed stream is a ResourceWarning at exit.
                incoming_send.close()
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


def _lines(pipe: IO[bytes], chunk: int = 1 << 16) -> Iterator[bytes | bytearray]:
    """The newline-delimited messages of an unbuffered pipe, read a chunk per system call.

    (`readline` on an unbuffered pipe reads one byte per system call: 50 s for a 50 MB result.)
    A message that ends a read is handed over as the buffer itself, not copied: a tool result
    of hundreds of megabytes is then held once as bytes while it is parsed.
    """
    buffer = bytearray()
    while True:
        data = pipe.read(chunk)
        if not data:
            if buffer:
                yield buffer
            return
        searched = len(buffer)
        buffer += data
        while (end := buffer.find(b"\n", searched)) != -1:
            if end == len(buffer) - 1:
                whole, buffer = [buffer], bytearray()
                yield whole.pop()  # keeps no reference: the consumer frees it after parsing
                break
            yield bytes(buffer[: end + 1])
            del buffer[: end + 1]
            searched = 0


async def pipe_lines(pipe: IO[bytes]) -> AsyncIterator[bytes] | None:
    """The lines of a pipe read by the event loop itself (no thread, no hop per message), or
    None when the stream is not a pipe or socket (a file, on some platforms) and a thread must
    read it instead."""
    import asyncio

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 31, loop=loop)
    try:
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader, loop=loop), pipe
        )
    except (ValueError, OSError, NotImplementedError):
        return None

    async def lines() -> AsyncIterator[bytes]:
        try:
            while line := await reader.readline():
                yield line
        finally:
            transport.close()

    return lines()


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
