"""2xx: policy logic, exact over the catalog — each rule's match set is computed and compared."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

from bundlectl.config.local import load_local
from bundlectl.config.settings import tested_tool
from bundlectl.config.yamlio import YamlPath
from bundlectl.errors import InputFileError
from bundlectl.lint.context import Context, at, from_problem, own_rules, policy_parts
from bundlectl.lint.rules import Finding
from bundlectl.policy.catalog import agent_row
from bundlectl.policy.engine import CompiledAgent
from bundlectl.policy.patterns import part_matches, split_rule
from bundlectl.policy.rules import Rule
from bundlectl.resolve.resolved import Resolution


def overridden_and_shadowed(ctx: Context) -> Iterator[Finding]:
    """BCL201 allow/ask rules that deny covers entirely; BCL202 rules covered by another."""
    parts = policy_parts(ctx)
    if parts is None:
        return
    resolution, doc, model = parts
    catalog = resolution.catalog
    cover = _Cover(resolution)
    for agent in model.agents:
        own = own_rules(resolution, agent)
        if not own:
            continue
        compiled = resolution.policy.agent(agent)
        denied = cover.denied(agent)
        for path, rule in own:
            mask = catalog.mask(rule.pattern)
            if not mask:
                continue
            if rule.effect != "deny" and mask & ~cover.denied_for(compiled, rule, denied) == 0:
                deniers = (
                    r
                    for r in compiled.rules
                    if r.effect == "deny"
                    and (r.condition is None or _implies(rule, r))
                    and catalog.mask(r.pattern) & mask
                )
                by = ", ".join(r.label for r in itertools.islice(deniers, 3))
                message = f"everything {rule.pattern!r} matches is denied anyway ({by})"
                hint = None
                opened = cover.opened_without(rule)
                if opened:
                    message += (
                        f"; yet it is the only allow/ask rule of {', '.join(map(repr, opened))}:"
                        " without it every tool no deny names would be allowed (SPEC 3)"
                    )
                    hint = "keep it, or name the tools the agent may use under allow:"
                yield at("BCL201", doc, path, message, anchor=rule.pattern, hint=hint)
                continue
            covering = cover.first(compiled, rule, mask)
            if covering is not None:
                yield at(
                    "BCL202",
                    doc,
                    path,
                    f"{rule.effect} rule {rule.pattern!r} is covered "
                    f"by {covering.pattern!r} ({covering.origin})",
                    anchor=rule.pattern,
                )


class _Cover:
    """Which rule of an agent's chain covers another, without comparing it with every rule.

    A chain of a long `extends` line holds hundreds of rules. Each member's own rules are
    joined into one mask per effect, once; a member whose mask does not hold all of a rule's
    tools cannot have a single rule that does, so it is skipped with one integer operation.
    """

    def __init__(self, resolution: Resolution) -> None:
        self.catalog = resolution.catalog
        self.specs = resolution.policy.set.agents
        self.global_deny = resolution.policy.set.global_deny
        self.policy = resolution.policy
        self._unions: dict[tuple[str, bool], dict[str, int]] = {}
        self._sole: dict[int, list[str]] | None = None

    def denied(self, agent: str) -> int:
        """Every tool a deny rule without conditions of the agent's chain or policy.deny
        matches: denied whatever the arguments."""
        inherited = self.catalog.inherited_masks(self.specs, agent)[0]
        return inherited | self.catalog.rules_mask(self.global_deny)

    def denied_for(self, compiled: CompiledAgent, rule: Rule, denied: int) -> int:
        """The tools whose every call `rule` applies to is denied: `denied`, and for a rule
        with conditions also what a deny covers whose conditions follow from the rule's."""
        if rule.condition is None:
            return denied
        for other in compiled.rules:  # its chain's rules and policy.deny
            if other.effect == "deny" and other.condition is not None and _implies(rule, other):
                denied |= self.catalog.mask(other.pattern)
        return denied

    def opened_without(self, rule: Rule) -> list[str]:
        """The agents that would fall open without `rule`, their only allow or ask rule (a
        listed agent with deny rules and no grant allows every other tool, SPEC 3)."""
        if self._sole is None:
            self._sole = {}
            for name in self.policy.agents:
                compiled = self.policy.agent(name)
                grants: list[Rule] = []
                for member in compiled.chain:
                    grants += (r for r in self.specs[member].rules if r.effect != "deny")
                    if len(grants) > 1:
                        break
                if len(grants) == 1 and compiled.has_denies:
                    self._sole.setdefault(id(grants[0]), []).append(name)
        return self._sole.get(id(rule), [])

    def _union(self, member: str, conditional: bool) -> dict[str, int]:
        """Per effect, the tools the member's rules match (`conditional`: also its rules with
        conditions, which may cover a rule that has conditions of its own)."""
        union = self._unions.get((member, conditional))
        if union is None:
            union = self._unions[(member, conditional)] = dict.fromkeys(("allow", "ask", "deny"), 0)
            for rule in self.specs[member].rules:
                if rule.condition is None or conditional:
                    union[rule.effect] |= self.catalog.mask(rule.pattern)
        return union

    def first(self, compiled: CompiledAgent, rule: Rule, mask: int) -> Rule | None:
        """The first other rule of `rule`'s effect, in the chain's order, that applies to every
        call `rule` applies to: its tools include all of `rule`'s and its conditions follow from
        `rule`'s. Of two rules alike (the same tools, conditions that follow from each other)
        only the later one is reported."""
        before = True  # `rule` belongs to the chain's first member
        conditional = rule.condition is not None
        for member in compiled.chain:
            if mask & ~self._union(member, conditional)[rule.effect]:
                before = False
                continue
            for other in self.specs[member].rules:
                if other is rule:
                    before = False
                    continue
                if other.effect == rule.effect and self._covers(other, rule, mask, before):
                    return other
            before = False
        if rule.effect == "deny":
            for other in self.global_deny:
                if self._covers(other, rule, mask, False):
                    return other
        return None

    def _covers(self, other: Rule, rule: Rule, mask: int, before: bool) -> bool:
        theirs = self.catalog.mask(other.pattern)
        if mask & ~theirs or not _implies(rule, other):
            return False
        alike = theirs == mask and _implies(other, rule)
        return not alike or before


