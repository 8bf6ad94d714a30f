"""BCL220: `policy.invariants` proved over every agent they name and every catalogued tool (#59).

Each invariant is checked exactly, with the catalog's masks `matrix` uses: `never` (none of the
agents may call or be asked about these tools), `only` (nothing else), `require` (each of the
tools is one of these effects) and `approve: out-of-band` (each tool an agent may call needs an
approver). A grant with argument conditions counts as a grant: some calls would pass. A breach
is reported at the rule that makes it — the grant, or the ask that needs no approver — with the
agent, the tools (grouped per rule) and the invariant; a breach no rule makes (a default) at the
agent.
"""

from __future__ import annotations

from collections.abc import Iterator
from fnmatch import fnmatchcase

from bundlectl.config.settings import Invariant, ToolsOfClass
from bundlectl.errors import Problem
from bundlectl.lint.context import Context, at, policy_parts
from bundlectl.lint.rules import RULES, Finding
from bundlectl.policy.catalog import Catalog, agent_row
from bundlectl.policy.engine import CompiledAgent
from bundlectl.policy.rules import Rule

SHOWN = 5  # tools named in one finding; the rest are counted


def invariants(ctx: Context) -> Iterator[Finding]:
    """BCL220, at the rule that breaks an invariant (or the agent, for a default)."""
    parts = policy_parts(ctx)
    if parts is None:
        return
    resolution, doc, model = parts
    catalog = resolution.catalog
    for index, invariant in enumerate(model.policy.invariants):
        said = _described(invariant)
        for agent in sorted(model.agents):
            if not any(fnmatchcase(agent, pattern) for pattern in invariant.agents):
                continue
            compiled = resolution.policy.agent(agent)
            broken = _breaches(invariant, compiled, catalog)
            for rule, tools in _by_rule(compiled, catalog, broken, invariant).items():
                names = [t.qualified for t in catalog.members(tools)]
                shown = ", ".join(names[:SHOWN]) + (
                    f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
                )
                why = f" ({invariant.reason})" if invariant.reason else ""
                message = (
                    f"agent {agent!r} breaks policy.invariants[{index}] ({said}){why}: "
                    f"{shown} {_how(invariant, rule)}"
                )
                anchor = f"{index}:{agent}:{rule.key if rule else '-'}"
                if rule is not None and rule.origin.line:
                    yield _at_rule(rule, message, anchor)
                else:
                    yield at("BCL220", doc, ("agents", agent), message, key=True, anchor=anchor)


def _described(invariant: Invariant) -> str:
    tools = invariant.tools
    what = (
        f"{tools.tool_class} tools"
        if isinstance(tools, ToolsOfClass)
        else ", ".join(tools)
        if tools
        else ""
    )
    if invariant.never:
        return "never " + ", ".join(invariant.never)
    if invariant.only:
        return "only " + ", ".join(invariant.only)
    if invariant.require:
        return f"{what}: {' or '.join(invariant.require)}"
    return f"{what}: approved out of band"


def _selected(invariant: Invariant, catalog: Catalog, patterns: list[str] | None = None) -> int:
    if patterns is None:
        tools = invariant.tools
        if isinstance(tools, ToolsOfClass):
            return catalog.class_mask(tools.tool_class)
        patterns = list(tools or [])
    bits = 0
    for pattern in patterns:
        bits |= catalog.mask(pattern)
    return bits


def _breaches(invariant: Invariant, agent: CompiledAgent, catalog: Catalog) -> int:
    """The tools on which the agent breaks the invariant."""
    row = agent_row(agent, catalog)
    asked = row.ask
    allowed = row.allow & ~asked
    callable_ = allowed | asked
    if invariant.never:
        return callable_ & _selected(invariant, catalog, list(invariant.never))
    if invariant.only:
        return callable_ & ~_selected(invariant, catalog, list(invariant.only)) & catalog.full
    chosen = _selected(invariant, catalog)
    if invariant.require:
        bad = 0
        if "allow" not in invariant.require:
            bad |= allowed
        if "ask" not in invariant.require:
            bad |= asked
        if "deny" not in invariant.require:
            bad |= catalog.full & ~callable_
        return bad & chosen
    # approve: out-of-band — no allow, and every ask decided by an approver's rule
    bad = allowed & chosen
    for ref in catalog.members(asked & chosen):
        decision = agent.decide(ref.server, ref.tool, interactive=True)
        if decision.rule is None or not decision.rule.by_approver:
            bad |= 1 << catalog.index[ref.server, ref.tool]
    return bad


def _by_rule(
    agent: CompiledAgent, catalog: Catalog, broken: int, invariant: Invariant
) -> dict[Rule | None, int]:
    """The breached tools grouped by the rule that decides each (None: a default), with the
    grants with conditions that name a tool counted as its decision."""
    grouped: dict[Rule | None, int] = {}
    for ref in catalog.members(broken):
        decision = agent.decide(ref.server, ref.tool, interactive=True)
        rule = decision.rule
        if decision.matched_effect == "deny" or rule is None:
            conditional = [
                r
                for r in agent.conditional_matching(ref.server, ref.tool)
                if r.effect in ("allow", "ask")
            ]
            if conditional and (invariant.never or invariant.only or invariant.require):
                rule = conditional[0]
        bit = 1 << catalog.index[ref.server, ref.tool]
        grouped[rule] = grouped.get(rule, 0) | bit
    return grouped


def _how(invariant: Invariant, rule: Rule | None) -> str:
    if rule is None:
        return "decided by the agent's default"
    if invariant.approve and rule.effect == "ask":
        return f"asked in-band by {rule.label}"
    verb = {"allow": "allowed", "ask": "asked about", "deny": "denied"}[rule.effect]
    return f"{verb} by {rule.label}"


def _at_rule(rule: Rule, message: str, anchor: str) -> Finding:
    origin = rule.origin
    problem = Problem(origin.file, origin.line, origin.column or 1, message)
    return Finding("BCL220", problem, RULES["BCL220"].severity, anchor)
