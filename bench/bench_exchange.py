"""What token exchange (issue 54: `servers.NAME.auth.exchange`) costs a call through `serve`:
the first call of a person (an exchange at the issuer's token endpoint, here on loopback) and
every later one (the kept token).

    python bench/bench_exchange.py [--calls 20000]

The issuer is a minimal OAuth server in this process answering RFC 8693 exchanges with a fixed
token; what is timed is `Exchanger.token`, the gateway's whole step before a call is sent.
Goal: a kept token <= 0.05 ms a call.
"""

from __future__ import annotations

import argparse
import http.server
import json
import statistics
import threading
import time
from typing import Any

import anyio

from bundlectl.config.models import ServerAuth
from bundlectl.gateway.exchange import Exchanger
from bundlectl.gateway.identity import Caller


class _Issuer(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        host = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._send({"issuer": host, "token_endpoint": f"{host}/token"})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._send({"access_token": "x" * 600, "token_type": "Bearer", "expires_in": 3600})

    def _send(self, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


async def main(calls: int) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Issuer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    issuer = f"http://127.0.0.1:{server.server_address[1]}"
    auth = ServerAuth.model_validate(
        {"client_id": "gw", "exchange": {"audience": "https://mcp.example"}}
    )
    exchanger = Exchanger()
    firsts = []
    for person in range(20):  # each person's first call: an exchange
        caller = Caller(f"p{person}@example", issuer, "t" * 800)
        started = time.perf_counter()
        await exchanger.token("tracker", auth, caller)
        firsts.append((time.perf_counter() - started) * 1000)
    caller = Caller("p0@example", issuer, "t" * 800)
    started = time.perf_counter()
    for _ in range(calls):
        await exchanger.token("tracker", auth, caller)
    kept = (time.perf_counter() - started) * 1000 / calls
    server.shutdown()
    print(
        "first call of a person (an exchange on loopback): "
        f"median {statistics.median(firsts):.2f} ms"
    )
    print(f"every later call (the kept token): {kept * 1000:.2f} us")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=20000)
    anyio.run(main, parser.parse_args().calls)
