"""Claude Code: `.mcp.json` (project servers) and `.claude/settings.json` (`permissions`).

Source: Claude Code documentation, "MCP" and "Settings" / "IAM" pages (code.claude.com/docs),
read 2026-11-23: `.mcp.json` holds `{"mcpServers": {NAME: {command, args, env} | {type: "http" |
"sse", url, headers}}}` and expands `${VAR}` and `${VAR:-default}` in command, args, env, url and
headers; `permissions.allow`/`ask`/`deny` in `.claude/settings.json` take `mcp__SERVER` (every
tool of a server) and `mcp__SERVER__TOOL`; deny beats ask beats allow, and a tool in none of them
is asked about. So the policy maps exactly: allow → allow, ask → ask, a denied declared tool →
deny; a tool outside the declared catalog is asked about, never silently allowed. GitHub Copilot
CLI reads `.mcp.json` as well (before its own `.github/mcp.json`) but not Claude Code's
settings: each entry carries Copilot's `tools` allowlist too.
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
)
from bundlectl.policy.governing import CLIENT_FILES, OTHER_FILES

STYLE = mcpjson.Style()
SETTINGS = Path(OTHER_FILES[0])  # `.claude/settings.json`: the permissions


def _prefix(server: str) -> str:
    return f"mcp__{server}"


def permissions(plan: ServerPlan, misfits: list[Misfit]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {"allow": [], "ask": [], "deny": []}
    if plan.whole is not None:
        out[plan.whole].append(_prefix(plan.name))
        return out
    if not plan.decisions:
        misfits.extend(Misfit(label, mcpjson.NO_CATALOG) for label in mcpjson.partial_rules(plan))
        return out
    for decision in plan.decisions:
        out[decision.effect].append(f"{_prefix(plan.name)}__{decision.tool}")
    if plan.stale_risk:
        misfits.append(Misfit(plan.stale_rule(), UNLISTED_ASKED))
    return out


# What a direct export cannot say (#22 item 2): Claude Code asks about a tool no rule names.
UNLISTED_ASKED = "Claude Code asks about a tool no rule names, so a person could approve it"


def write(
    target: Path,
    current: Callable[[Path], str],
    export: Export,
    managed: set[str],
    gateway: bool,
) -> tuple[dict[Path, str], list[Misfit]]:
    file = str(target)
    text, misfits = mcpjson.write_servers(
        current(target),
        export,
        managed,
        file,
        style=STYLE,
        filters=None if gateway else _copilot_tools,
        gateway=gateway,
    )
    settings_path = target.parent / SETTINGS
    settings = current(settings_path)
    owned = {_prefix(name) for name in managed} | {_prefix("bundlectl")}
    existing = jsonc.parse(settings, str(settings_path)).value.get("permissions") or {}
    ours: dict[str, list[str]] = {"allow": [], "ask": [], "deny": []}
    if gateway:
        ours["allow"].append(_prefix("bundlectl"))  # the gateway enforces the policy itself
    else:
        for plan in export.servers:
            for effect, rules in permissions(plan, misfits).items():
                ours[effect].extend(rules)
    lists: dict[str, list[str]] = {}
    for effect in ("allow", "ask", "deny"):
        # The user's rules and ours where they stand; ours no longer wanted dropped, new
        # ones added at the end: a re-export changes nothing it need not (`--check` stays
        # quiet after a hand-added `Bash(ls:*)`).
        present = [r for r in existing.get(effect, []) or [] if isinstance(r, str)]
        kept = [
            rule
            for rule in present
            if rule in ours[effect]
            or not any(rule == p or rule.startswith(p + "__") for p in owned)
        ]
        lists[effect] = kept + [rule for rule in ours[effect] if rule not in kept]
    for effect in ("allow", "ask", "deny"):
        if lists[effect] != (existing.get(effect) or []) and (lists[effect] or effect in existing):
            settings = jsonc.set_member(
                settings, ["permissions", effect], lists[effect], str(settings_path)
            )
    return {target: text, settings_path: settings}, misfits


def _copilot_tools(plan: ServerPlan, item: dict[str, Any], misfits: list[Misfit]) -> None:
    """Claude Code's per-tool rules go to the permissions file. GitHub Copilot CLI reads
    `.mcp.json` too and ignores that file (every tool open to it): each entry also gets Copilot's
    own allowlist, `tools` (the allowed and asked tools; Copilot asks before a call unless its
    user allowed it), which Claude Code ignores. Checked with Copilot CLI 1.0.102 (`copilot mcp
    get` shows the list) and Claude Code 2.1 (the entry still connects)."""
    if plan.whole is None and plan.decisions:
        item["tools"] = [*plan.tools("allow"), *plan.tools("ask")]


def read(text: str, file: str) -> Imported:
    data = jsonc.parse(text, file).value
    imported = mcpjson.read_servers(data, "mcpServers", file)
    imported.unlisted = dict.fromkeys(imported.servers, "ask")
    perms = data.get("permissions") or {}
    for effect in ("allow", "ask", "deny"):
        for rule in perms.get(effect, []) or []:
            if not isinstance(rule, str) or not rule.startswith("mcp__"):
                continue
            server, _, tool = rule[len("mcp__") :].partition("__")
            getattr(imported, effect).append(
                f"{server}.{tool or '*'}" if tool != "*" else f"{server}.*"
            )
    return imported


def local_scope(data: Any, project: Path, imported: Imported) -> list[str]:
    """`~/.claude.json` keeps the servers of `claude mcp add` (its default scope, "local") per
    project, under `projects[<folder>].mcpServers`: those of `project` are imported beside the
    user-scope ones; other projects' are not, and a note says how many were left."""
    projects = data.get("projects") if isinstance(data, dict) else None
    if not isinstance(projects, dict):
        return []
    notes = []
    others = 0
    for folder, entry in projects.items():
        servers = entry.get("mcpServers") if isinstance(entry, dict) else None
        if not isinstance(servers, dict) or not servers:
            continue
        if Path(folder) != project:
            others += len(servers)
            continue
        local = mcpjson.read_servers({"mcpServers": servers}, "mcpServers", str(folder))
        imported.servers.update(local.servers)
        imported.secrets.update(local.secrets)
        imported.unlisted.update(dict.fromkeys(local.servers, "ask"))
        notes.append(f"imported the local-scope servers of {folder}: {', '.join(local.servers)}")
    if others:
        notes.append(
            f"{others} local-scope server(s) of other projects in this file were not imported "
            "(import from those projects to take theirs)"
        )
    return notes


CLIENT = Client(
    name="claude-code",
    title="Claude Code",
    project_file=CLIENT_FILES["claude-code"],
    user_file=lambda: Path(mcpjson.home()) / ".claude.json",
    write=write,
    read=read,
    source=__doc__ or "",
)
