"""Roo Code: `.roo/mcp.json` in the project (`mcp_settings.json` for the user).

Source: Roo Code documentation, "Using MCP in Roo Code" (docs.roocode.com/features/mcp), read
2026-11-23: `{"mcpServers": {NAME: {command, args, env, alwaysAllow, disabled, disabledTools}}}`,
remote servers `{type: "streamable-http" | "sse", url, headers}`; values may use `${env:NAME}`.
A tool in `alwaysAllow` runs without asking, one in `disabledTools` is not offered, any other is
asked about (the `use_mcp_tool` approval).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bundlectl.clients import mcpjson
from bundlectl.clients.base import (
    Imported,
    Misfit,
    ServerPlan,
)
from bundlectl.policy.governing import CLIENT_FILES


def _remote(transport: str, url: str, headers: dict[str, str]) -> dict[str, Any]:
    kind = "streamable-http" if transport == "streamable-http" else "sse"
    return {"type": kind, "url": url, **({"headers": headers} if headers else {})}


STYLE = mcpjson.Style(ref=mcpjson.env_ref, defaults=False, remote=_remote)


def FILTER(plan: ServerPlan, item: dict[str, Any], misfits: list[Misfit]) -> None:
    """allow → `alwaysAllow` (runs without asking); ask → listed in neither (the client asks);
    a denied declared tool → `disabledTools`. A tool outside the catalog is asked about."""
    if plan.whole is not None:
        # alwaysAllow takes tool names: a rule over the whole server is expanded over its
        # catalog (a tool beyond it is asked about: stricter than the policy, never looser).
        if plan.whole == "allow" and not plan.decisions:
            misfits.append(
                Misfit(
                    f"{plan.name}.*",
                    "alwaysAllow takes tool names, and the server declares "
                    "no catalog to expand the rule over",
                )
            )
        item["alwaysAllow"] = plan.tools("allow") if plan.whole == "allow" else []
        return
    if not plan.decisions:
        misfits.extend(Misfit(label, mcpjson.NO_CATALOG) for label in mcpjson.partial_rules(plan))
    elif plan.stale_risk:
        why = "Roo asks about a tool in neither list, so a person could approve it"
        misfits.append(Misfit(plan.stale_rule(), why))
    item["alwaysAllow"] = plan.tools("allow")
    denied = plan.tools("deny")
    if denied:
        item["disabledTools"] = denied
    item["disabled"] = False


def READ_FILTER(servers: dict[str, Any], imported: Imported) -> None:
    for name in imported.servers:
        raw = servers.get(name) or {}
        imported.allow.extend(f"{name}.{tool}" for tool in raw.get("alwaysAllow") or [])
        imported.deny.extend(f"{name}.{tool}" for tool in raw.get("disabledTools") or [])
        if raw.get("disabled"):
            imported.deny.append(f"{name}.*")
        else:
            imported.unlisted[name] = "ask"  # the client asks about every other tool


CLIENT = mcpjson.client(
    name="roo",
    title="Roo Code",
    project_file=CLIENT_FILES["roo"],
    user_file=lambda: Path(mcpjson.home()) / ".roo" / "mcp_settings.json",
    style=STYLE,
    filters=FILTER,
    read_filter=READ_FILTER,
    source=__doc__ or "",
)
