"""`bundlectl resolve`: the effective servers and what each agent may call."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from bundlectl.cli.describe import endpoint, server_json
from bundlectl.cli.options import Format
from bundlectl.config.fields import rule_data
from bundlectl.config.models import ServerSpec
from bundlectl.config.project import load_project
from bundlectl.errors import UsageError
from bundlectl.mcpio.sandbox import MACHINE_MODE, bwrap, mode_here, profile_for, unavailable
from bundlectl.output import JSON_FORMAT_VERSION, Lazy, RawJson, note, out, stream_json
from bundlectl.policy.catalog import agent_row
from bundlectl.policy.rules import Rule
from bundlectl.resolve.resolved import Resolution, resolve_project
from bundlectl.resolve.sandboxing import writes_from_policy
from bundlectl.servers import builtin_of


def run(config: Path | None, *, agents: list[str], fmt: Format) -> int:
    resolution = resolve_project(load_project(config))
    policy = resolution.policy
    unknown = [a for a in agents if a not in policy.agents]
    if unknown:
        raise UsageError(
            f"unknown agent: {', '.join(unknown)}",
            hint=f"agents: {', '.join(policy.agents) or 'none defined'}",
        )
    data = _data(resolution, agents or policy.agents, encoded=fmt is Format.json)
    if fmt is Format.json:
        stream_json(data, expand=2)  # agent by agent: thousands of agents are never held whole
    else:
        _print(data)
        for line in resolution.merged.notes:
            note(line)
    return 0


def _data(resolution: Resolution, agents: list[str], *, encoded: bool) -> dict[str, Any]:
    """What `resolve` shows. With `encoded`, each agent's rules are JSON text already: an agent
    lists every rule it inherits, so one rule of a long `extends` chain is shown by thousands of
    agents and is encoded once (`RawJson`)."""
    merged, project = resolution.merged, resolution.project
    denies = list(project.config.policy.deny)
    if project.user is not None:
        denies += project.user.config.policy.deny
    catalog = resolution.catalog
    policy = resolution.policy

    def rule_json(rule: Rule) -> dict[str, Any]:
        shown = {
            "effect": rule.effect,
            "rule": rule.pattern,
            "source": str(rule.origin),
            "from_agent": rule.agent,
        }
        if rule.condition is not None:
            shown["condition"] = rule.condition.describe()
        return shown

    texts: dict[int, str] = {}  # id(rule) -> its JSON; the policy keeps every rule alive
    if encoded:
        for spec in policy.set.agents.values():
            for rule in spec.rules:
                texts[id(rule)] = json.dumps(rule_json(rule), ensure_ascii=False)
        for rule in policy.set.global_deny:
            texts[id(rule)] = json.dumps(rule_json(rule), ensure_ascii=False)

    def agent(name: str) -> dict[str, Any]:
        compiled = policy.agent(name)
        row = agent_row(compiled, catalog)
        rules: Any
        if encoded:
            rules = RawJson("[" + ", ".join(map(texts.__getitem__, map(id, compiled.rules))) + "]")
        else:
            rules = [rule_json(r) for r in compiled.rules]
        return {
            "extends": compiled.chain[1:],
            "rules": rules,
            "allow": catalog.names(row.allow),
            "ask": catalog.names(row.ask),
        }

    agent_rows = Lazy(((name, agent(name)) for name in agents), mapping=True)
    return {
        "format_version": JSON_FORMAT_VERSION,
        "bundles": [
            {
                "name": b.manifest.name,
                "version": b.manifest.version,
                "source": b.source.label,
                "user": b not in resolution.own.bundles,
            }
            for b in merged.bundles
        ],
        "servers": {
            name: {
                "bundle": s.bundle,
                "source": s.source,
                "file": s.origin.file,
                "endpoint": endpoint(s.spec),
                **server_json(s.spec),
                "tools": [t.name for t in s.spec.tools],
                **sandbox_of(name, s.spec, resolution),
            }
            for name, s in merged.servers.items()
        },
        "agents": agent_rows,
        "policy": {  # with what a user-level file adds: it can only tighten
            "default": policy.set.default,
            "deny": [rule_data(entry) for entry in denies],
            "pin_tools": policy.set.pin_tools,
            "sandbox": resolution.project.config.policy.sandbox_mode,
        },
        "notes": merged.notes,
    }


def sandbox_of(
    name: str, spec: ServerSpec, resolution: Resolution, agents: list[str] | None = None
) -> dict[str, Any]:
    """A local server's effective sandbox (`policy.sandbox`, `servers.NAME.sandbox`) for
    `agents` (None: every listed agent), as data and as a line a reviewer reads; nothing for a
    remote or built-in server."""
    if spec.transport != "stdio" or builtin_of(spec) is not None:
        return {}
    written = resolution.project.config.policy.sandbox
    mode = mode_here(written)
    drawn = writes_from_policy(resolution, name, agents) if mode != "off" else ()
    profile = profile_for(name, spec, resolution.project.root, mode, drawn)
    if profile is None:
        if spec.sandbox is not None and spec.sandbox.off:
            why = f"off ({spec.sandbox.reason})"
        elif written is not None:
            why = "off (policy.sandbox: off)"
        elif os.environ.get(MACHINE_MODE):
            why = f"off (${MACHINE_MODE}=off on this machine)"
        else:
            why = "off (no sandbox on this system: bubblewrap is Linux's)"
        return {"sandbox": {"said": why}}
    said = profile.described()
    missing = None if profile.container else unavailable(bwrap())
    if missing is not None:
        how = "it is not started" if profile.required else "it runs unsandboxed"
        said += f"; {missing}, so {how}"
    return {"sandbox": {**profile.to_json(), "said": said}}


def _print(data: dict[str, Any]) -> None:
    out("bundles:")
    for b in data["bundles"]:
        user = ", required by the user-level file" if b["user"] else ""
        out(f"  {b['name']} {b['version']} ({b['source']}{user})")
    if not data["bundles"]:
        out("  (none)")
    out("servers:")
    for name, s in data["servers"].items():
        disabled = "  [disabled]" if s.get("disabled") else ""
        out(f"  {name}  [{s['source']}]  {s['endpoint']}{disabled}")
        for key in ("env", "headers"):
            if s.get(key):
                out(f"    {key}: " + ", ".join(f"{k}={v}" for k, v in s[key].items()))
        out(f"    tools: {', '.join(s['tools']) or '(none declared)'}")
        if "sandbox" in s:
            out(f"    sandbox: {s['sandbox']['said']}")
    out("agents:")
    for name, a in data["agents"].items:
        chain = f" (extends {', '.join(a['extends'])})" if a["extends"] else ""
        out(f"  {name}{chain}")
        for rule in a["rules"]:
            condition = f" if {rule['condition']}" if rule.get("condition") else ""
            out(f"    {rule['effect']:<5}  {rule['rule']}{condition}  ({rule['source']})")
        out(f"    may call: {', '.join(a['allow']) or 'nothing'}")
        if a["ask"]:
            out(f"    after confirmation: {', '.join(a['ask'])}")
    p = data["policy"]
    out(
        f"policy: default {p['default']}; deny {', '.join(map(_entry_text, p['deny'])) or '-'}; "
        f"pin_tools {str(p['pin_tools']).lower()}; sandbox {p['sandbox']}"
    )


def _entry_text(entry: Any) -> str:
    """A rule entry as written: a pattern, or a pattern with its conditions."""
    if isinstance(entry, str):
        return entry
    conditions = {key: value for key, value in entry.items() if key != "tool"}
    return f"{entry.get('tool')} if {json.dumps(conditions, ensure_ascii=False)}"
