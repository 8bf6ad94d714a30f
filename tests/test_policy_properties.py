"""Property tests: the engine against a deliberately naive reference, plus metamorphic laws."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Literal

from hypothesis import given, settings
from hypothesis import strategies as st

from bundlectl.catalog import Catalog, ToolRef, agent_row
from bundlectl.policy import AgentSpec, Origin, Policy, PolicySet, Rule

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
    for agent in AGENTS:
        assert permitted(build(spec), agent) == permitted(build(other), agent)


@settings(max_examples=150, deadline=None)
@given(specs(), patterns, st.sampled_from(["a0", "global"]))
def test_adding_a_deny_never_grows_what_is_permitted(spec: Spec, pattern: str, where: str) -> None:
    before = {a: permitted(build(spec), a) for a in AGENTS}
    if where == "global":
        spec = replace(spec, global_deny=[*spec.global_deny, pattern])
    else:
        spec.agents["a0"]["deny"].append(pattern)
    after = {a: permitted(build(spec), a) for a in AGENTS}
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
