"""agix's `config.yaml` (the seeds' own tool) read as a client file: `bundles:` plus
`tools: {servers, agents, max_iterations}`. `bundlectl import agix FILE` uses it."""

from __future__ import annotations

from typing import Any

from bundlectl.clients.base import Imported
from bundlectl.clients.mcpjson import literal_secret, secret_args, secret_url
from bundlectl.config.yamlio import parse_yaml
from bundlectl.errors import InputFileError, Problem


def read_agix(text: str, file: str) -> tuple[Imported, list[str]]:
    """agix's `config.yaml`: `bundles:` plus `tools: {servers, agents, max_iterations}`, with
    `env` as a list of `KEY=VALUE`. Its unlisted agents get every tool: spelled out as
    `policy.default: allow` (which lint then warns about)."""

    doc = parse_yaml(text, file)
    if doc.problems:
        raise InputFileError(doc.problems, hint="fix the YAML, then import again")
    data = doc.data if isinstance(doc.data, dict) else {}
    imported = Imported(agents={}, default_allow=True)
    tools = data.get("tools") or {}
    for name, raw in (tools.get("servers") or {}).items():
        if not isinstance(raw, dict):
            continue
        spec: dict[str, Any] = {}
        if raw.get("url"):
            spec["transport"] = raw.get("transport", "streamable-http")
            spec["url"] = secret_url(str(raw["url"]), imported, name)
        else:
            spec["command"] = str(raw.get("command", ""))
            if raw.get("args"):
                spec["args"] = secret_args([str(a) for a in raw["args"]], imported, name)
        env = _agix_env(raw.get("env") or {}, doc, ("tools", "servers", name, "env"))
        if env:
            spec["env"] = {
                str(k): literal_secret(str(k), str(v), imported, name) for k, v in env.items()
            }
        imported.servers[str(name)] = spec
    assert imported.agents is not None
    for name, raw in (tools.get("agents") or {}).items():
        if isinstance(raw, dict):
            imported.agents[str(name)] = {
                effect: [str(r) for r in raw.get(effect) or []]
                for effect in ("allow", "ask", "deny")
            }
    notes = []
    if "max_iterations" in tools:
        notes.append(
            f"tools.max_iterations ({tools['max_iterations']}) is agix's loop limit; bundlectl "
            "has no agent loop, so it is not carried over"
        )
    imported.bundles = [str(b) for b in data.get("bundles") or []]
    return imported, notes


def _agix_env(env: Any, doc: Any, where: tuple[Any, ...]) -> dict[str, Any]:
    """agix writes `env` as a list of `KEY=VALUE`; bundlectl as a map."""
    if not isinstance(env, list):
        return dict(env)
    pairs = {}
    for index, item in enumerate(env):
        key, eq, value = str(item).partition("=")
        if not eq:
            span = doc.span((*where, index))
            problem = Problem(doc.file, span.line, span.column, f"{item!r} is not KEY=VALUE")
            raise InputFileError([problem], hint="write each env entry as KEY=VALUE")
        pairs[key] = value
    return pairs
