"""Kilo Code (the Kilo CLI, and the VS Code extension since it shares the CLI's config): `kilo.json`
in the project (`~/.config/kilo/kilo.json` for the user).

Source: Kilo Code documentation, "Using MCP in Kilo Code" (kilo.ai/docs, automate/mcp), read
2026-11-24: servers under the top-level `mcp` key, `{type: "local", command: [argv...],
environment, enabled}` or `{type: "remote", url, headers, enabled}`; references are written
`{env:NAME}`; the file may be `kilo.json` or `kilo.jsonc` (comments). Tool approval is Kilo's
general `permission` map, keyed `server_tool`. The legacy `.kilocode/mcp.json` (Roo's format) is
still read by `import`, but Kilo CLI 7.7 ignores its `alwaysAllow`/`disabledTools` and does not
expand its `${env:NAME}` (issue #22): nothing is exported there any more.

bundlectl writes no per-tool rules into Kilo's file: it has not verified that Kilo denies a tool
through `permission`, so only a server the agent may use whole (every tool allowed) is exported
directly. Any narrower policy is a misfit: `--via auto` writes the gateway entry, `--via direct`
refuses.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bundlectl.clients import jsonc, mcpjson, roo
from bundlectl.clients.base import Imported, Misfit, ServerPlan
from bundlectl.policy.governing import CLIENT_FILES

KEY = "mcp"


def _ref(var: str, default: str | None) -> str:
    return f"{{env:{var}}}"


def _kilo(item: dict[str, Any]) -> dict[str, Any]:
    """A server entry of the shared JSON shape in Kilo's own shape."""
    if "command" in item:
        out: dict[str, Any] = {"type": "local", "command": [item["command"], *item.get("args", [])]}
        if item.get("env"):
            out["environment"] = item["env"]
    else:
        out = {"type": "remote", "url": item["url"]}
        if item.get("headers"):
            out["headers"] = item["headers"]
    out["enabled"] = True
    return out


def whole_servers_only(
    title: str,
) -> Callable[[ServerPlan, dict[str, Any], list[Misfit]], None]:
    """The filter of a client given whole servers only (Kilo, opencode): one misfit per server
    the agent may use only in part."""

    def check(plan: ServerPlan, item: dict[str, Any], misfits: list[Misfit]) -> None:
        if plan.spec.cwd:
            misfits.append(Misfit(f"servers.{plan.name}.cwd", f"{title} has no working folder"))
        if not mcpjson.whole_allowed(plan):
            rules = mcpjson.partial_rules(plan) or [f"{plan.name}.*: an ask rule"]
            misfits.extend(  # one reason a rule, each named (it said "and 2 more")
                Misfit(
                    f"{plan.name}: {rule}",
                    f"{title} is given whole servers only (bundlectl writes no per-tool rules "
                    "into its file)",
                )
                for rule in rules
            )

    return check


_KILO_REF = re.compile(r"\{env:([A-Za-z_][A-Za-z0-9_]*)\}")


def read(text: str, file: str) -> Imported:
    """Kilo's `mcp` entries, read as the shared JSON shape; a legacy `.kilocode/mcp.json`
    (`mcpServers`) is read as Roo's."""
    data = _mapping(jsonc.parse(text, file).value)
    if KEY not in data and "mcpServers" in data:
        legacy: Imported = roo.CLIENT.read(text, file)
        return legacy
    servers = data.get(KEY)
    shared = {
        name: _shared(raw)
        for name, raw in (servers.items() if isinstance(servers, dict) else [])
        if isinstance(raw, dict)
    }
    imported = mcpjson.read_servers({KEY: shared}, KEY, file)
    imported.unlisted = dict.fromkeys(imported.servers, "ask")  # a person decides per tool
    return imported


def _shared(raw: dict[str, Any]) -> dict[str, Any]:
    """The inverse of `_kilo`, with Kilo's `{env:NAME}` as `${NAME}`."""
    out: dict[str, Any] = {"disabled": raw.get("enabled") is False}
    if raw.get("type") == "remote" or raw.get("url"):
        out["url"] = _plain(str(raw.get("url", "")))
        out["headers"] = {k: _plain(str(v)) for k, v in _mapping(raw.get("headers")).items()}
        return out
    argv = raw.get("command") or []
    argv = [argv] if isinstance(argv, str) else [str(a) for a in argv]
    out["command"] = _plain(argv[0]) if argv else ""
    out["args"] = [_plain(a) for a in argv[1:]]
    out["env"] = {str(k): _plain(str(v)) for k, v in _mapping(raw.get("environment")).items()}
    return out


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _plain(text: str) -> str:
    """Kilo's `{env:NAME}` as bundlectl's `${NAME}`."""
    return _KILO_REF.sub(lambda m: f"${{{m.group(1)}}}", text)


STYLE = mcpjson.Style(key=KEY, ref=_ref, defaults=False, shape=_kilo)
CLIENT = dataclasses.replace(
    mcpjson.client(
        name="kilo",
        title="Kilo Code",
        project_file=CLIENT_FILES["kilo"],
        user_file=lambda: Path(mcpjson.home()) / ".config" / "kilo" / "kilo.json",
        style=STYLE,
        filters=whole_servers_only("Kilo"),
        source=__doc__ or "",
    ),
    read=read,
    jsonc=True,
)
