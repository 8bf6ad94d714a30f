"""What an export carries: the servers an agent may use, each with the agent's decision on every
tool of its catalog — the declared one, or the live one the servers were asked for (`--live`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bundlectl.clients.base import Export, ServerPlan
from bundlectl.expand import references
from bundlectl.resolution import Resolution
from bundlectl.secretscan import SECRET_NAME


def plan(resolution: Resolution, agent: str, live: Mapping[str, list[Any]] | None = None) -> Export:
    """The servers `agent` may use. A server whose catalog is not known (it declares none and
    `live` has none for it) is kept when some tool of it could be allowed: the client then has to
    express the policy without a catalog, which only a rule over the whole server can."""
    compiled = resolution.policy.agent(agent)
    live = live or {}
    secret_inputs = {need.name for need in resolution.merged.env if need.spec.secret}
    servers = []
    for name, merged in resolution.merged.servers.items():
        spec = merged.spec
        if spec.disabled or not compiled.may_reach(name):
            continue
        known = name in live or bool(spec.tools)
        tools = [t.name for t in live[name]] if name in live else [t.name for t in spec.tools]
        decisions = [compiled.decide(name, tool, interactive=True) for tool in tools]
        whole = compiled.whole(name)
        if known and whole is None and all(d.effect == "deny" for d in decisions):
            continue  # a known catalog, nothing of it usable
        values = [*spec.env.items(), *spec.headers.items()]
        secret = {
            var
            for key, value in values
            for var in references(value)
            if var in secret_inputs or SECRET_NAME.search(key) or SECRET_NAME.search(var)
        }
        plan = ServerPlan(name, spec, decisions, whole, frozenset(secret), live=name in live)
        servers.append(plan)
    project = resolution.project
    return Export(agent, servers, project.config_path, project.root)
