"""Merge resolved bundles and the project's own entries into one set of servers and agents. Pure.

The project's server wins over a bundle's server of the same name (a note says so); two bundles
defining one server name differently is a conflict. Bundle agent defaults sit under the project's
agents: the project's entry for an agent replaces them; two bundles' defaults for one agent unite.
The user-level file, merged the same way with its own bundles, sits under all of that (`overlay`):
what the project has by a name, from its file or its bundles, wins.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from bundlectl.config.fields import ConditionalRule
from bundlectl.config.local import LocalLayer
from bundlectl.config.models import AgentRules, EnvInput, ProjectConfig, ServerSpec
from bundlectl.config.registry import LoadedManifest
from bundlectl.config.yamlio import YamlDoc, YamlPath
from bundlectl.errors import ResolutionError
from bundlectl.policy.rules import AgentSpec, Effect, Origin, PolicySet, Rule


@dataclass(frozen=True)
class MergedServer:
    """A server in the effective configuration, and where it came from."""

    name: str
    spec: ServerSpec
    bundle: str | None  # "github@1.1.0", or None for the project's own
    origin: Origin
    user: bool = False  # from the user-level bundlectl.yaml (or a bundle only it requires)

    @property
    def source(self) -> str:
        """Where it comes from, as `resolve` shows it."""
        if self.user:
            return f"{self.bundle}, user" if self.bundle else f"user: {self.origin.file}"
        return self.bundle or "bundlectl.yaml"


@dataclass(frozen=True)
class EnvRequirement:
    """An input a resolved bundle asks for."""

    name: str
    spec: EnvInput
    bundle: str


@dataclass
class Merged:
    """The effective configuration of a project."""

    bundles: list[LoadedManifest]
    servers: dict[str, MergedServer]
    agents: dict[str, AgentSpec]
    env: list[EnvRequirement]
    notes: list[str] = field(default_factory=list)
    # Servers two bundles define differently: (server, first bundle, second bundle).
    collisions: list[tuple[str, str, str]] = field(default_factory=list)


def origin_at(doc: YamlDoc, path: YamlPath, bundle: str | None = None) -> Origin:
    span = doc.span(path)
    return Origin(doc.file, span.line, span.column, bundle)


def policy_rule(
    entry: str | ConditionalRule, effect: Effect, origin: Origin, agent: str | None
) -> Rule:
    """The engine's rule for a rule entry of a file (a pattern, or a pattern with conditions)."""
    if isinstance(entry, str):
        return Rule(entry, effect, origin, agent)
    return Rule(
        entry.tool,
        effect,
        origin,
        agent,
        entry.condition,
        entry.approve is not None,
        entry.approvals,
    )


def agent_spec(
    name: str, rules: AgentRules, doc: YamlDoc, base: YamlPath, bundle: str | None = None
) -> AgentSpec:
    """An AgentSpec whose every rule and parent knows the file position it was written at."""
    path = (*base, name)
    built: list[Rule] = []
    effects: tuple[Effect, ...] = ("allow", "ask", "deny")
    for effect in effects:
        entries: list[str | ConditionalRule] = getattr(rules, effect)
        typed: Effect = effect
        built += [
            policy_rule(entry, typed, origin_at(doc, (*path, effect, i), bundle), name)
            for i, entry in enumerate(entries)
        ]
    parents = tuple(
        (p, origin_at(doc, (*path, "extends", i), bundle)) for i, p in enumerate(rules.extends)
    )
    return AgentSpec(name, origin_at(doc, path, bundle), tuple(built), parents)


def merge(config: ProjectConfig, doc: YamlDoc, bundles: list[LoadedManifest]) -> Merged:
    """Merge resolved bundles (in resolution order) with the project's entries."""
    servers: dict[str, MergedServer] = {}
    notes: list[str] = []
    collisions: list[tuple[str, str, str]] = []
    for loaded in bundles:
        for name, spec in loaded.manifest.servers.items():
            incoming = MergedServer(
                name, spec, loaded.pin, origin_at(loaded.doc, ("servers", name), loaded.pin)
            )
            existing = servers.get(name)
            if existing is not None and existing.spec != spec and name not in config.servers:
                collisions.append((name, existing.bundle or "", loaded.pin))
            servers.setdefault(name, incoming)
    for name, spec in config.servers.items():
        if name in servers:
            notes.append(
                f"server {name!r} from bundlectl.yaml replaces the one from bundle "
                f"{servers[name].bundle}"
            )
        servers[name] = MergedServer(name, spec, None, origin_at(doc, ("servers", name)))

    agents: dict[str, AgentSpec] = {}
    for loaded in bundles:
        for name, rules in loaded.manifest.agents.items():
            suggested = agent_spec(name, rules, loaded.doc, ("agents",), loaded.pin)
            if name in agents:
                prior = agents[name]
                suggested = AgentSpec(
                    name,
                    prior.origin,
                    prior.rules + suggested.rules,
                    prior.extends + suggested.extends,
                )
            agents[name] = suggested
    for name, rules in config.agents.items():
        if name in agents:
            notes.append(
                f"agent {name!r} in bundlectl.yaml replaces the defaults of "
                f"bundle {agents[name].origin.bundle}"
            )
        agents[name] = agent_spec(name, rules, doc, ("agents",))

    env = [
        EnvRequirement(key, spec, loaded.pin)
        for loaded in bundles
        for key, spec in loaded.manifest.env.items()
    ]
    return Merged(
        bundles, dict(sorted(servers.items())), dict(sorted(agents.items())), env, notes, collisions
    )


