"""The floor under any client: mcp-server-time started and called over raw pipes by the least
a client can do (the handshake and one tools/call, written by hand), for bench_exec.py.

    python bench/raw_call.py COMMAND...
"""

from __future__ import annotations

import json
import subprocess
import sys

MESSAGES = [
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"},
        },
    },
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "get_current_time", "arguments": {"timezone": "UTC"}},
    },
]


def main() -> None:
    server = subprocess.Popen(
        sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert server.stdin is not None
    assert server.stdout is not None
    server.stdin.write(json.dumps(MESSAGES[0]).encode() + b"\n")
    server.stdin.flush()
    server.stdout.readline()
    for message in MESSAGES[1:]:
        server.stdin.write(json.dumps(message).encode() + b"\n")
    server.stdin.flush()
    answer = json.loads(server.stdout.readline())
    assert "result" in answer, answer
    server.stdin.close()
    server.wait()


if __name__ == "__main__":
    main()