def _implies(rule: Rule, other: Rule) -> bool:
    """Whether `other`'s conditions hold for every call whose arguments meet `rule`'s."""
    if rule.condition is None:
        return other.condition is None
    return rule.condition.implies(other.condition, strict=other.effect != "allow")


def permits_nothing(ctx: Context) -> Iterator[Finding]:
    """BCL203: a listed agent that can call no tool of a non-empty catalog."""
    parts = policy_parts(ctx)
    if parts is None or not len(parts[0].catalog):
        return
    resolution, doc, model = parts
    for agent in model.agents:
        row = agent_row(resolution.policy.agent(agent), resolution.catalog)
        if not (row.allow | row.ask):
            yield at(
                "BCL203",
                doc,
                ("agents", agent),
                f"agent {agent!r} can call no tool",
                key=True,
                anchor=agent,
            )


def broad_destructive(ctx: Context) -> Iterator[Finding]:
    """BCL204: a wildcard allow that lets destructive tools through without ask or deny."""
    parts = policy_parts(ctx)
    if parts is None:
        return
    resolution, doc, model = parts
    catalog = resolution.catalog
    for agent in model.agents:
        row = agent_row(resolution.policy.agent(agent), catalog)
        for path, rule in own_rules(resolution, agent):
            if rule.effect != "allow" or ("*" not in rule.pattern and "?" not in rule.pattern):
                continue
            reached = catalog.mask(rule.pattern) & row.allow & catalog.destructive
            if reached:
                risky = [t.qualified for t in catalog.members(reached, limit=3)]
                count = reached.bit_count()
                more = f" and {count - 3} more" if count > 3 else ""
                yield at(
                    "BCL204",
                    doc,
                    path,
                    f"wildcard {rule.pattern!r} allows destructive "
                    f"tools without asking: {', '.join(risky[:3])}{more}",
                    anchor=rule.pattern,
                )


def default_allow(ctx: Context) -> Iterator[Finding]:
    """BCL205: agents not listed get every tool."""
    config, model = ctx.config, ctx.config_model
    if config is None or model is None:
        return
    policy = config.doc.data.get("policy") if isinstance(config.doc.data, dict) else None
    if isinstance(policy, dict) and "default" in policy:
        if model.policy.default == "allow":
            yield at(
                "BCL205",
                config.doc,
                ("policy", "default"),
                "policy.default is allow: agents not listed get every tool",
                anchor="allow",
            )
        return
    yield at(
        "BCL205",
        config.doc,
        ("policy",) if isinstance(policy, dict) else (),
        "policy.default is not set, so it is allow: agents not listed get every tool",
        key=isinstance(policy, dict),
        anchor="absent",
    )


def future_tools(ctx: Context) -> Iterator[Finding]:
    """BCL207: a wildcard allow/ask will also grant tools the server adds later."""
    parts = policy_parts(ctx)
    if parts is None or parts[2].policy.pin_tools:
        return
    resolution, doc, model = parts
    for agent in model.agents:
        for path, rule in own_rules(resolution, agent):
            if rule.effect != "deny" and ("*" in rule.parts[1] or "?" in rule.parts[1]):
                yield at(
                    "BCL207",
                    doc,
                    path,
                    f"{rule.pattern!r} will also grant tools its servers add later",
                    anchor=rule.pattern,
                )


