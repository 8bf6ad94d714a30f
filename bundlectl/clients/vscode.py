"""VS Code: `.vscode/mcp.json` in the project (JSONC: comments and trailing commas kept).

Source: VS Code documentation, "Use MCP servers in VS Code" and the MCP configuration reference
(code.visualstudio.com/docs/copilot/chat/mcp-servers), read 2026-11-23: `{"servers": {NAME:
{type: "stdio", command, args, env} | {type: "http" | "sse", url, headers}}, "inputs": [...]}`;
values may use `${env:NAME}` and `${input:ID}`, where an input of type `promptString` with
`password: true` is asked once and stored securely. Secrets become such inputs. Tools are picked
in the chat's tool picker, not in the file, so a direct export fits only servers the agent may use
whole.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from bundlectl.clients import jsonc, mcpjson
from bundlectl.clients.base import (
    Client,
    Export,
    Imported,
    Misfit,
    ServerPlan,
    rule_label,
)
from bundlectl.policy.governing import CLIENT_FILES


def _secret_ref(var: str, default: str | None) -> str:
    return f"${{input:{var}}}" if var in _SECRETS else f"${{env:{var}}}"


_SECRETS: set[str] = set()
STYLE = mcpjson.Style(key="servers", ref=_secret_ref, defaults=False, stdio_type="stdio")
FILTER = None


def write(
    target: Path,
    current: Callable[[Path], str],
    export: Export,
    managed: set[str],
    gateway: bool,
) -> tuple[dict[Path, str], list[Misfit]]:
    _SECRETS.clear()
    for plan in export.servers:
        _SECRETS.update(plan.secret_vars)
    file = str(target)
    text, misfits = mcpjson.write_servers(
        current(target),
        export,
        managed,
        file,
        style=STYLE,
        filters=FILTER,
        gateway=gateway,
    )
    if not gateway and _SECRETS:
        existing = jsonc.parse(text, file).value.get("inputs") or []
        ids = {item.get("id") for item in existing if isinstance(item, dict)}
        inputs = list(existing) + [
            {"type": "promptString", "id": var, "description": var, "password": True}
            for var in sorted(_SECRETS - ids)
        ]
        text = jsonc.set_member(text, ["inputs"], inputs, file)
    return {target: text}, misfits


def read(text: str, file: str) -> Imported:
    data = jsonc.parse(text, file).value
    imported = mcpjson.read_servers(data, "servers", file)
    imported.allow.extend(f"{name}.*" for name in imported.servers)
    for spec in imported.servers.values():
        spec.pop("type", None)
    return imported


CLIENT = Client(
    name="vscode",
    title="VS Code",
    project_file=CLIENT_FILES["vscode"],
    user_file=lambda: Path(mcpjson.home()) / ".vscode" / "mcp.json",
    write=write,
    read=read,
    source=__doc__ or "",
)
del Any, ServerPlan, rule_label
