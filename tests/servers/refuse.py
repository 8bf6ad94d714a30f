"""An HTTP server that answers every request 401, as a server that wants a credential does.

python refuse.py --port N
"""

from __future__ import annotations

import _unmeasured  # noqa: F401  # first: see its docstring
import argparse
import http.server


class Refuse(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Bearer realm="refuse"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST

    def log_message(self, *args: object) -> None:
        pass


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    port = parser.parse_args().port
    http.server.ThreadingHTTPServer(("127.0.0.1", port), Refuse).serve_forever()
