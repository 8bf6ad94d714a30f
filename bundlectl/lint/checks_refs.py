"""1xx: references and resolution — bundles, the lock, servers named in rules, extends."""

from __future__ import annotations

from collections.abc import Iterator

from bundlectl.config.fields import pattern_of
from bundlectl.config.lockfile import FORMATTING_ONLY, Drift, drift, dump_lock
from bundlectl.config.paths import display_path
from bundlectl.config.requirements import requirement_name
from bundlectl.config.yamlio import read_yaml
from bundlectl.errors import BundlectlError, ResolutionError
from bundlectl.lint.context import Context, at, from_problem
from bundlectl.lint.rules import Finding
from bundlectl.policy.catalog import Catalog
from bundlectl.policy.inheritance import extends_problems
from bundlectl.policy.patterns import split_rule
from bundlectl.suggest import Suggester


def unknown_bundles(ctx: Context) -> Iterator[Finding]:
    """BCL101 in the config's bundles and in every linted manifest's requires."""
    if ctx.project is None:
        return
    known = set(ctx.project.registry.names())
    sources = []
    if ctx.config is not None and ctx.config_model is not None:
        sources.append((ctx.config.doc, "bundles", ctx.config_model.bundles))
    sources += [(f.doc, "requires", m.requires) for f, m in ctx.manifests()]
    for doc, key, requirements in sources:
        for index, text in enumerate(requirements):
            name = requirement_name(text)
            if name not in known:
                close = Suggester(known).closest(name)
                hint = f"did you mean {close[0]}?" if close else None
                yield at(
                    "BCL101",
                    doc,
                    (key, index),
                    f"no bundle named {name!r} in any registry",
                    anchor=name,
                    hint=hint,
                )


def unsatisfiable(ctx: Context) -> Iterator[Finding]:
    """BCL102: the resolver found no versions that satisfy every constraint."""
    error = ctx.resolution_error
    config, model = ctx.config, ctx.config_model
    if not isinstance(error, ResolutionError) or config is None or model is None:
        return
    if not error.message.startswith("no version of"):
        return  # unknown bundles are BCL101, collisions BCL107
    name = error.message.split("'")[1]
    index = next((i for i, r in enumerate(model.bundles) if requirement_name(r) == name), None)
    path: tuple[str | int, ...] = ("bundles", index) if index is not None else ("bundles",)
    lines = [line.strip() for line in error.message.splitlines()]
    yield at("BCL102", config.doc, path, f"{lines[0]} {'; '.join(lines[1:])}", anchor=name)


def server_collisions(ctx: Context) -> Iterator[Finding]:
    """BCL107, at the requirement that brought in the second bundle (or at bundles)."""
    if ctx.resolution is None or ctx.config is None or ctx.config_model is None:
        return
    for server, first, second in ctx.resolution.merged.collisions:
        name = second.split("@")[0]
        index = next(
            (i for i, r in enumerate(ctx.config_model.bundles) if requirement_name(r) == name), None
        )
        path: tuple[str | int, ...] = ("bundles", index) if index is not None else ("bundles",)
        yield at(
            "BCL107",
            ctx.config.doc,
            path,
            f"server {server!r} is defined differently by bundles {first} and {second}",
            anchor=server,
        )


def gateway_name_clashes(ctx: Context) -> Iterator[Finding]:
    """BCL111, at `gateway.names` when it says bare, else at the second tool's server."""
    if ctx.resolution is None or ctx.config is None or ctx.config_model is None:
        return
    bare = ctx.config_model.gateway.names == "bare"
    for name, first, second in ctx.resolution.name_clashes():
        path: tuple[str | int, ...] = ("gateway", "names") if bare else ("servers", second[0])
        yield at(
            "BCL111",
            ctx.config.doc,
            path,
            f"tools {first[0]}.{first[1]} and {second[0]}.{second[1]} would both be named "
            f"{name!r} by `bundlectl serve`",
            anchor=name,
        )


def shared_servers(ctx: Context) -> Iterator[Finding]:
    """BCL112, at `servers.NAME.share` of a stdio server that more than one agent may use."""
    if ctx.resolution is None or ctx.config is None or ctx.config_model is None:
        return
    shared = [n for n, spec in ctx.config_model.servers.items() if spec.share]
    if not shared:
        return
    try:
        policy = ctx.resolution.policy
        reach = {agent: policy.agent(agent) for agent in policy.agents}
    except BundlectlError:  # an extends cycle: BCL108 says so
        return
    for name in shared:
        if ctx.config_model.servers[name].transport != "stdio":
            continue
        users = [agent for agent, compiled in reach.items() if compiled.may_reach(name)]
        if len(users) > 1:
            yield at(
                "BCL112",
                ctx.config.doc,
                ("servers", name, "share"),
                f"server {name!r} runs as one process for agents {', '.join(users)}: what it "
                "sends outside a call can reach another of them",
                anchor=name,
            )