def policy_tests(ctx: Context) -> Iterator[Finding]:
    """BCL209: every expectation under tests: must hold (ask as if a human could confirm)."""
    parts = policy_parts(ctx)
    if parts is None:
        return
    resolution, doc, model = parts
    for index, test in enumerate(model.tests):
        compiled = resolution.policy.agent(test.agent)
        for want in ("allow", "ask", "deny"):
            for position, entry in enumerate(getattr(test, want)):
                path: YamlPath = ("tests", index, want, position)
                name = tested_tool(entry)
                arguments = None if isinstance(entry, str) else entry.args
                server, dot, tool = name.partition(".")
                if not dot:
                    yield at(
                        "BCL209",
                        doc,
                        path,
                        f"{name!r} is not a qualified server.tool name",
                        anchor=name,
                    )
                    continue
                got = compiled.decide(
                    server,
                    tool,
                    interactive=True,
                    arguments=arguments,
                    schema=resolution.catalog.input_schema(server, tool) if arguments else None,
                )
                if got.effect != want:
                    by = f"{got.rule.label} ({got.rule.origin})" if got.rule else got.reason
                    call = f"{name} with {json.dumps(arguments)}" if arguments else name
                    yield at(
                        "BCL209",
                        doc,
                        path,
                        f"expected {want} for agent {test.agent!r} "
                        f"on {call}, got {got.effect}: {by}",
                        anchor=f"{test.agent}:{call}:{want}",
                    )


def detokenize_targets(ctx: Context) -> Iterator[Finding]:
    """BCL210: a `privacy.detokenize` pattern that matches no declared tool (servers without a
    declared catalog could have it: they are not held against the pattern)."""
    parts = policy_parts(ctx)
    if parts is None:
        return
    resolution, doc, model = parts

    servers = resolution.merged.servers
    for index, pattern in enumerate(model.privacy.detokenize):
        if not _matches_no_declared_tool(servers, pattern):
            continue
        yield at(
            "BCL210",
            doc,
            ("privacy", "detokenize", index),
            f"{pattern!r} matches no declared tool",
            anchor=pattern,
        )


def _matches_no_declared_tool(servers: Any, pattern: str) -> bool:
    """Whether `pattern` matches no tool the servers declare (a server without a declared
    catalog could have it: then the pattern is not held to be wrong)."""
    server_part, tool_part = split_rule(pattern)
    matched = [s for s in servers.values() if part_matches(server_part, s.name)]
    if any(not s.spec.tools for s in matched):
        return False
    return not any(part_matches(tool_part, t.name) for s in matched for t in s.spec.tools)


def limit_targets(ctx: Context) -> Iterator[Finding]:
    """BCL215: a `limits:` entry whose agent patterns match no listed agent (an unlisted agent
    is counted too, so `*`-like patterns always pass), or whose tool patterns match no
    declared tool (servers without a declared catalog could have it: not held against it)."""
    parts = policy_parts(ctx)
    if parts is None:
        return
    resolution, doc, model = parts
    agents = set(resolution.merged.agents)
    servers = resolution.merged.servers
    for index, limit in enumerate(model.limits):
        wildcard = any("*" in p or "?" in p for p in limit.agents)
        if not wildcard and not agents & set(limit.agents):
            yield at(
                "BCL215",
                doc,
                ("limits", index, "agents"),
                f"no listed agent is named ({', '.join(limit.agents)})",
                anchor=f"agents:{index}",
            )
        for number, pattern in enumerate(limit.tools):
            if not _matches_no_declared_tool(servers, pattern):
                continue
            yield at(
                "BCL215",
                doc,
                ("limits", index, "tools", number),
                f"{pattern!r} matches no declared tool",
                anchor=pattern,
            )


def local_rules(ctx: Context) -> Iterator[Finding]:
    """BCL216: each allow rule of `bundlectl.local.yaml` (a note: it adds to the reviewed policy
    on this machine). A file that does not load is reported by its own problems (BCL001/3)."""
    if ctx.project is None:
        return
    try:
        local = load_local(ctx.project.config_path)
    except InputFileError as exc:
        for problem in exc.problems:
            yield from_problem("BCL003" if problem.yaml_path else "BCL001", problem)
        return
    if local is None:
        return
    for agent, rules in local.config.agents.items():
        for index, entry in enumerate(rules.allow):
            tool = entry if isinstance(entry, str) else entry.tool
            yield at(
                "BCL216",
                local.doc,
                ("agents", agent, "allow", index),
                f"agent {agent!r} may call {tool} without being asked, on this machine only",
                anchor=f"{agent}:{tool}",
            )
