"""`bundlectl auth login|status|logout`: OAuth sign-ins to the project's remote servers."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from bundlectl import credentials
from bundlectl.calls.audit import AuditLog
from bundlectl.calls.pipeline import Pipeline
from bundlectl.cli.options import Format
from bundlectl.config.expand import expand
from bundlectl.config.project import load_project
from bundlectl.errors import UsageError
from bundlectl.mcpio import runner
from bundlectl.mcpio.connect import connect
from bundlectl.mcpio.session import SdkSession
from bundlectl.output import JSON_FORMAT_VERSION, emit_json, err, out, span_text, table
from bundlectl.resolve.resolved import Resolution, resolve_project


def _remote(resolution: Resolution, server: str) -> tuple[Any, str]:
    """The remote server named `server`, and its URL (references expanded)."""
    merged = resolution.server(server)
    spec = merged.spec
    if spec.transport not in ("sse", "streamable-http"):
        raise UsageError(
            f"server {server!r} runs as a local process ({spec.transport}); only remote servers "
            "(sse, streamable-http) sign in",
        )
    return merged, expand(spec.url or "", os.environ, where=f"server {server!r}")


def login(config: Path | None, server: str, *, browser: bool, wait: float) -> int:
    from bundlectl.mcpio.oauth import login_auth  # noqa: PLC0415 - the MCP SDK: login only

    resolution = resolve_project(load_project(config))
    _, url = _remote(resolution, server)
    target = Pipeline(resolution, AuditLog(resolution), None).target(server)
    with login_auth(target, url, browser=browser, wait=wait) as flow:
        target.auth = flow

        async def signed_in() -> int:
            async with connect(target, connect_timeout=wait + 30) as client:
                return len(await SdkSession(client).tools())

        tools = runner.run(signed_in)
    kept = credentials.load(server, url)
    left = credentials.expires_in(kept)
    scopes = " ".join(kept.scopes) or "(none named)"
    until = f"; the access token expires in {span_text(left)}" if left is not None else ""
    refresh = ", renewed with its refresh token" if (kept.tokens or {}).get("refresh_token") else ""
    out(f"signed in to {server!r}: scopes {scopes}{until}{refresh}; {tools} tool(s) listed")
    err(f"note: kept in {credentials.where()}")
    return 0


def status(config: Path | None, *, fmt: Format) -> int:
    resolution = resolve_project(load_project(config))
    rows: list[dict[str, Any]] = []
    now = time.time()
    for name, merged in sorted(resolution.merged.servers.items()):
        spec = merged.spec
        if spec.transport not in ("sse", "streamable-http"):
            continue
        try:
            url = expand(spec.url or "", os.environ, where=f"server {name!r}")
        except UsageError:
            rows.append({"server": name, "signed_in": False, "note": "its url needs a variable"})
            continue
        headers = {k.lower() for k in spec.headers}
        kept = credentials.load(name, url)
        left = credentials.expires_in(kept, now)
        rows.append(
            {
                "server": name,
                "url": url,
                "signed_in": bool(kept.tokens),
                "static_header": "authorization" in headers,
                "scopes": kept.scopes,
                "expires_in": None if left is None else round(left),
                "refreshable": bool((kept.tokens or {}).get("refresh_token")),
                "client_id": (kept.client or {}).get("client_id"),
            }
        )
    if fmt is Format.json:
        emit_json(
            {"format_version": JSON_FORMAT_VERSION, "where": credentials.where(), "servers": rows}
        )
        return 0
    if not rows:
        out("no remote servers in this project")
        return 0
    shown = []
    for row in rows:
        if row.get("static_header"):
            state = "static Authorization header"
        elif not row["signed_in"]:
            state = "not signed in"
        elif row["expires_in"] is not None and row["expires_in"] <= 0:
            state = "expired" + (" (renewed on next use)" if row["refreshable"] else "")
        else:
            left = row["expires_in"]
            state = "signed in" + (f", expires in {span_text(left)}" if left is not None else "")
        shown.append([row["server"], state, " ".join(row.get("scopes") or []) or "-"])
    table(shown, ["SERVER", "SIGN-IN", "SCOPES"])
    err(f"note: sign-ins are kept in {credentials.where()}")
    return 0


def logout(config: Path | None, server: str) -> int:
    resolution = resolve_project(load_project(config))
    _, url = _remote(resolution, server)
    if credentials.forget(server, url):
        out(f"signed out of {server!r}: its tokens and client registration are removed")
    else:
        out(f"not signed in to {server!r}; nothing to remove")
    return 0