def invalid_extends(ctx: Context) -> Iterator[Finding]:
    """BCL108: unknown parents and cycles (each at its position)."""
    if ctx.resolution is None:
        return

    linted = {f.doc.file for f in ctx.files}
    for problem in extends_problems(ctx.resolution.merged.agents):
        if problem.file in linted:  # not in a manifest outside the lint targets
            yield from_problem("BCL108", problem)


def lock_drift(ctx: Context) -> Iterator[Finding]:
    """BCL103: the lock is missing, or differs from what the config resolves to now."""
    if ctx.resolution is None or ctx.project is None or ctx.config is None:
        return

    project = ctx.project
    fresh = dump_lock(ctx.resolution.lock)
    if not project.lock_path.exists():
        yield at("BCL103", ctx.config.doc, (), "bundlectl.lock is missing", anchor="missing")
        return
    if project.lock_path.read_text("utf-8") == fresh:
        return
    lock_doc = read_yaml(project.lock_path, display_path(project.lock_path))
    differences = drift(project.lock, ctx.resolution.lock) or [Drift((), FORMATTING_ONLY)]
    for item in differences:
        yield at(
            "BCL103",
            lock_doc,
            item.path,
            f"stale lock: {item.message}",
            key=bool(item.path),
            anchor=item.message,
        )


def rule_targets(ctx: Context) -> Iterator[Finding]:
    """BCL104 unknown server, BCL105 matches nothing, BCL106 ambiguous bare allow,
    BCL208 matches only when case is ignored — for every rule written in the config."""
    if ctx.resolution is None or ctx.config is None or ctx.config_model is None:
        return
    catalog = ctx.resolution.catalog
    servers = set(ctx.resolution.merged.servers)
    declared = {name for name, s in ctx.resolution.merged.servers.items() if s.spec.tools}
    doc = ctx.config.doc
    server_names = Suggester(servers)
    tools = _ToolSuggestions(catalog)
    for path, pattern, effect in _config_rules(ctx):
        server, tool = split_rule(pattern)
        literal_server = "*" not in server and "?" not in server
        if literal_server and server not in servers:
            close = server_names.closest(server)
            yield at(
                "BCL104",
                doc,
                path,
                f"rule {pattern!r} names server {server!r}, which is not configured",
                anchor=pattern,
                hint=f"did you mean {close[0]}.{tool}?" if close else None,
            )
            continue
        if literal_server and server not in declared:
            continue  # no declared catalog: nothing to compare against
        mask = catalog.mask(pattern)
        defensive = effect == "deny" and ("*" in pattern or "?" in pattern)
        if mask == 0 and not defensive:  # a wildcard deny also guards tools yet to come
            folded = catalog.mask_casefold(pattern)
            if folded:
                shown = ", ".join(t.qualified for t in catalog.members(folded)[:3])
                yield at(
                    "BCL208",
                    doc,
                    path,
                    f"rule {pattern!r} matches only when case is ignored ({shown})",
                    anchor=pattern,
                )
            else:
                close = tools.closest(server if literal_server else None, tool)
                yield at(
                    "BCL105",
                    doc,
                    path,
                    f"rule {pattern!r} matches no known tool",
                    anchor=pattern,
                    hint=f"did you mean {close[0]}?" if close else None,
                )
        elif mask and effect == "allow" and server == "*":
            spread = {t.server for t in catalog.members(mask)}
            if len(spread) > 1:
                yield at(
                    "BCL106",
                    doc,
                    path,
                    f"bare rule {pattern!r} allows tools on "
                    f"{len(spread)} servers: {', '.join(sorted(spread))}",
                    anchor=pattern,
                )


class _ToolSuggestions:
    """Close tool names: among the named server's tools, or every tool for a wildcard server."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._per_server: dict[str | None, Suggester] = {}
        self._owner: dict[str, str] = {}

    def closest(self, server: str | None, tool: str) -> list[str]:
        index = self._per_server.get(server)
        if index is None:
            refs = self.catalog.tools
            names = [t.tool for t in refs if server is None or t.server == server]
            index = self._per_server[server] = Suggester(names)
        found = index.closest(tool)
        if not found:
            return []
        if server is not None:
            return [f"{server}.{found[0]}"]
        if not self._owner:
            for ref in self.catalog.tools:  # catalog order: the first server that has the name
                self._owner.setdefault(ref.tool, ref.server)
        return [f"{self._owner[found[0]]}.{found[0]}"]


def _config_rules(ctx: Context) -> Iterator[tuple[tuple[str | int, ...], str, str]]:
    model = ctx.config_model
    assert model is not None
    for name, rules in model.agents.items():
        for effect in ("allow", "ask", "deny"):
            for index, entry in enumerate(getattr(rules, effect)):
                yield ("agents", name, effect, index), pattern_of(entry), effect
    for index, entry in enumerate(model.policy.deny):
        yield ("policy", "deny", index), pattern_of(entry), "deny"
