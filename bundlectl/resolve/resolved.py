"""A project resolved: bundle versions chosen, servers and agents merged, the lock that implies
and the policy engine over it. Apart from `project` (the config and its registries) so that the
commands that only read a project (`list`, `show`) load neither the resolver nor the policy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from bundlectl import servers
from bundlectl.config import paths
from bundlectl.config.fsio import write_project_file
from bundlectl.config.lockfile import digest_json, dump_lock, locked_tools
from bundlectl.config.models import LockedBundle, LockedServer, LockFile, ProjectConfig
from bundlectl.config.project import Project
from bundlectl.config.requirements import requirement_name
from bundlectl.errors import InputFileError, UsageError
from bundlectl.policy.catalog import Catalog, ToolRef
from bundlectl.policy.engine import Policy
from bundlectl.policy.inheritance import canonical_policy, check_extends
from bundlectl.policy.patterns import name_clashes
from bundlectl.policy.rules import DEFAULT_AGENT, AgentSpec, Decision, PolicySet, Rule
from bundlectl.resolve.merge import (
    Merged,
    MergedServer,
    collision_error,
    local_agents,
    merge,
    overlay,
    policy_set,
)
from bundlectl.resolve.versions import Constraint, constraint, resolve
from bundlectl.suggest import Suggester

if TYPE_CHECKING:
    from bundlectl.policy.conditions import PathReader


@dataclass
class Resolution:
    """A project resolved: versions, merged servers and agents, the lock it implies."""

    project: Project
    merged: Merged
    # The project without the user-level file: what the lock records (the same object as
    # `merged` when there is no user-level file).
    own: Merged
    # `bundlectl.local.yaml`'s rules by agent: they confirm an `ask` in advance, never more.
    local: Mapping[str, AgentSpec] = field(default_factory=dict)

    @cached_property
    def local_policy(self) -> Policy | None:
        """The engine over the local rules alone (default deny): an `allow` from it is an `ask`
        of the project's policy confirmed in advance. None: no local rules."""
        if not self.local:
            return None
        return Policy(PolicySet(agents=self.local, default="deny"))

    def confirmed_in_advance(
        self, decision: Decision, arguments: Mapping[str, Any] | None, paths: PathReader | None
    ) -> Rule | None:
        """The local rule ("always allow") that answers this `ask` in advance — its tool and
        conditions hold for these arguments — or None."""
        local = self.local_policy
        if decision.matched_effect != "ask" or local is None or decision.agent not in self.local:
            return None
        here = local.agent(decision.agent).decide(
            decision.server, decision.tool, arguments=arguments, paths=paths
        )
        return here.rule if here.effect == "allow" else None

    @cached_property
    def lock(self) -> LockFile:
        """The lock this resolution implies (built when asked: digesting a large policy takes a
        while, and `matrix` or `tools` never need it). The user-level file is never part of it:
        the lock is the project's, shared by everyone who checks it out."""
        unpinned = policy_set(self.project.config, self.project.doc, self.own, None)
        return build_lock(self.project.config, self.own, unpinned)

    @cached_property
    def policy(self) -> Policy:
        """The policy engine, with `pin_tools` judged against the lock on disk."""
        on_disk = self.project.lock
        pinned = locked_tools(on_disk if on_disk is not None else self.lock)
        if pinned is not None:  # and the tools a person reviewed since (renamed, moved)
            local = self.project.local
            names = {*self.project.config.policy.pins, *(local.config.pins if local else ())}
            pinned |= {(n.split(".", 1)[0], n.split(".", 1)[1]) for n in names}
        user = self.project.user
        layer = (user.config, user.doc) if user is not None else None
        return Policy(policy_set(self.project.config, self.project.doc, self.merged, pinned, layer))

    def path_reader(self, server: str) -> PathReader | None:
        """How `server` reads a path argument, for `{path: }` conditions (SPEC 10): a built-in
        server's own reading (links resolved below its root); None: lexically, as any
        third-party server's path is judged."""
        merged = self.merged.servers.get(server)
        if merged is None or servers.builtin_of(merged.spec) is None:
            return None
        return servers.path_reader(servers.root_of(merged.spec, self.project.root))

    def write_lock(self) -> None:
        """Write the lock this resolution implies (call under `fsio.project_lock`)."""
        write_project_file(self.project.lock_path, dump_lock(self.lock))

    @cached_property
    def catalog(self) -> Catalog:
        """Every declared tool of every enabled server."""
        return Catalog(
            ToolRef(name, tool.name, tool)
            for name, server in self.merged.servers.items()
            if not server.spec.disabled
            for tool in server.spec.tools
        )

    def server(self, name: str) -> MergedServer:
        """The resolved server `name`; a usage error naming the closest and every one when
        there is none (a name the user typed: `exec`, `tools --server`, `read`, `prompt`)."""
        servers = self.merged.servers
        if name in servers:
            return servers[name]
        close = Suggester(servers).closest(name)
        raise UsageError(
            f"no server {name!r} in the resolved configuration"
            + (f"; did you mean {close[0]!r}?" if close else ""),
            hint=f"servers: {', '.join(servers) or 'none'}",
        )

    def uncatalogued(self, agent: str | None = None) -> list[str]:
        """The enabled servers with no declared tools (that `agent` could use a tool of):
        `catalog` has nothing of theirs, so what lists it must say so."""
        compiled = self.policy.agent(agent) if agent is not None else None
        return [
            name
            for name, server in self.merged.servers.items()
            if not server.spec.disabled
            and not server.spec.tools
            and (compiled is None or compiled.may_reach(name))
        ]

    def name_clashes(
        self, naming: str | None = None
    ) -> list[tuple[str, tuple[str, str], tuple[str, str]]]:
        """Gateway names that two declared tools would share, with `naming` (default: the
        config's `gateway.names`): (name, first (server, tool), second)."""
        chosen = naming or self.project.config.gateway.names
        return name_clashes(((t.server, t.tool) for t in self.catalog.tools), chosen)


