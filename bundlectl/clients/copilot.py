"""GitHub Copilot CLI: `.github/mcp.json` in the project (`~/.copilot/mcp-config.json` for the
user).

Source: Copilot CLI 1.0.102 itself (`copilot mcp --help`, `copilot mcp list --json`, `copilot mcp
get`), checked 2026-11-24, and GitHub's documentation, "Adding MCP servers for GitHub Copilot
CLI" (docs.github.com): `{"mcpServers": {NAME: {type: "local", command, args, env, tools} |
{type: "http" | "sse", url, headers, tools}}}`; `tools` is an allowlist of tool names (`["*"]`:
all, the default). In a project Copilot reads `.mcp.json` when there is one — Claude Code's file,
whose entries `export claude-code` gives Copilot's `tools` too — and `.github/mcp.json` only
otherwise; it reads the project's files only in a folder its user trusted.

Copilot asks its user before a tool call unless the user allowed the tool for the session, so
allowed and asked tools both go into `tools` (never looser than the policy); a denied tool, and
every tool beyond the catalog, is left out of it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from bundlectl.clients import mcpjson
from bundlectl.clients.base import Imported, Misfit, ServerPlan
from bundlectl.policy.governing import CLIENT_FILES


def _filter(plan: ServerPlan, item: dict[str, Any], misfits: list[Misfit]) -> None:
    if plan.whole is not None:
        item["tools"] = ["*"]
        return
    if not plan.decisions:
        misfits.extend(Misfit(label, mcpjson.NO_CATALOG) for label in mcpjson.partial_rules(plan))
        return
    item["tools"] = [*plan.tools("allow"), *plan.tools("ask")]


def _stdio_type(item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "local", **item} if "command" in item else item


def READ_FILTER(servers: dict[str, Any], imported: Imported) -> None:
    """`tools` as ask rules (Copilot asks before a call); no list or `*`: the whole server."""
    for name in imported.servers:
        tools = (servers.get(name) or {}).get("tools")
        if not isinstance(tools, list) or "*" in tools:
            imported.ask.append(f"{name}.*")
        else:
            imported.ask.extend(f"{name}.{tool}" for tool in tools if isinstance(tool, str))


def _notes(target: Path, root: Path) -> list[str]:
    shared = root / ".mcp.json"
    if target == root / ".github" / "mcp.json" and shared.exists():
        return [
            "Copilot CLI reads .mcp.json instead of .github/mcp.json when both exist: it uses "
            "the servers of .mcp.json (run `bundlectl export claude-code` to give them "
            "Copilot's tool allowlist too)"
        ]
    return []


STYLE = mcpjson.Style(shape=_stdio_type)
CLIENT = dataclasses.replace(
    mcpjson.client(
        name="copilot",
        title="GitHub Copilot CLI",
        project_file=CLIENT_FILES["copilot"],
        user_file=lambda: Path(mcpjson.home()) / ".copilot" / "mcp-config.json",
        style=STYLE,
        filters=_filter,
        read_filter=READ_FILTER,
        source=__doc__ or "",
    ),
    notes=_notes,
)
