"""Property tests: the engine against a deliberately naive reference, plus metamorphic laws."""

from __future__ import annotations

import itertools
import json
import re
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bundlectl.lint import checks_policy
from bundlectl.lint.engine import lint_project
from bundlectl.policy.catalog import Catalog, ToolRef, agent_row
from bundlectl.policy.engine import Policy
from bundlectl.policy.rules import AgentSpec, Origin, PolicySet, Rule

# Thousands of generated policies through code the other tests cover line by line: traced by
# coverage they took 2-3x as long (on Python 3.11 every line is traced); not measured here.
pytestmark = pytest.mark.no_cover

SERVERS = ["files", "gh", "gh2", "x"]
TOOLS = ["read_file", "write_file", "delete_file", "get", "a.b", "Read_File"]
CATALOG = [(s, t) for s in SERVERS for t in TOOLS]
ORIGIN = Origin("bundlectl.yaml", 1, 1)
Effect = Literal["allow", "ask", "deny"]


@dataclass
class Spec:
    """A generated config: agents with rules (extends only to earlier agents: no cycles)."""

    agents: dict[str, dict[str, list[str]]]
    extends: dict[str, list[str]]
    default: Literal["allow", "deny"]
    global_deny: list[str]
    pin_tools: bool
    locked: frozenset[tuple[str, str]] = field(default_factory=frozenset)


