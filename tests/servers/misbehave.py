"""Servers that break: `crash` (exits at once), `hang` (never answers), `garbage` (writes
non-JSON to stdout), `exit-after-init` (answers the handshake, then dies)."""

from __future__ import annotations

import json
import os
import sys
import time

mode = sys.argv[1]
starts = os.environ.get("KITCHEN_STARTS")
if starts:
    with open(starts, "a") as handle:
        handle.write(f"{os.getpid()}\n")
if mode == "crash":
    sys.stderr.write("starting up\nfatal: cannot open database /nonexistent.db\n")
    sys.exit(3)
if mode == "hang":
    sys.stderr.write("hanging forever\n")
    while True:
        time.sleep(1)
if mode == "garbage":
    for _ in sys.stdin:
        sys.stdout.write("this is not json-rpc\n")
        sys.stdout.flush()
if mode == "exit-after-init":
    for line in sys.stdin:
        message = json.loads(line)
        if message.get("method") in ("initialize", "server/discover"):
            if message["method"] == "server/discover":
                reply = {
                    "jsonrpc": "2.0",
                    "id": message["id"],
                    "error": {"code": -32601, "message": "Method not found"},
                }
            else:
                reply = {
                    "jsonrpc": "2.0",
                    "id": message["id"],
                    "result": {
                        "protocolVersion": "2025-11-25",
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "dying", "version": "1"},
                    },
                }
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()
        elif message.get("method") == "tools/list":
            sys.stderr.write("segfault imitation\n")
            sys.exit(11)
