"""Cursor: `.cursor/mcp.json` in the project (`~/.cursor/mcp.json` for the user).

Source: Cursor documentation, "Model Context Protocol" (cursor.com/docs/context/mcp), read
2026-11-23: `{"mcpServers": {NAME: {command, args, env} | {url, headers}}}`; values may use
`${env:NAME}` (no defaults). Tools are switched on and off in Cursor's settings screen, not in
the file, so a direct export fits only servers the agent may use whole.
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


def _remote(transport: str, url: str, headers: dict[str, str]) -> dict[str, Any]:
    return {"url": url, **({"headers": headers} if headers else {})}


STYLE = mcpjson.Style(ref=mcpjson.env_ref, defaults=False, remote=_remote)
FILTER = None


def READ_FILTER(servers: dict[str, Any], imported: Imported) -> None:
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
    name="cursor",
    title="Cursor",
    project_file=".cursor/mcp.json",
    user_file=lambda: Path(mcpjson.home()) / ".cursor" / "mcp.json",
    write=write,
    read=read,
    source=__doc__ or "",
)
del ServerPlan, rule_label