def pattern_part(values: list[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(values),
        st.sampled_from(["*", "?*", "*_file", "g*", "re?d_file", "*e*"]),
    )


patterns = st.one_of(
    pattern_part(TOOLS),  # bare
    st.builds(lambda s, t: f"{s}.{t}", pattern_part(SERVERS), pattern_part(TOOLS)),
)


@st.composite
def specs(draw: st.DrawFn) -> Spec:
    names = [f"a{i}" for i in range(draw(st.integers(1, 4)))]
    agents = {
        name: {effect: draw(st.lists(patterns, max_size=3)) for effect in ("allow", "ask", "deny")}
        for name in names
    }
    extends = {
        name: draw(st.lists(st.sampled_from(names[:i]), max_size=2, unique=True)) if i else []
        for i, name in enumerate(names)
    }
    locked = frozenset(draw(st.sets(st.sampled_from(CATALOG))))
    return Spec(
        agents,
        extends,
        draw(st.sampled_from(["allow", "deny"])),
        draw(st.lists(patterns, max_size=2)),
        draw(st.booleans()),
        locked,
    )


def build(spec: Spec) -> Policy:
    agents = {
        name: AgentSpec(
            name,
            ORIGIN,
            tuple(
                Rule(p, e, ORIGIN, name)  # type: ignore[arg-type]
                for e in ("allow", "ask", "deny")
                for p in rules[e]
            ),
            tuple((parent, ORIGIN) for parent in spec.extends[name]),
        )
        for name, rules in spec.agents.items()
    }
    return Policy(
        PolicySet(
            agents,
            spec.default,
            ORIGIN,
            tuple(Rule(p, "deny", ORIGIN) for p in spec.global_deny),
            spec.pin_tools,
            spec.locked,
        )
    )


def naive(spec: Spec, agent: str, server: str, tool: str, interactive: bool) -> Effect:
    """SPEC section 3, written as plainly as possible (no indexing, no shortcuts)."""

    def matches(rule: str) -> bool:
        rs, dot, rt = rule.partition(".")
        if not dot:
            rs, rt = "*", rule

        def glob(p: str, s: str) -> bool:
            return (
                re.fullmatch(
                    "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in p),
                    s,
                    re.DOTALL,
                )
                is not None
            )

        return glob(rs, server) and glob(rt, tool)

    def ancestors(name: str) -> list[str]:
        seen = [name]
        for parent in spec.extends[name]:
            for a in ancestors(parent):
                if a not in seen:
                    seen.append(a)
        return seen

    def finish(effect: Effect) -> Effect:
        return "deny" if effect == "ask" and not interactive else effect

    rules: dict[str, list[str]] = {"allow": [], "ask": [], "deny": []}
    if agent in spec.agents:
        for a in ancestors(agent):
            for effect in rules:
                rules[effect] += spec.agents[a][effect]
    own_grants = bool(rules["allow"] or rules["ask"])
    own_denies = bool(rules["deny"])
    if any(matches(r) for r in rules["deny"] + spec.global_deny):
        return "deny"
    if spec.pin_tools and (server, tool) not in spec.locked:
        return "deny"
    if any(matches(r) for r in rules["ask"]):
        return finish("ask")
    if any(matches(r) for r in rules["allow"]):
        return "allow"
    if agent not in spec.agents:
        return spec.default
    if own_grants:
        return "deny"
    return "allow" if own_denies else "deny"


AGENTS = ["a0", "a1", "a2", "a3", "stranger"]


@settings(max_examples=120, deadline=None)  # 300 took 12 s of the suite's 4 minutes
@given(specs())
def test_engine_matches_the_naive_reference(spec: Spec) -> None:
    policy = build(spec)
    catalog = Catalog(ToolRef(s, t) for s, t in CATALOG)
    for agent in AGENTS:
        compiled = policy.agent(agent)
        row = agent_row(compiled, catalog)
        for server, tool in CATALOG:
            for interactive in (False, True):
                got = compiled.decide(server, tool, interactive=interactive).effect
                assert got == naive(spec, agent, server, tool, interactive), (
                    agent,
                    server,
                    tool,
                    interactive,
                )
            assert row.effect(catalog.index[(server, tool)]) == naive(
                spec, agent, server, tool, True
            )
        # The whole row at once (policy matrix), as a list and as the JSON it streams.
        wanted = [naive(spec, agent, t.server, t.tool, True) for t in catalog.tools]
        assert row.effects(len(catalog)) == wanted
        assert json.loads(row.effects_json(len(catalog))) == wanted


def permitted(policy: Policy, agent: str) -> set[tuple[str, str, str]]:
    compiled = policy.agent(agent)
    return {
        (s, t, compiled.decide(s, t, interactive=True).effect)
        for s, t in CATALOG
        if compiled.decide(s, t, interactive=True).effect != "deny"
    }


@settings(max_examples=150, deadline=None)
@given(specs(), st.randoms(use_true_random=False))
def test_reordering_rules_changes_nothing(spec: Spec, rng: object) -> None:
    shuffled = {
        name: {e: rng.sample(r, len(r)) for e, r in rules.items()}  # type: ignore[attr-defined]
        for name, rules in spec.agents.items()
    }
    other = replace(
        spec, agents=shuffled, global_deny=rng.sample(spec.global_deny, len(spec.global_deny))
    )  # type: ignore[attr-defined]
    policy, reordered = build(spec), build(other)
    for agent in AGENTS:
        assert permitted(policy, agent) == permitted(reordered, agent)


@settings(max_examples=150, deadline=None)
@given(specs(), patterns, st.sampled_from(["a0", "global"]))
def test_adding_a_deny_never_grows_what_is_permitted(spec: Spec, pattern: str, where: str) -> None:
    policy = build(spec)
    before = {a: permitted(policy, a) for a in AGENTS}
    if where == "global":
        spec = replace(spec, global_deny=[*spec.global_deny, pattern])
    else:
        spec.agents["a0"]["deny"].append(pattern)
    denied = build(spec)
    after = {a: permitted(denied, a) for a in AGENTS}
    for agent in AGENTS:
        # A first deny turns an empty entry into a deny-list: SPEC's one exception.
        if (
            where != "global"
            and agent != "stranger"
            and not any(r for e in ("allow", "ask") for r in spec.agents["a0"][e])
        ):
            continue
        assert {(s, t) for s, t, _ in after[agent]} <= {(s, t) for s, t, _ in before[agent]}


@settings(max_examples=150, deadline=None)
@given(specs(), patterns)
def test_adding_an_allow_never_shrinks_an_allow_list(spec: Spec, pattern: str) -> None:
    spec.agents["a0"]["allow"].append("files.read_file")  # make a0 an allow-list first
    before = permitted(build(spec), "a0")
    spec.agents["a0"]["allow"].append(pattern)
    assert {(s, t) for s, t, _ in before} <= {(s, t) for s, t, _ in permitted(build(spec), "a0")}


@settings(max_examples=150, deadline=None)
@given(specs())
def test_interactive_matters_only_when_an_ask_rule_matched(spec: Spec) -> None:
    policy = build(spec)
    for agent in AGENTS:
        compiled = policy.agent(agent)
        for server, tool in CATALOG:
            quiet = compiled.decide(server, tool, interactive=False)
            loud = compiled.decide(server, tool, interactive=True)
            if quiet.effect != loud.effect:
                assert loud.effect == "ask" and quiet.matched_effect == "ask"
                assert loud.rule is not None and loud.rule.effect == "ask"


# --- lint's BCL201/BCL202 with argument conditions (SPEC 10), against the engine ----------------

CTOOLS = ["write", "read", "push"]
CPATTERNS = ["s.write", "s.read", "s.push", "s.*", "s.?ead", "*", "s.w*", "s.p*"]
MATCHERS: dict[str, list[object]] = {
    "path": [
        "docs/a.md",
        ["main", "docs/a.md"],
        "docs/*",
        {"glob": "docs/*"},
        {"path": "docs/**"},
        {"present": False},
        ["main", {"present": False}],
        {"not": {"path": "docs/**"}},
    ],
    "n": [5, [5, 7], {"min": 0, "max": 10}, {"present": False}],
    "mode": ["w", ["w", "a"], {"glob": "*"}],
}
WHENS = ["args.n > 3", "tool == 'write'"]
SCHEMA = (
    "{type: object, properties: {path: {type: string}, n: {type: integer},"
    " mode: {type: string, default: w}}}"
)
CALL_VALUES: dict[str, list[object]] = {
    "path": [None, "docs/a.md", "docs/x/y.md", "main", "../x", "/etc/p", "src/a"],
    "n": [None, 5, 7, 50],
    "mode": [None, "w", "a", "x"],
}
CALLS = [
    {k: v for k, v in zip(CALL_VALUES, values, strict=True) if v is not None}
    for values in itertools.product(*CALL_VALUES.values())
]


@st.composite
def conditional_rules(draw: st.DrawFn) -> dict[str, object] | str:
    pattern = draw(st.sampled_from(CPATTERNS))
    if draw(st.integers(0, 2)) == 0:
        return pattern
    keys = draw(st.lists(st.sampled_from(list(MATCHERS)), min_size=1, max_size=2, unique=True))
    rule: dict[str, object] = {
        "tool": pattern,
        "args": {key: draw(st.sampled_from(MATCHERS[key])) for key in keys},
    }
    if draw(st.integers(0, 5)) == 0:
        rule["when"] = draw(st.sampled_from(WHENS))
    return rule


@st.composite
def conditional_configs(draw: st.DrawFn) -> tuple[str, dict[int, tuple[str, object]]]:
    """A config's text, and the line of each agent rule: (agent, the rule as written)."""
    lines = ["version: 1", "servers:", "  s:", "    command: s-mcp", "    tools:"]
    lines += [f"      - {{name: {tool}, input_schema: {SCHEMA}}}" for tool in CTOOLS]
    lines.append("agents:")
    at: dict[int, tuple[str, object]] = {}
    names = [f"a{i}" for i in range(draw(st.integers(1, 3)))]
    for i, name in enumerate(names):
        lines += [f"  {name}:", "    description: generated"]
        if i and draw(st.booleans()):
            lines.append(f"    extends: [{names[i - 1]}]")
        for effect in ("allow", "ask", "deny"):
            rules = draw(st.lists(conditional_rules(), max_size=3))
            if rules:
                lines.append(f"    {effect}:")
            for rule in rules:
                lines.append(f"      - {json.dumps(rule)}")
                at[len(lines)] = (name, rule)
    default = draw(st.sampled_from(["allow", "deny"]))
    deny = json.dumps(draw(st.lists(conditional_rules(), max_size=1)))
    lines.append(f"policy: {{default: {default}, deny: {deny}}}")
    return "\n".join(lines) + "\n", at


def decisions(policy: Policy, catalog: Catalog) -> list[tuple[str, str, str, str]]:
    """The engine's effect (before an ask is confirmed) for every agent, tool and call."""
    out: list[tuple[str, str, str, str]] = []
    for agent in [*policy.agents, "stranger"]:
        compiled = policy.agent(agent)
        for tool in CTOOLS:
            schema = catalog.input_schema("s", tool)
            for args in CALLS:
                decided = compiled.decide("s", tool, arguments=args, schema=schema)
                out.append((agent, tool, json.dumps(args), decided.matched_effect))
    return out


def without(policy: Policy, rule: Rule) -> Policy:
    """The same policy with one agent rule removed."""
    agents = dict(policy.set.agents)
    assert rule.agent is not None
    spec = agents[rule.agent]
    agents[rule.agent] = replace(spec, rules=tuple(r for r in spec.rules if r is not rule))
    return Policy(replace(policy.set, agents=agents))


@settings(max_examples=30, deadline=None)
@given(conditional_configs())
def test_lint_calls_a_conditional_rule_dead_only_when_no_decision_needs_it(
    made: tuple[str, dict[int, tuple[str, object]]],
) -> None:
    """BCL201 (denied anyway) and BCL202 (covered by another rule), with conditions: removing
    the rule lint names changes no decision of any agent on any call, and every call a BCL201
    rule applies to is denied."""
    text, at = made
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "bundlectl.yaml"
        path.write_text(text)
        ctx, _ = lint_project(path)
        assert ctx.resolution is not None and ctx.policy_ok, text
        findings = list(checks_policy.overridden_and_shadowed(ctx))
    policy, catalog = ctx.resolution.policy, ctx.resolution.catalog
    before = decisions(policy, catalog)
    for finding in findings:
        agent, _ = at[finding.problem.line]
        (rule,) = (
            r
            for r in policy.set.agents[agent].rules
            if r.origin.line == finding.problem.line and r.origin.bundle is None
        )
        if "the only allow/ask rule of" in finding.problem.message:  # BCL201 says what it does
            assert finding.rule == "BCL201"
            assert any(without(policy, rule).agent(a).falls_open for a in policy.agents)
        else:
            assert decisions(without(policy, rule), catalog) == before, (text, finding)
        if finding.rule == "BCL201":
            for tool in (t for t in CTOOLS if rule.matches("s", t)):
                schema = catalog.input_schema("s", tool)
                context = {"agent": agent, "server": "s", "tool": tool}
                for args in CALLS:
                    strict = rule.effect != "allow"
                    if rule.condition is None or not rule.condition.failed(
                        args, schema, strict, context
                    ):
                        decided = policy.agent(agent).decide(
                            "s", tool, arguments=args, schema=schema
                        )
                        assert decided.matched_effect == "deny", (text, finding, tool, args)
