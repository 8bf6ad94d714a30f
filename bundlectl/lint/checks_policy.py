"""2xx: policy logic, exact over the catalog — each rule's match set is computed and compared."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

from bundlectl.config.local import load_local
from bundlectl.config.models import ProjectConfig
from bundlectl.config.settings import tested_tool
from bundlectl.config.yamlio import YamlDoc, YamlPath
from bundlectl.errors import InputFileError
from bundlectl.lint.context import Context, at, from_problem
from bundlectl.lint.rules import Finding
from bundlectl.policy.catalog import agent_row
from bundlectl.policy.conditions import MISSING
from bundlectl.policy.engine import CompiledAgent
from bundlectl.policy.patterns import part_matches, split_rule
from bundlectl.policy.rules import Rule
from bundlectl.resolve.resolved import Resolution
from bundlectl.suggest import Suggester


def _parts(ctx: Context) -> tuple[Resolution, YamlDoc, ProjectConfig] | None:
    """What the policy checks need, when the config resolved and its policy is sound."""
    if not ctx.policy_ok or ctx.resolution is None or ctx.config is None:
        return None
    model = ctx.config_model
    return None if model is None else (ctx.resolution, ctx.config.doc, model)


def _own_rules(resolution: Resolution, agent: str) -> list[tuple[YamlPath, Rule]]:
    """The agent's rules written in the config, with their YAML paths."""
    out: list[tuple[YamlPath, Rule]] = []
    spec = resolution.policy.set.agents.get(agent)
    position = dict.fromkeys(("allow", "ask", "deny"), 0)
    for rule in spec.rules if spec is not None else ():
        if rule.agent == agent and rule.origin.bundle is None:
            out.append((("agents", agent, rule.effect, position[rule.effect]), rule))
            position[rule.effect] += 1
    return out


def overridden_and_shadowed(ctx: Context) -> Iterator[Finding]:
    """BCL201 allow/ask rules that deny covers entirely; BCL202 rules covered by another."""
    parts = _parts(ctx)
    if parts is None:
        return
    resolution, doc, model = parts
    catalog = resolution.catalog
    cover = _Cover(resolution)
    for agent in model.agents:
        own = _own_rules(resolution, agent)
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
    parts = _parts(ctx)
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
    parts = _parts(ctx)
    if parts is None:
        return
    resolution, doc, model = parts
    catalog = resolution.catalog
    for agent in model.agents:
        row = agent_row(resolution.policy.agent(agent), catalog)
        for path, rule in _own_rules(resolution, agent):
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
    parts = _parts(ctx)
    if parts is None or parts[2].policy.pin_tools:
        return
    resolution, doc, model = parts
    for agent in model.agents:
        for path, rule in _own_rules(resolution, agent):
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
    parts = _parts(ctx)
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
    parts = _parts(ctx)
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
    parts = _parts(ctx)
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


def condition_arguments(ctx: Context) -> Iterator[Finding]:
    """BCL211: a condition names an argument no tool the rule matches declares (a typo that
    makes an allow never hold and a deny never deny); BCL212: a deny or ask condition names an
    argument that a call may omit and that has no default, so a call that omits it is not
    caught by the rule. Only tools with a declared input schema are judged."""
    parts = _parts(ctx)
    if parts is None:
        return
    resolution, doc, model = parts
    for agent in model.agents:
        for path, rule in _own_rules(resolution, agent):
            if rule.condition is None or not rule.condition.args:
                continue
            schemas = _declared_schemas(resolution, rule)
            if not schemas:
                continue
            for key, place, matcher in rule.condition.args:
                name = place[0] if place else key
                where = (*path, "args", key)
                having = [s for s in schemas if name in _properties(s)]
                if not having:
                    known = sorted({p for s in schemas for p in _properties(s)})
                    close = Suggester(known).closest(name, n=1, cutoff=0.6)
                    maybe = f"; did you mean {close[0]!r}?" if close else ""
                    yield at(
                        "BCL211",
                        doc,
                        where,
                        f"no tool {rule.pattern!r} matches has an argument {name!r} "
                        f"(they have: {', '.join(known) or 'none'}){maybe}",
                        key=True,
                        anchor=f"{rule.pattern}:{key}",
                    )
                    continue
                types = _declared_types([_properties(s)[name] for s in having])
                if len(place) == 1 and types and not matcher.fits(types):
                    yield at(
                        "BCL213",
                        doc,
                        where,
                        f"{matcher.text} cannot judge {name!r}, declared "
                        f"{' or '.join(sorted(types))}: "
                        + (
                            "the rule applies to no call"
                            if rule.effect == "allow"
                            else f"as {'a deny' if rule.effect == 'deny' else 'an ask'} it "
                            "holds for every call that has it (SPEC 10: a value it cannot judge)"
                        ),
                        key=True,
                        anchor=f"{rule.pattern}:{key}:type",
                    )
                if rule.effect == "allow" or len(place) != 1 or matcher.holds(MISSING, True):
                    continue  # (a matcher that names a missing value catches the omission)
                optional = [
                    s
                    for s in having
                    if name not in (s.get("required") or [])
                    and "default" not in _properties(s)[name]
                ]
                if optional:
                    yield at(
                        "BCL212",
                        doc,
                        where,
                        f"{name!r} is optional and has no default: a call that omits it is not "
                        f"{'denied' if rule.effect == 'deny' else 'asked about'} by this rule",
                        key=True,
                        anchor=f"{rule.pattern}:{key}",
                    )


