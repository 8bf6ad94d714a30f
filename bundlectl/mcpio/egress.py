"""The way out of a sandbox for a server whose entry lists the hosts it may reach
(`servers.NAME.sandbox.network: [api.github.com, "*.githubusercontent.com:443"]`).

The server runs with no network of its own (a new network namespace: loopback only). bundlectl
runs an HTTP proxy for it on the host, on a Unix socket in a private folder that is bound into
the sandbox; inside, a small bridge (`BRIDGE`, the standard library only) listens on
127.0.0.1:`PORT` and carries each connection to that socket, and the server is told the proxy in
`HTTP_PROXY`/`HTTPS_PROXY`, as Claude Code's sandbox and ToolHive do. The proxy opens a
connection only to a host:port the list allows — HTTP `CONNECT` for TLS, and plain HTTP
requests (forwarded with `Connection: close`, so one connection never reaches a second host) —
and refuses every other with 403, told to `refused(host)` (the audit log's `egress-denied`).
Names are resolved here, on the host: the sandbox needs no DNS.

The patterns are `config.hosts`'. No I/O at import, the standard library only: this runs on
`exec`'s way to starting a server.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable, Sequence

from bundlectl.config.hosts import allows, valid_pattern

PORT = 3128  # where the bridge listens inside the sandbox (its own network: always free)
INSIDE = "/tmp/.bundlectl-egress.sock"  # where the proxy's socket is bound in the sandbox
HEAD_LIMIT = 64 * 1024  # bytes of a request's head the proxy reads before refusing it
SOCKET_PATH_MAX = 100  # bytes of a Unix socket's path (the kernel's limit is 107)
HEAD_WAIT = 30.0  # seconds a connection may take to send its request's head
CONNECT_TIMEOUT = 10.0  # seconds to reach an allowed host

# The bridge inside the sandbox: listens on 127.0.0.1:PORT, forks a process that carries each
# connection to the proxy's socket (its stdio closed: the server's pipes are the server's), and
# becomes the server (`exec`). Run as `python -I -S -c BRIDGE SOCKET PORT -- ARGV...`.
BRIDGE = r"""
import os, socket, sys, threading
path, port, argv = sys.argv[1], int(sys.argv[2]), sys.argv[4:]
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", port))
listener.listen(64)
if os.fork() == 0:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    def pump(a, b):
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        finally:
            try:
                b.shutdown(socket.SHUT_WR)
            except OSError:
                pass
    while True:
        conn, _ = listener.accept()
        up = socket.socket(socket.AF_UNIX)
        try:
            up.connect(path)
        except OSError:
            conn.close()
            continue
        threading.Thread(target=pump, args=(conn, up), daemon=True).start()
        threading.Thread(target=pump, args=(up, conn), daemon=True).start()