def overlay(project: Merged, user: Merged, user_file: str) -> Merged:
    """The project's merged configuration with the user-level file's under it: servers and agents
    the project has by that name (from its file or its bundles) win, each with a note."""
    servers = dict(project.servers)
    agents = dict(project.agents)
    notes = list(project.notes)
    for name, server in user.servers.items():
        if name in servers:
            notes.append(f"server {name!r} of {user_file} is hidden by the project's")
        else:
            servers[name] = replace(server, user=True)
    for name, agent in user.agents.items():
        if name in agents:
            notes.append(f"agent {name!r} of {user_file} is hidden by the project's")
        else:
            agents[name] = agent
    return Merged(
        project.bundles + user.bundles,
        dict(sorted(servers.items())),
        dict(sorted(agents.items())),
        project.env + user.env,
        notes + user.notes,
        project.collisions + user.collisions,
    )


def local_agents(merged: Merged, local: LocalLayer) -> tuple[dict[str, AgentSpec], list[str]]:
    """`bundlectl.local.yaml`'s rules as agents of their own, each rule knowing its file and
    line: what confirms an `ask` in advance (`Pipeline.admission`), never a grant of its own.
    An agent the project does not list gets none (a note says so)."""
    agents: dict[str, AgentSpec] = {}
    notes: list[str] = []
    for name, rules in local.config.agents.items():
        if name not in merged.agents:
            notes.append(
                f"{local.doc.file}: agent {name!r} is not listed in the project, so its local "
                "rules are ignored"
            )
            continue
        added = tuple(
            policy_rule(entry, "allow", origin_at(local.doc, ("agents", name, "allow", i)), name)
            for i, entry in enumerate(rules.allow)
        )
        agents[name] = AgentSpec(name, origin_at(local.doc, ("agents", name)), added, ())
    return agents, notes


def collision_error(merged: Merged) -> ResolutionError | None:
    """The first server two bundles define differently, as an error (exit 1)."""
    if not merged.collisions:
        return None
    name, first, second = merged.collisions[0]
    return ResolutionError(
        f"server {name!r} is defined differently by bundles {first} and {second}",
        hint=f"define {name!r} under servers: in bundlectl.yaml to choose one, "
        "or drop one of the bundles",
    )


def _written(doc: YamlDoc, key: str) -> bool:
    policy_data = doc.data.get("policy") if isinstance(doc.data, dict) else None
    return isinstance(policy_data, dict) and key in policy_data


def policy_set(
    config: ProjectConfig,
    doc: YamlDoc,
    merged: Merged,
    locked_tools: frozenset[tuple[str, str]] | None,
    user: tuple[ProjectConfig, YamlDoc] | None = None,
) -> PolicySet:
    """The policy engine's input for this project. A user-level file's `policy` only tightens:
    its denies are added, its `default` counts when it is `deny`, its `pin_tools` when true."""
    default = config.policy.default
    default_origin = origin_at(doc, ("policy", "default")) if _written(doc, "default") else None
    global_deny = tuple(
        policy_rule(p, "deny", origin_at(doc, ("policy", "deny", i)), None)
        for i, p in enumerate(config.policy.deny)
    )
    pin_tools = config.policy.pin_tools
    if user is not None:
        user_config, user_doc = user
        global_deny += tuple(
            policy_rule(p, "deny", origin_at(user_doc, ("policy", "deny", i)), None)
            for i, p in enumerate(user_config.policy.deny)
        )
        if user_config.policy.default == "deny" and default == "allow":
            default = "deny"
            default_origin = origin_at(user_doc, ("policy", "default"))
        pin_tools = pin_tools or user_config.policy.pin_tools
    return PolicySet(
        agents=merged.agents,
        default=default,
        default_origin=default_origin,
        global_deny=global_deny,
        pin_tools=pin_tools,
        locked_tools=locked_tools,
        pins=dict(config.policy.pins),
        sandbox=config.policy.sandbox,
    )
