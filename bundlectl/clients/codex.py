"""Codex: `.codex/config.toml` in a trusted project (`~/.codex/config.toml` for the user).

Source: OpenAI Codex documentation, "Model Context Protocol" and the configuration reference
(developers.openai.com/codex/mcp, github.com/openai/codex docs/config.md), read 2026-11-23: one
`[mcp_servers.NAME]` table per server with `command`, `args`, `env` (literal values), `env_vars`
(names of variables passed through from Codex's own environment), `cwd`, or `url` with
`bearer_token_env_var` / `env_http_headers` for streamable HTTP; `enabled_tools` (an allowlist)
and `disabled_tools`. Codex does not expand `${VAR}`, so a reference is written only where it
can pass the variable through (`env = ${SAME_NAME}` → `env_vars`). Codex 0.169 asks per tool:
`[mcp_servers.NAME.tools.TOOL] approval_mode = "auto" | "prompt" | "writes" | "approve"` and a
server-wide `default_tools_approval_mode` (checked with the real client: a `prompt` tool's call
in `codex exec` is refused, "requires approval"). The file is edited with tomlkit, so comments,
the order of everything else and the keys bundlectl does not own are kept.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bundlectl.clients import mcpjson
from bundlectl.clients.base import (
    GATEWAY_ENTRY,
    Client,
    Export,
    Imported,
    Misfit,
    ServerPlan,
    gateway_agent,
    gateway_spec,
    references,
)
from bundlectl.errors import InputFileError, Problem
from bundlectl.policy.governing import CLIENT_FILES

PROMPT = "prompt"
DEFAULT_MODE = "default_tools_approval_mode"
# The keys of a server's table bundlectl writes; any other (`startup_timeout_sec`,
# `tool_timeout_sec`, `required`, ...) is the user's and stays. Of a `[...tools.T]` table,
# bundlectl owns `approval_mode` only.
OWNED = {
    "command",
    "args",
    "env",
    "env_vars",
    "cwd",
    "url",
    "bearer_token_env_var",
    "env_http_headers",
    "enabled_tools",
    "disabled_tools",
    DEFAULT_MODE,
}
# Codex's approval modes: which need a person (`writes`: for tools that are not read-only).
ASKS = {"prompt", "writes"}


def _load(text: str, file: str) -> Any:
    import tomlkit
    from tomlkit.exceptions import ParseError

    try:
        return tomlkit.parse(text)
    except ParseError as exc:
        problem = Problem(file, exc.line, exc.col, f"TOML syntax error: {exc}")
        raise InputFileError([problem], hint="fix the TOML, then run the command again") from None


def _entry(plan: ServerPlan, misfits: list[Misfit]) -> dict[str, Any]:
    spec, name = plan.spec, plan.name

    def literal(text: str, where: str) -> str:
        if references(text):
            misfits.append(
                Misfit(f"servers.{name}.{where}", "Codex does not expand ${VAR} references")
            )
        return text

    if spec.transport == "stdio":
        out = _stdio(spec, literal)
    elif spec.transport == "streamable-http":
        out = _remote(spec, literal)
    else:
        out = {}
        misfits.append(Misfit(f"servers.{name}.transport", "Codex has no SSE transport"))
    _filter(plan, out, misfits)
    return out


def _stdio(spec: Any, literal: Callable[[str, str], str]) -> dict[str, Any]:
    out: dict[str, Any] = {"command": literal(spec.command or "", "command")}
    if spec.args:
        out["args"] = [literal(a, f"args[{i}]") for i, a in enumerate(spec.args)]
    env: dict[str, str] = {}
    passed: list[str] = []
    for key, value in spec.env.items():
        if value == f"${{{key}}}":
            passed.append(key)  # the same variable, passed through from Codex's environment
        else:
            env[key] = literal(value, f"env.{key}")
    if env:
        out["env"] = env
    if passed:
        out["env_vars"] = passed
    if spec.cwd:
        out["cwd"] = literal(spec.cwd, "cwd")
    return out


def _remote(spec: Any, literal: Callable[[str, str], str]) -> dict[str, Any]:
    out: dict[str, Any] = {"url": literal(spec.url or "", "url")}
    for key, value in spec.headers.items():
        found = references(value)
        if key.lower() == "authorization" and value.startswith("Bearer ") and len(found) == 1:
            out["bearer_token_env_var"] = found[0][0]
        else:
            out.setdefault("env_http_headers", {})[key] = literal(value, f"headers.{key}")
    return out


def _filter(plan: ServerPlan, out: dict[str, Any], misfits: list[Misfit]) -> None:
    """allow → `enabled_tools` (an allowlist: anything else, declared or not, is off); ask →
    enabled too, with `[mcp_servers.S.tools.T] approval_mode = "prompt"`; a whole server asked
    about → `default_tools_approval_mode = "prompt"`."""
    if plan.whole is not None:
        if plan.whole == "ask":
            out[DEFAULT_MODE] = PROMPT
        return
    if not plan.decisions:
        misfits.extend(Misfit(label, mcpjson.NO_CATALOG) for label in mcpjson.partial_rules(plan))
        return
    asked = plan.tools("ask")
    out["enabled_tools"] = [*plan.tools("allow"), *asked]
    if asked:
        out["tools"] = {tool: {"approval_mode": PROMPT} for tool in asked}


def write(
    target: Path,
    current: Callable[[Path], str],
    export: Export,
    managed: set[str],
    gateway: bool,
) -> tuple[dict[Path, str], list[Misfit]]:
    import tomlkit

    doc = _load(current(target), str(target))
    misfits: list[Misfit] = []
    wanted: dict[str, dict[str, Any]] = {}
    if gateway:
        wanted[GATEWAY_ENTRY] = gateway_spec(export, absolute=False)
        if export.variables:  # Codex passes only the variables it is told to
            wanted[GATEWAY_ENTRY]["env_vars"] = export.variables
    else:
        for plan in export.servers:
            wanted[plan.name] = _entry(plan, misfits)
    servers = doc.get("mcp_servers")
    if servers is None:
        servers = tomlkit.table(is_super_table=True)
        doc["mcp_servers"] = servers
    for name in [n for n in list(servers) if n in (managed | {GATEWAY_ENTRY}) and n not in wanted]:
        del servers[name]
    for name, values in wanted.items():
        table = servers.get(name)
        if table is None:
            table = tomlkit.table()
            servers[name] = table
        _update(table, values)
    return {target: _tidy(tomlkit.dumps(doc))}, misfits


def _tidy(text: str) -> str:
    """One blank line before each server's table and none at the end: tomlkit leaves the blank
    lines of a removed table behind, and switching between direct and gateway piled them up."""
    text = re.sub(r"\n{3,}(?=\[mcp_servers[.\]])", "\n\n", text)
    return text.rstrip("\n") + "\n" if text.strip() else text


def _update(table: Any, values: dict[str, Any]) -> None:
    """A server's table set to `values` in the keys bundlectl owns; the user's keys, and the
    user's settings of a tool other than its approval, stay as they are."""
    import tomlkit

    for key in [k for k in list(table) if k in OWNED and k not in values]:
        del table[key]
    for key, value in values.items():
        if key != "tools" and table.get(key) != value:
            table[key] = value
    asked: dict[str, Any] = values.get("tools", {})
    tools = table.get("tools")
    if tools is None and asked:
        tools = tomlkit.table(is_super_table=True)
        table["tools"] = tools
    for tool in list(tools or {}):
        settings = tools[tool]
        if tool not in asked and hasattr(settings, "get") and "approval_mode" in settings:
            del settings["approval_mode"]
            if not settings:
                del tools[tool]
    for tool, settings in asked.items():
        current = tools.get(tool)
        if current is None:
            current = tomlkit.table()
            current["approval_mode"] = settings["approval_mode"]
            current.add(tomlkit.nl())  # a blank line before the next table, as Codex writes
            tools[tool] = current
        else:
            current["approval_mode"] = settings["approval_mode"]
    if tools is not None and not tools:
        del table["tools"]


