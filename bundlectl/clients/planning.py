"""What an export carries: the servers an agent may use, each with the agent's decision on every
tool of its catalog — the declared one, or the live one the servers were asked for (`--live`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bundlectl.clients.base import Export, ServerPlan
from bundlectl.config.models import ServerSpec
from bundlectl.config.secretscan import secret_variables
from bundlectl.mcpio.launchers import as_exec_runs
from bundlectl.mcpio.sandbox import contained, profile_for
from bundlectl.resolve.resolved import Resolution
from bundlectl.resolve.sandboxing import writes_from_policy
from bundlectl.servers import builtin_of


def undeclared(resolution: Resolution, agent: str) -> dict[str, ServerSpec]:
    """The enabled servers without a declared catalog that the agent could use a tool of: what
    `--live` asks, and what a direct export or codegen cannot list without it."""
    return {name: resolution.merged.servers[name].spec for name in resolution.uncatalogued(agent)}


def unchecked(resolution: Resolution, agent: str) -> dict[str, ServerSpec]:
    """The enabled servers the agent could use a tool of, and only some of them, whose catalog
    is not known to be the server's own (none declared, or declared by hand or a bundle rather
    than built in): what `export --live` asks, so the export matches the tools they really
    have."""
    compiled = resolution.policy.agent(agent)
    return {
        name: merged.spec
        for name, merged in resolution.merged.servers.items()
        if not merged.spec.disabled
        and compiled.may_reach(name)
        and builtin_of(merged.spec) is None
        and (not merged.spec.tools or compiled.whole(name) is None)
    }


def plan(resolution: Resolution, agent: str, live: Mapping[str, list[Any]] | None = None) -> Export:
    """The servers `agent` may use. A server whose catalog is not known (it declares none and
    `live` has none for it) is kept when some tool of it could be allowed: the client then has to
    express the policy without a catalog, which only a rule over the whole server can."""
    compiled = resolution.policy.agent(agent)
    live = live or {}
    secret_inputs = {need.name for need in resolution.merged.env if need.spec.secret}
    servers = []
    conditional: list[str] = []
    cannot: list[str] = []
    sandboxed: list[str] = []
    sandbox = resolution.project.config.policy.sandbox_mode  # the project's, not this machine's
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
        conditional.extend(
            f"{rule.label} ({rule.origin})" for rule in compiled.conditional_rules(name)
        )
        spec, missing = as_exec_runs(spec)  # as `exec` starts it here (#56)
        if missing is not None:
            cannot.append(f"server {name!r} needs {missing} on this machine")
        drawn = writes_from_policy(resolution, name, [agent]) if sandbox != "off" else ()
        profile = profile_for(name, spec, resolution.project.root, sandbox, drawn)
        if profile is not None and profile.container:  # its runtime isolates it: the client's
            command = spec.command or ""  # entry starts it with the profile's options
            spec = spec.model_copy(update={"args": contained(profile, [command, *spec.args])[1:]})
        elif profile is not None:
            sandboxed.append(name)
        secret = secret_variables([*spec.env.items(), *spec.headers.items()], secret_inputs)
        plan = ServerPlan(
            name,
            spec,
            decisions,
            whole,
            frozenset(secret),
            live=name in live,
            builtin=builtin_of(spec) is not None,
            unlisted_denied=whole is None and compiled.denies_unlisted(name, tools),
        )
        servers.append(plan)
    project = resolution.project
    return Export(
        agent,
        servers,
        project.config_path,
        project.root,
        conditional=conditional,
        cannot_start=cannot,
        sandboxed=sandboxed,
    )
