"""The stdio transport's line splitter, on a real pipe: messages as the server wrote them,
however the reads cut them."""

from __future__ import annotations

import io
import json
import os
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from bundlectl.mcpio.pipes import Oversized, _lines, _Splitter, read_pipe


def _read_all(data: bytes, chunk: int) -> list[bytes]:
    read, write = os.pipe()

    def writer() -> None:
        with os.fdopen(write, "wb", buffering=0) as pipe:
            for start in range(0, len(data), 7):  # small writes: reads see arbitrary cuts
                pipe.write(data[start : start + 7])

    thread = threading.Thread(target=writer)
    thread.start()
    with os.fdopen(read, "rb", buffering=0) as pipe:
        lines = [bytes(line) for line in _lines(pipe, chunk=chunk)]
    thread.join()
    return lines


@pytest.mark.parametrize("chunk", [1, 5, 64, 1 << 16])
def test_lines_come_out_whole_whatever_the_reads(chunk: int) -> None:
    data = b'{"a": 1}\n{"b": "two"}\n\n{"c": [3]}\n{"tail": "no newline"}'
    assert _read_all(data, chunk) == [
        b'{"a": 1}\n',
        b'{"b": "two"}\n',
        b"\n",
        b'{"c": [3]}\n',
        b'{"tail": "no newline"}',
    ]


def test_a_message_that_ends_a_read_is_handed_over_without_a_copy() -> None:
    pipe = io.BytesIO(b"x" * 100 + b"\n")
    [line] = list(_lines(pipe, chunk=1 << 16))
    assert isinstance(line, bytearray) and len(line) == 101


def _read_all_on_the_loop(data: bytes) -> list[bytes]:
    read, write = os.pipe()

    def writer() -> None:
        with os.fdopen(write, "wb", buffering=0) as pipe:
            for start in range(0, len(data), 7):
                pipe.write(data[start : start + 7])

    async def main() -> list[bytes]:
        with os.fdopen(read, "rb", buffering=0) as pipe:
            thread = threading.Thread(target=writer)
            thread.start()
            found = [line async for line in await read_pipe(pipe, bytes)]
            await anyio.to_thread.run_sync(thread.join)
            return found

    return anyio.run(main)


def test_the_event_loop_reads_the_same_messages() -> None:
    """The gateway and exec read a server's stdout on the event loop (no thread hop per
    message); reading pauses while messages wait, so 500 of them arrive whole and in order.
    Blank lines are no messages."""
    data = b'{"a": 1}\n{"b": "two"}\n\n \n{"c": [3]}\n{"tail": "no newline"}'
    assert _read_all_on_the_loop(data) == [
        b'{"a": 1}\n',
        b'{"b": "two"}\n',
        b'{"c": [3]}\n',
        b'{"tail": "no newline"}',
    ]
    many = b"".join(b'{"n": %d}\n' % i for i in range(500))
    assert _read_all_on_the_loop(many) == [b'{"n": %d}\n' % i for i in range(500)]


def test_lines_are_converted_as_they_are_read_and_none_is_dropped() -> None:
    """The express lane handles its messages in the callback that read them: `convert` runs
    before anyone takes a line, and what it answers with None never reaches the consumer."""
    read, write = os.pipe()
    seen: list[bytes] = []

    def convert(line: bytes | bytearray) -> Any:
        seen.append(bytes(line))
        return None if b"lane" in line else json.loads(line)

    async def main() -> tuple[list[bytes], list[Any]]:
        with os.fdopen(read, "rb", buffering=0) as pipe:
            lines = await read_pipe(pipe, convert)
            os.write(write, b'{"sdk": 1}\n{"lane": 2}\n{"sdk": 3}\n')
            os.close(write)
            with anyio.fail_after(5):
                while len(seen) < 3:  # nobody has asked for a line yet
                    await anyio.sleep(0.01)
            before = list(seen)
            return before, [item async for item in lines]

    before, taken = anyio.run(main)
    assert before == [b'{"sdk": 1}\n', b'{"lane": 2}\n', b'{"sdk": 3}\n']
    assert taken == [{"sdk": 1}, {"sdk": 3}]


def test_a_file_is_read_by_a_thread(tmp_path: Path) -> None:
    """stdin may be a file (`bundlectl serve < requests.jsonl`): the loop cannot watch a file."""
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'{"a": 1}\n{"b": 2}')

    async def main() -> list[bytes]:
        with path.open("rb", buffering=0) as file:
            return [line async for line in await read_pipe(file, bytes)]

    assert anyio.run(main) == [b'{"a": 1}\n', b'{"b": 2}']


def test_dev_null_is_read_to_its_end() -> None:
    """asyncio takes /dev/null for a pipe and then fails in a callback (epoll refuses it), so
    `serve < /dev/null` hung; a stream the loop cannot watch is read by a thread."""

    async def main() -> list[Any]:
        with open(os.devnull, "rb", buffering=0) as null, anyio.fail_after(5):
            return [line async for line in await read_pipe(null, bytes)]

    assert anyio.run(main) == []


@pytest.mark.parametrize("chunk", [3, 64, 4096])
def test_a_message_over_the_limit_is_dropped_as_it_arrives(chunk: int) -> None:
    # A 200 MB line was held whole (1.42 GB peak); now no more than the limit is ever held.
    data = b'{"ok": 1}\n' + b'{"big": "' + b"x" * 5000 + b'"}\n' + b'{"after": 2}\n'
    splitter = _Splitter(limit=1000)
    out: list[bytes] = []
    for start in range(0, len(data), chunk):
        out.extend(
            bytes(m) if not isinstance(m, Oversized) else m
            for m in splitter.feed(data[start : start + chunk])
        )
        assert len(splitter.buffer) <= 1000 + chunk
    assert out[0] == b'{"ok": 1}\n' and out[2] == b'{"after": 2}\n'
    assert isinstance(out[1], Oversized) and out[1].size == 5011
    assert out[1].startswith(b'{"big": "xxx')


def test_an_oversized_message_cut_off_by_the_end_of_the_stream_is_still_marked() -> None:
    splitter = _Splitter(limit=10)
    assert splitter.feed(b'{"a": "' + b"x" * 50) == []
    rest = splitter.rest()
    assert isinstance(rest, Oversized) and rest.size == 57


def test_the_request_tracker_hands_each_request_its_own_messages() -> None:
    """One tracker for the plain client, the tap and the express lane: an answer and progress go
    to the request they name, everything else is left to the caller, and a closed connection
    reaches every request still waiting exactly once."""
    from bundlectl.mcpio.requests import Requests

    seen: dict[str, list[Any]] = {"a": [], "b": []}
    tracker = Requests()
    first = tracker.open(seen["a"].append)
    second = tracker.open(seen["b"].append)
    assert first != second and all(isinstance(k, str) for k in (first, second))

    progress = {"method": "notifications/progress", "params": {"progressToken": second}}
    assert tracker.take(progress)
    assert tracker.take({"jsonrpc": "2.0", "id": first, "result": {}})
    assert not tracker.take({"jsonrpc": "2.0", "id": 1, "result": {}})  # the SDK's own id
    assert not tracker.take({"jsonrpc": "2.0", "id": second, "method": "ping"})  # a request
    assert not tracker.take({"method": "notifications/message", "params": {}})
    tracker.drop(first)
    assert not tracker.take({"jsonrpc": "2.0", "id": first, "result": {}})  # answered already
    tracker.close()
    tracker.close()
    assert seen == {
        "a": [{"jsonrpc": "2.0", "id": first, "result": {}}],
        "b": [progress, None],
    }
    assert len(tracker) == 0