def resolve_project(
    project: Project,
    *,
    upgrade: set[str] | None = None,
    use_lock: bool = True,
    strict: bool = True,
) -> Resolution:
    """Resolve the project's bundles (preferring the lock's pins) and merge everything."""
    if strict:  # lint reports these itself, as findings, and carries on
        problems = project.registry_problems()
        if problems:
            raise InputFileError(problems, hint="fix the registries and run the command again")
        unknown = project.unknown_bundles()
        if unknown:  # the file names what is not there: bad input (exit 2), every one listed
            raise InputFileError(unknown)
    prefer: dict[str, Version] = {}
    if use_lock and project.lock is not None:
        prefer = {name: Version(b.version) for name, b in project.lock.bundles.items()}
    wanted = [constraint(text, project.display) for text in project.config.bundles]
    versions = resolve(wanted, project.registry, prefer=prefer, upgrade=upgrade)
    bundles = [project.registry.get(name, version) for name, version in versions.items()]
    merged = merge(project.config, project.doc, bundles)
    builtin = paths.builtin_registry_dir()
    merged.notes.extend(
        f"bundle {b.manifest.name!r} comes from registry {b.source.label}, which hides the "
        f"built-in bundle {b.manifest.name!r}"
        for b in bundles
        if b.source.label != "builtin" and (builtin / b.manifest.name).is_dir()
    )
    own = merged
    if project.user is not None:
        merged = _with_user(project, versions, merged)
    local: dict[str, AgentSpec] = {}
    if project.local is not None:
        local, notes = local_agents(merged, project.local)
        merged.notes.extend(notes)
    if strict:
        collision = collision_error(merged)
        if collision is not None:
            raise collision
        check_extends(merged.agents)
        unmatched_default(project, merged)
    return Resolution(project, merged, own, local)


def unmatched_default(project: Project, merged: Merged) -> None:
    """`gateway.auth.unmatched: default` serves strangers as agent `default`: refused when an
    agent of that name comes from a bundle's defaults or the user-level file (the project's own
    file is refused as it loads), naming both (#52 item 2)."""
    auth = project.config.gateway.auth
    agent = merged.agents.get(DEFAULT_AGENT)
    if auth is None or auth.unmatched != "default" or agent is None:
        return
    if DEFAULT_AGENT in project.config.agents:
        return  # the project's own file: `config_problems` refused it with both positions
    where = (
        f"the agent defaults of bundle {agent.origin.bundle} ({agent.origin.position}) list"
        if agent.origin.bundle
        else f"the user-level file ({agent.origin.position}) lists"
    )
    problem = project.doc.problem(
        ("gateway", "auth", "unmatched"),
        "'default' serves every valid token that fits no agent's match: as agent "
        f"'default', and {where} an agent of that name: strangers would get its grants",
        hint="set gateway.auth.unmatched: refuse, and give the tokens you mean to serve an "
        "agent whose match: fits them",
    )
    raise InputFileError([replace(problem, code="unmatched_default_listed")])


