"""Gemini CLI: `.gemini/settings.json` in the project (`~/.gemini/settings.json` for the user).

Source: Gemini CLI documentation, "MCP servers with Gemini CLI" and "Configuration"
(geminicli.com/docs), read 2026-11-23: `{"mcpServers": {NAME: {command, args, env, cwd,
includeTools, excludeTools, trust} | {httpUrl | url, headers}}}`; string values may use `$VAR` or
`${VAR}`. `includeTools` is an allowlist; Gemini asks before every call to a server unless it
has `trust: true`. So: the allowed (and asked) tools go into `includeTools`; a server whose
usable tools are all allowed is trusted; a server that mixes allow and ask cannot be expressed
(trust is per server).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bundlectl.clients import mcpjson
from bundlectl.clients.base import (
    Export,
    Imported,
    Misfit,
    ServerPlan,
    rule_label,
)
from bundlectl.policy.governing import CLIENT_FILES


def _remote(transport: str, url: str, headers: dict[str, str]) -> dict[str, Any]:
    key = "httpUrl" if transport == "streamable-http" else "url"
    return {key: url, **({"headers": headers} if headers else {})}


def _gateway(entry: dict[str, Any], export: Export) -> dict[str, Any]:
    """Gemini passes a server only the variables in its `env`, and without `trust` it offers the
    model no tool of it in non-interactive mode: the gateway enforces the policy itself."""
    if export.variables:
        entry["env"] = {var: f"${{{var}}}" for var in export.variables}
    entry["trust"] = True
    return entry


STYLE = mcpjson.Style(defaults=False, remote=_remote, gateway=_gateway)


def FILTER(plan: ServerPlan, item: dict[str, Any], misfits: list[Misfit]) -> None:
    if plan.whole is not None:
        item["trust"] = plan.whole == "allow"
        return
    if not plan.decisions:
        misfits.extend(Misfit(label, mcpjson.NO_CATALOG) for label in mcpjson.partial_rules(plan))
        return
    allowed, asked = plan.tools("allow"), plan.tools("ask")
    item["includeTools"] = allowed + asked
    item["trust"] = not asked
    if allowed and asked:
        misfits.extend(
            Misfit(rule_label(d), "Gemini confirms per server (trust), not per tool")
            for d in plan.decisions
            if d.effect == "ask"
        )


def READ_FILTER(servers: dict[str, Any], imported: Imported) -> None:
    for name in imported.servers:
        raw = servers.get(name) or {}
        effect = imported.allow if raw.get("trust") else imported.ask
        included = raw.get("includeTools")
        if included:
            effect.extend(f"{name}.{tool}" for tool in included)
        else:
            effect.append(f"{name}.*")
        imported.deny.extend(f"{name}.{tool}" for tool in raw.get("excludeTools") or [])


CLIENT = mcpjson.client(
    name="gemini",
    title="Gemini CLI",
    project_file=CLIENT_FILES["gemini"],
    user_file=lambda: Path(mcpjson.home()) / ".gemini" / "settings.json",
    style=STYLE,
    filters=FILTER,
    read_filter=READ_FILTER,
    source=__doc__ or "",
)
