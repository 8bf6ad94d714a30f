"""Why a decision came out as it did: every rule that matched, the ones that lost and why,
the `extends` chain and the argument conditions (`policy explain`). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # conditions are imported only by a policy that has them (models.py)
    from bundlectl.policy.conditions import PathReader

from bundlectl.policy.engine import CompiledAgent
from bundlectl.policy.rules import Decision, Rule


@dataclass(frozen=True)
class Explanation:
    """Everything that went into one decision."""

    decision: Decision
    losers: list[tuple[Rule, str]]  # other matching rules and why they did not decide
    extends: list[tuple[str, list[str]]]  # each agent of the chain with its parents
    listed: bool
    default_used: bool
    global_deny: list[Rule]  # policy.deny rules that matched
    pin_tools: str  # what policy.pin_tools did
    # The rules with argument conditions naming the tool: each with what of its condition did
    # not hold for the given arguments ("" when it held; None when no arguments were given).
    conditions: list[tuple[Rule, str | None]] = field(default_factory=list)

    @property
    def depends_on(self) -> list[str]:
        """The arguments the decision depends on (the `when:` expressions as such)."""
        names: list[str] = []
        for rule, _ in self.conditions:
            assert rule.condition is not None
            names += [key for key, _, _ in rule.condition.args]
            if rule.condition.when is not None:
                names.append(f"when: {rule.condition.when}")
        return list(dict.fromkeys(names))


def explain(
    agent: CompiledAgent,
    server: str,
    tool: str,
    *,
    interactive: bool,
    arguments: Mapping[str, Any] | None = None,
    schema: Mapping[str, Any] | None = None,
    paths: PathReader | None = None,
) -> Explanation:
    """Explain the decision of `agent` on `server.tool` (on a call with `arguments`, if
    given: then each condition is checked, path arguments as `paths` reads them)."""
    decision = agent.decide(
        server, tool, interactive=interactive, arguments=arguments, schema=schema, paths=paths
    )
    context = {"agent": agent.name, "server": server, "tool": tool}
    conditions: list[tuple[Rule, str | None]] = []
    for rule in agent.conditional_matching(server, tool):
        assert rule.condition is not None
        if arguments is None:
            conditions.append((rule, None))
            continue
        failed = rule.condition.failed(arguments, schema, rule.effect != "allow", context, paths)
        conditions.append((rule, failed or ""))
    matched = agent.matching(server, tool)
    losers = [(rule, _why_lost(rule, decision)) for rule in matched if rule != decision.rule]
    parents = {name: [p for p, _ in spec.extends] for name, spec in agent.policy.agents.items()}
    pol = agent.policy
    if not pol.pin_tools:
        pin = "off"
    elif pol.locked_tools is None:
        pin = "on, but there is no lock yet: nothing is denied by it"
    elif (server, tool) in pol.locked_tools:
        pin = "on; the lock records this tool"
    else:
        pin = "on; the lock does not record this tool, so it is denied"
    return Explanation(
        decision=decision,
        losers=losers,
        extends=[(name, parents.get(name, [])) for name in agent.chain],
        listed=agent.listed,
        default_used=decision.rule is None and not agent.listed,
        global_deny=[r for r in matched if r.agent is None],
        pin_tools=pin,
        conditions=conditions,
    )


def _why_lost(rule: Rule, decision: Decision) -> str:
    won = decision.matched_effect
    if decision.rule is None and won == "deny":
        return f"{decision.reason}, which beats {rule.effect}"
    if rule.effect == won:
        return "same effect; the first matching rule is reported"
    return f"{won} beats {rule.effect}"