def _with_user(project: Project, versions: dict[str, Version], own: Merged) -> Merged:
    """The project's merge with the user-level file's under it. The user's bundles are chosen
    with the project's versions held fixed: the user file never changes what the project locks."""
    user = project.user
    assert user is not None
    extra = [
        constraint(text, user.display)
        for text in user.config.bundles
        if requirement_name(text) not in versions
    ]
    user_bundles = []
    if extra:
        held = [
            Constraint(name, SpecifierSet(f"=={version}"), f"{name}=={version}", project.display)
            for name, version in versions.items()
        ]
        chosen = resolve(held + extra, project.registry)
        user_bundles = [
            project.registry.get(name, version)
            for name, version in chosen.items()
            if name not in versions
        ]
    return overlay(own, merge(user.config, user.doc, user_bundles), user.display)


def inputs_digest(config: ProjectConfig) -> str:
    """The config parts that resolution depends on; agents and policy do not change the lock."""
    data = config.model_dump(
        mode="json",
        include={"registries", "bundles", "servers"},
        # Scheduling and limits, not resolution.
        exclude={"servers": {"__all__": {"concurrency", "max_message_mb", "watch"}}},
    )
    for server in data["servers"].values():  # locks written before `auth:` existed stay fresh
        for later in ("auth", "sandbox"):
            if server.get(later, 0) is None:
                del server[later]
    return digest_json(data)


def policy_digests(
    policy: PolicySet, identities: dict[str, str] | None = None
) -> tuple[str, dict[str, str]]:
    """The policy digest (SPEC 6) and the digest of each agent's effective rules. `identities`
    (`identity_digests`): who may act as which agent, part of the policy (SPEC 17); a project
    without any keeps the digest it always had."""
    settings, agents = canonical_policy(policy)
    per_agent = {name: digest_json(rules) for name, rules in agents.items()}
    whole: dict[str, object] = {"settings": settings, "agents": per_agent}
    if identities:
        whole["identities"] = identities
    return digest_json(whole), per_agent


GATEWAY_AUTH = "gateway.auth"  # the identities' entry of the gateway's own settings


def identity_digests(config: ProjectConfig) -> dict[str, str]:
    """Who may act as whom, digested (#54): per agent its `match:` and its token's reference
    (the variable's name, never a value), and `gateway.auth` (issuers, audiences, algorithms,
    `unmatched`) — so a pull request that widens who maps to an agent changes the policy digest
    and fails `lock --check`."""
    found: dict[str, str] = {}
    for name, rules in sorted(config.agents.items()):
        if rules.match is None and rules.token is None:
            continue
        match = {
            claim: sorted(globs) if isinstance(globs, list) else [globs]
            for claim, globs in sorted((rules.match or {}).items())
        }
        found[name] = digest_json({"match": match, "token": rules.token})
    auth = config.gateway.auth
    if auth is not None:
        dumped = auth.model_dump(mode="json")
        for issuer in dumped["issuers"]:  # (digests made before the page's sign-in stay)
            for added in ("client_id", "client_secret"):
                if issuer[added] is None:
                    del issuer[added]
        found[GATEWAY_AUTH] = digest_json(dumped)
    return found


# Not part of a server's locked digest: its tools are digested one by one, and `concurrency` is
# how the gateway schedules calls, not what the server is (adding it kept existing locks fresh);
# `max_message_mb` likewise is a limit of ours, and `watch` when serve restarts it.
UNLOCKED = frozenset({"tools", "concurrency", "max_message_mb", "watch", "share"})


def server_digest(spec: dict[str, Any]) -> str:
    """What a server is, digested (its `spec` as JSON): how it starts or is reached, its
    environment, auth and sandbox — not its tools, which are digested one by one."""
    return digest_json(
        {
            k: v
            for k, v in spec.items()
            # (locks written before `auth:` and `sandbox:` existed stay fresh)
            if k not in UNLOCKED and not (k in ("auth", "sandbox") and v is None)
        }
    )


def build_lock(config: ProjectConfig, merged: Merged, policy: PolicySet) -> LockFile:
    bundles = {
        loaded.manifest.name: LockedBundle(
            version=loaded.manifest.version,
            source=loaded.source.label,
            digest=loaded.digest,
            requires=list(loaded.manifest.requires),
        )
        for loaded in merged.bundles
    }
    servers = {}
    for name, server in merged.servers.items():
        spec = server.spec.model_dump(mode="json")
        tools = {tool["name"]: digest_json(tool) for tool in spec["tools"]}
        servers[name] = LockedServer(
            bundle=server.bundle.split("@")[0] if server.bundle else None,
            transport=server.spec.transport,
            digest=server_digest(spec),
            tools=tools,
        )
    identities = identity_digests(config)
    policy_digest, agents = policy_digests(policy, identities)
    return LockFile(
        format_version=1,
        inputs_digest=inputs_digest(config),
        policy_digest=policy_digest,
        agents=agents,
        identities=identities,
        bundles=dict(sorted(bundles.items())),
        servers=dict(sorted(servers.items())),
    )
