"""Cursor: `.cursor/mcp.json` in the project (`~/.cursor/mcp.json` for the user).

Source: Cursor documentation, "Model Context Protocol" (cursor.com/docs/context/mcp), read
2026-11-23: `{"mcpServers": {NAME: {command, args, env} | {url, headers}}}`; values may use
`${env:NAME}` (no defaults). Tools are switched on and off in Cursor's settings screen, not in
the file, so a direct export fits only servers the agent may use whole.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bundlectl.clients import mcpjson
from bundlectl.clients.base import (
    Imported,
)
from bundlectl.policy.governing import CLIENT_FILES


def _remote(transport: str, url: str, headers: dict[str, str]) -> dict[str, Any]:
    return {"url": url, **({"headers": headers} if headers else {})}


STYLE = mcpjson.Style(ref=mcpjson.env_ref, defaults=False, remote=_remote)


def READ_FILTER(servers: dict[str, Any], imported: Imported) -> None:
    imported.allow.extend(f"{name}.*" for name in imported.servers)


CLIENT = mcpjson.client(
    name="cursor",
    title="Cursor",
    project_file=CLIENT_FILES["cursor"],
    user_file=lambda: Path(mcpjson.home()) / ".cursor" / "mcp.json",
    style=STYLE,
    filters=None,
    read_filter=READ_FILTER,
    source=__doc__ or "",
)