def condition_expressions(ctx: Context) -> Iterator[Finding]:
    """BCL214: a rule's `when:` fails for a call whose arguments have the declared types (an
    operator or function CEL does not define for them, or an argument no tool declares): at
    run time it then fails closed on every such call. Each tool the rule names with a declared
    input schema is tried with one value of each argument's type."""
    parts = _parts(ctx)
    if parts is None:
        return
    resolution, doc, model = parts
    catalog = resolution.catalog
    for agent in model.agents:
        for path, rule in _own_rules(resolution, agent):
            condition = rule.condition
            if condition is None or condition.when is None:
                continue
            for ref in catalog.members(catalog.mask(rule.pattern)):
                schema = ref.spec.input_schema if ref.spec is not None else None
                if not isinstance(schema, dict) or not _properties(schema):
                    continue
                context = {"agent": agent, "server": ref.server, "tool": ref.tool}
                why = condition.fails_for(_sample(schema), context)
                if why is not None:
                    yield at(
                        "BCL214",
                        doc,
                        (*path, "when"),
                        f"when: {condition.when!r} fails for a call of {ref.qualified} with "
                        f"arguments of the declared types: {why}",
                        anchor=f"{rule.pattern}:when",
                    )
                    break


_SAMPLES: dict[str, Any] = {
    "string": "x",
    "integer": 1,
    "number": 1.5,
    "boolean": False,
    "array": [],
    "object": {},
    "null": None,
}


def _sample(schema: dict[str, Any]) -> dict[str, Any]:
    """Arguments with one value of each declared property's type (its default, const or first
    enum value when it has one)."""
    out: dict[str, Any] = {}
    for name, prop in _properties(schema).items():
        if not isinstance(prop, dict):
            continue
        for key in ("default", "const"):
            if key in prop:
                out[name] = prop[key]
                break
        else:
            if isinstance(prop.get("enum"), list) and prop["enum"]:
                out[name] = prop["enum"][0]
                continue
            declared = prop.get("type")
            types = declared if isinstance(declared, list) else [declared]
            known = [t for t in types if t in _SAMPLES and t != "null"] or [
                t for t in types if t in _SAMPLES
            ]
            if known:
                out[name] = _SAMPLES[known[0]]
    return out


def _declared_schemas(resolution: Resolution, rule: Rule) -> list[dict[str, Any]]:
    """The declared input schemas (with properties) of the tools `rule` names (found through
    the catalog's masks: no scan of every tool per rule)."""
    catalog = resolution.catalog
    out = []
    for ref in catalog.members(catalog.mask(rule.pattern)):
        schema = ref.spec.input_schema if ref.spec is not None else None
        if isinstance(schema, dict) and _properties(schema):
            out.append(schema)
    return out


def _declared_types(properties: list[Any]) -> set[str]:
    """The JSON types the argument's schemas declare (empty: some schema does not say)."""
    found: set[str] = set()
    for prop in properties:
        declared = prop.get("type") if isinstance(prop, dict) else None
        if isinstance(declared, str):
            found.add(declared)
        elif isinstance(declared, list) and all(isinstance(t, str) for t in declared):
            found.update(declared)
        else:
            return set()
    return found


def _properties(schema: dict[str, Any]) -> dict[str, Any]:
    properties = schema.get("properties")
    return properties if isinstance(properties, dict) else {}