def read(text: str, file: str) -> Imported:
    doc = _load(text, file).unwrap()
    imported = Imported()
    for name, raw in (doc.get("mcp_servers") or {}).items():
        served = gateway_agent(raw)
        if served is not None:
            imported.gateways[name] = served
        if name == GATEWAY_ENTRY or not isinstance(raw, dict) or served is not None:
            continue
        if raw.get("url"):
            spec = _read_remote(raw, imported, name)
        else:
            spec = _read_stdio(raw, imported, name)
        if raw.get("enabled") is False:
            spec["disabled"] = True
        imported.servers[name] = spec
        _read_rules(name, raw, imported)
    return imported


def _read_rules(name: str, raw: dict[str, Any], imported: Imported) -> None:
    """`enabled_tools` / `disabled_tools` and the approval modes as rules: a tool that needs a
    person (`prompt`, `writes`) is asked about; `approve` and `auto` (Codex's default) call
    without asking."""
    server_mode = raw.get(DEFAULT_MODE)
    modes = {
        tool: settings.get("approval_mode", server_mode)
        for tool, settings in (raw.get("tools") or {}).items()
        if isinstance(settings, dict)
    }
    enabled = raw.get("enabled_tools")
    if enabled is None:
        getattr(imported, "ask" if server_mode in ASKS else "allow").append(f"{name}.*")
        # a tool named with its own mode differs from the server's
        for tool, mode in modes.items():
            if (mode in ASKS) != (server_mode in ASKS):
                getattr(imported, "ask" if mode in ASKS else "allow").append(f"{name}.{tool}")
    else:
        for tool in enabled:
            mode = modes.get(tool, server_mode)
            getattr(imported, "ask" if mode in ASKS else "allow").append(f"{name}.{tool}")
    imported.deny.extend(f"{name}.{tool}" for tool in raw.get("disabled_tools") or [])


def _read_remote(raw: dict[str, Any], imported: Imported, name: str) -> dict[str, Any]:
    url = mcpjson.secret_url(str(raw["url"]), imported, name)
    spec: dict[str, Any] = {"transport": "streamable-http", "url": url}
    headers = dict(raw.get("env_http_headers") or {})
    if raw.get("bearer_token_env_var"):
        headers["Authorization"] = f"Bearer ${{{raw['bearer_token_env_var']}}}"
    if headers:
        spec["headers"] = headers
    return spec


def _read_stdio(raw: dict[str, Any], imported: Imported, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"command": str(raw.get("command", ""))}
    if raw.get("args"):
        spec["args"] = mcpjson.secret_args([str(a) for a in raw["args"]], imported, name)
    env = {
        k: mcpjson.literal_secret(k, str(v), imported, name)
        for k, v in (raw.get("env") or {}).items()
    }
    for var in raw.get("env_vars") or []:
        env[var] = f"${{{var}}}"
    if env:
        spec["env"] = env
    if raw.get("cwd"):
        spec["cwd"] = raw["cwd"]
    return spec


CLIENT = Client(
    name="codex",
    title="Codex",
    project_file=CLIENT_FILES["codex"],
    user_file=lambda: Path(mcpjson.home()) / ".codex" / "config.toml",
    write=write,
    read=read,
    source=__doc__ or "",
)
