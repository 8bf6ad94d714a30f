"""Claude Desktop: the user-level `claude_desktop_config.json`.

Source: Claude Desktop documentation ("Connect to local MCP servers", modelcontextprotocol.io
quickstart) read 2026-11-23: `{"mcpServers": {NAME: {command, args, env}}}` in
`~/Library/Application Support/Claude/` (macOS), `%APPDATA%\\Claude\\` (Windows) and
`~/.config/Claude/` (Linux). The file is taken literally: no `${VAR}` expansion and no per-tool
filter, so a direct export fits only servers the agent may use whole and that need no secret;
the gateway entry fits always.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from bundlectl.clients import (
    Client,
    Export,
    Imported,
    Misfit,
    ServerPlan,
    jsonc,
    mcpjson,
    rule_label,
)

STYLE = mcpjson.Style(expands=False, defaults=False)
FILTER = None


def _user_file() -> Path:
    import os
    import sys

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


def write(
    target: Path,
    current: Callable[[Path], str],
    export: Export,
    managed: set[str],
    gateway: bool,
) -> tuple[dict[Path, str], list[Misfit]]:
    text, misfits = mcpjson.write_servers(
        current(target),
        export,
        managed,
        str(target),
        style=STYLE,
        filters=FILTER,
        gateway=gateway,
    )
    return {target: text}, misfits


def read(text: str, file: str) -> Imported:
    data = jsonc.parse(text, file).value
    imported = mcpjson.read_servers(data, STYLE.key, file)
    READ_FILTER(data.get(STYLE.key) or {}, imported)
    return imported


CLIENT = Client(
    name="claude-desktop",
    title="Claude Desktop",
    project_file=None,
    user_file=_user_file,
    write=write,
    read=read,
    source=__doc__ or "",
)
del ServerPlan, rule_label
