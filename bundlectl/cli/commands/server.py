"""`bundlectl server NAME`: run a built-in server for any MCP client."""

from __future__ import annotations

import socket
from pathlib import Path

from bundlectl.config import paths
from bundlectl.errors import UsageError
from bundlectl.servers import BUILTIN, build

TRANSPORTS = ("stdio", "sse", "streamable-http")


def default_root() -> Path:
    """The project root (the folder of the nearest bundlectl.yaml), else the working folder."""
    found = paths.find_config(Path.cwd())
    return found.resolve().parent if found else Path.cwd()


def _can_listen(host: str, port: int) -> None:
    """A port the server could not listen on is a usage error (exit 2), said before anything
    starts (uvicorn would exit 3, the code of "denied")."""
    try:
        family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
        with socket.create_server((host.strip("[]"), port), family=family):
            pass
    except (OSError, OverflowError) as exc:
        raise UsageError(
            f"cannot listen on {host}:{port}: {getattr(exc, 'strerror', None) or exc}",
            hint="choose another --port, or stop what listens there",
        ) from None


def run(
    name: str,
    *,
    root: Path | None,
    transport: str,
    host: str,
    port: int,
    unprotect: list[str] | None = None,
) -> int:
    if name not in BUILTIN:
        raise UsageError(f"no built-in server {name!r}", hint=f"choose from {', '.join(BUILTIN)}")
    if transport not in TRANSPORTS:
        raise UsageError(
            f"unknown transport {transport!r}", hint=f"choose from {', '.join(TRANSPORTS)}"
        )
    folder = (root or default_root()).resolve()
    if not folder.is_dir():
        raise UsageError(f"root folder {folder} does not exist")

    if unprotect and name != "files":
        raise UsageError("--unprotect is an option of the files server only")
    if transport != "stdio":
        _can_listen(host, port)
    server = build(name, folder, unprotect or [])
    if transport == "stdio":
        server.run("stdio")
    else:
        server.run(transport, host=host, port=port)  # type: ignore[call-overload]
    return 0
