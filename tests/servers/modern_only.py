"""A server that speaks only the 2026-07-28 protocol, as such servers will: it refuses the
2025-11-25 `initialize` handshake and passes every other message to the kitchen server."""

from __future__ import annotations

import _unmeasured  # noqa: F401  # first: see its docstring
import json
import subprocess
import sys
import threading
from pathlib import Path

KITCHEN = Path(__file__).with_name("kitchen.py")


def main() -> None:
    inner = subprocess.Popen(
        [sys.executable, str(KITCHEN)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert inner.stdin is not None
    assert inner.stdout is not None
    lock = threading.Lock()

    def out(line: bytes) -> None:
        with lock:
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()

    def relay() -> None:
        assert inner.stdout is not None
        for line in inner.stdout:
            out(line)

    threading.Thread(target=relay, daemon=True).start()
    for line in sys.stdin.buffer:
        message = json.loads(line)
        if message.get("method") == "initialize":
            error = {"code": -32600, "message": "this server speaks 2026-07-28 only"}
            out(
                json.dumps({"jsonrpc": "2.0", "id": message["id"], "error": error}).encode() + b"\n"
            )
            continue
        inner.stdin.write(line)
        inner.stdin.flush()
    inner.stdin.close()
    inner.wait()


if __name__ == "__main__":
    main()