listener.close()
os.execvp(argv[0], argv)
"""


class Egress:
    """The proxy of one sandboxed server's start (see the module): `path` is its socket on the
    host; `close` stops it and removes the socket's folder."""

    def __init__(
        self, server: str, patterns: Sequence[str], refused: Callable[[str], None] | None = None
    ) -> None:
        self.server, self.patterns, self.refused = server, tuple(patterns), refused
        self.folder = tempfile.mkdtemp(prefix=f"bundlectl-egress-{server}-")  # 0700: ours alone
        self.path = os.path.join(self.folder, "proxy.sock")
        if len(self.path.encode()) > SOCKET_PATH_MAX and os.path.isdir("/tmp"):
            os.rmdir(self.folder)  # a long $TMPDIR: a socket's path is at most 107 bytes
            self.folder = tempfile.mkdtemp(prefix="bundlectl-egress-", dir="/tmp")
            self.path = os.path.join(self.folder, "proxy.sock")
        self._listener = socket.socket(socket.AF_UNIX)
        self._listener.bind(self.path)
        self._listener.listen(64)
        self._closed = False
        threading.Thread(target=self._serve, name=f"egress {server}", daemon=True).start()

    def environment(self) -> dict[str, str]:
        """What the server is told: the proxy, for every client library's spelling."""
        url = f"http://127.0.0.1:{PORT}"
        told = {"HTTP_PROXY": url, "HTTPS_PROXY": url, "ALL_PROXY": url, "NO_PROXY": ""}
        lower = {name.lower(): value for name, value in told.items()}
        return {**told, **lower, "NODE_USE_ENV_PROXY": "1"}  # Node's own fetch takes it too

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _serve(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with contextlib.closing(conn):
            conn.settimeout(HEAD_WAIT)  # a connection that never asks holds no thread for long
            head, rest = _read_head(conn)
            if head is None:
                return
            conn.settimeout(None)
            request = _parse(head)
            if request is None:
                conn.sendall(_answer(400, "bundlectl's egress proxy: not an HTTP proxy request"))
                return
            method, host, port, forwarded = request
            if not allows(self.patterns, host, port):
                if self.refused is not None:
                    with contextlib.suppress(Exception):
                        self.refused(host)
                conn.sendall(
                    _answer(
                        403,
                        f"bundlectl: server {self.server!r} may not reach {host}:{port} "
                        f"(servers.{self.server}.sandbox.network)",
                    )
                )
                return
            try:
                upstream = socket.create_connection((host.strip("[]"), port), CONNECT_TIMEOUT)
            except OSError as exc:
                conn.sendall(_answer(502, f"bundlectl: {host}:{port}: {exc.strerror or exc}"))
                return
            with contextlib.closing(upstream):
                if method == "CONNECT":
                    conn.sendall(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                else:
                    upstream.sendall(forwarded)
                if rest:
                    upstream.sendall(rest)
                other = threading.Thread(target=_pump, args=(upstream, conn), daemon=True)
                other.start()
                _pump(conn, upstream)
                other.join()


def _read_head(conn: socket.socket) -> tuple[bytes | None, bytes]:
    """The request's head (up to the blank line) and what came after it."""
    data = b""
    while b"\r\n\r\n" not in data:
        try:
            chunk = conn.recv(4096)
        except OSError:
            return None, b""
        if not chunk or len(data) + len(chunk) > HEAD_LIMIT:
            return None, b""
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _parse(head: bytes) -> tuple[str, str, int, bytes] | None:
    """(method, host, port, the head to send upstream) of a proxy request, or None."""
    try:
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ")
    except ValueError:
        return None
    if not version.startswith("HTTP/"):
        return None
    if method == "CONNECT":
        host, _, number = target.rpartition(":")
        if not number.isdigit() or not _name_or_ip(host):
            return None
        return method, host, int(number), b""
    found = re.match(r"^http://([^/?#@]+)(.*)$", target, re.IGNORECASE)
    if found is None:
        return None
    authority, path = found.group(1), found.group(2) or "/"
    host, port = authority, 80
    if re.search(r":\d+$", authority):
        host, _, number = authority.rpartition(":")
        port = int(number)
    if not _name_or_ip(host):
        return None
    kept = [
        line
        for line in lines[1:]
        if line.split(":", 1)[0].strip().lower()
        not in ("connection", "proxy-connection", "keep-alive", "proxy-authorization")
    ]
    forwarded = "\r\n".join([f"{method} {path} {version}", *kept, "Connection: close", "", ""])
    return method, host, port, forwarded.encode("latin-1")


def _name_or_ip(host: str) -> bool:
    """A host as a request names it: a name or an IP address (IPv6 in brackets), no pattern."""
    bracketed = host.startswith("[") and host.endswith("]")
    plain = bracketed or ":" not in host  # a port left on it is no host
    return valid_pattern(host) is None and not host.startswith("*") and plain


def _answer(status: int, text: str) -> bytes:
    reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}[status]
    body = (text + "\n").encode()
    return (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
