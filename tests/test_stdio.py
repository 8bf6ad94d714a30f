"""The stdio transport's line splitter, on a real pipe: messages as the server wrote them,
however the reads cut them."""

from __future__ import annotations

import io
import os
import threading

import pytest

from bundlectl.executor.stdio import _lines


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
