"""Claude Desktop: the user-level `claude_desktop_config.json`.

Source: Claude Desktop documentation ("Connect to local MCP servers", modelcontextprotocol.io
quickstart) read 2026-11-23: `{"mcpServers": {NAME: {command, args, env}}}` in
`~/Library/Application Support/Claude/` (macOS), `%APPDATA%\\Claude\\` (Windows) and
`~/.config/Claude/` (Linux). The file is taken literally: no `${VAR}` expansion and no per-tool
filter, so a direct export fits only servers the agent may use whole and that need no secret;
the gateway entry fits always.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from bundlectl.clients import mcpjson
from bundlectl.clients.base import (
    Imported,
)

STYLE = mcpjson.Style(expands=False, defaults=False)


def _user_file() -> Path:
    if sys.platform == "darwin":
        base = Path(mcpjson.home()) / "Library" / "Application Support"
    elif sys.platform == "win32":
        base = Path(os.environ.get("APPDATA", mcpjson.home()))
    else:
        base = Path(os.environ.get("XDG_CONFIG_HOME") or Path(mcpjson.home()) / ".config")
    return base / "Claude" / "claude_desktop_config.json"


def READ_FILTER(servers: dict[str, Any], imported: Imported) -> None:
    """No filter in the file: every tool of every server (spelled out as `server.*`)."""
    imported.allow.extend(f"{name}.*" for name in imported.servers)


CLIENT = mcpjson.client(
    name="claude-desktop",
    title="Claude Desktop",
    project_file=None,
    user_file=_user_file,
    style=STYLE,
    filters=None,
    read_filter=READ_FILTER,
    source=__doc__ or "",
)
