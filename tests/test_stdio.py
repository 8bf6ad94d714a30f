"""The stdio transport's line splitter, on a real pipe: messages as the server wrote them,
however the reads cut them."""

from __future__ import annotations

import io
import os
import threading
from pathlib import Path

import anyio
import pytest

from bundlectl.executor.stdio import _lines, read_pipe


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
            found = [bytes(line) async for line in await read_pipe(pipe)]
            await anyio.to_thread.run_sync(thread.join)
            return found

    return anyio.run(main)


def test_the_event_loop_reads_the_same_messages() -> None:
    """The gateway and exec read a server's stdout on the event loop (no thread hop per
    message); reading pauses while messages wait, so 500 of them arrive whole and in order."""
    data = b'{"a": 1}\n{"b": "two"}\n\n{"c": [3]}\n{"tail": "no newline"}'
    assert _read_all_on_the_loop(data) == [
        b'{"a": 1}\n',
        b'{"b": "two"}\n',
        b"\n",
        b'{"c": [3]}\n',
        b'{"tail": "no newline"}',
    ]
    many = b"".join(b'{"n": %d}\n' % i for i in range(500))
    assert _read_all_on_the_loop(many) == [b'{"n": %d}\n' % i for i in range(500)]


def test_a_file_is_read_by_a_thread(tmp_path: Path) -> None:
    """stdin may be a file (`bundlectl serve < requests.jsonl`): the loop cannot watch a file."""
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'{"a": 1}\n{"b": 2}')

    async def main() -> list[bytes]:
        with path.open("rb", buffering=0) as file:
            return [bytes(line) async for line in await read_pipe(file)]

    assert anyio.run(main) == [b'{"a": 1}\n', b'{"b": 2}']
