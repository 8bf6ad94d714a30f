"""Rules and decisions as data (SPEC 3): a rule with where it was written, an agent's rules, the
project's policy settings, and one decision. Pure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Literal

from bundlectl.policy.patterns import (
    part_matches,
    split_rule,
)

if TYPE_CHECKING:  # conditions are imported only by a policy that has them (models.py)
    from bundlectl.policy.conditions import Condition


Effect = Literal["allow", "ask", "deny"]


EFFECTS: tuple[Effect, ...] = ("deny", "ask", "allow")  # strongest first


STRENGTH: dict[str, int] = {"allow": 0, "ask": 1, "deny": 2}


DEFAULT_AGENT = "default"


def default_agent(agent: str | None) -> str:
    """The calling agent: as given (`--agent`, which typer also reads from $BUNDLECTL_AGENT),
    else `default`, which `policy.default` governs unless an agent of that name is listed."""
    return agent or DEFAULT_AGENT


@dataclass(frozen=True)
class Origin:
    """Where something was written: a file position, and the bundle when a bundle supplied it."""

    file: str
    line: int = 0
    column: int = 0
    bundle: str | None = None  # "github@1.1.0" for bundle agent defaults

    @property
    def position(self) -> str:
        """`file:line:col`."""
        return f"{self.file}:{self.line}:{self.column}" if self.line else self.file

    def __str__(self) -> str:
        return self._text

    @cached_property
    def _text(self) -> str:  # shown once per rule of every agent that inherits it
        return f"bundle {self.bundle}" if self.bundle else self.position


@dataclass(frozen=True)
class Rule:
    """One pattern with its effect, the agent it belongs to (None: policy.deny), and its origin."""

    pattern: str
    effect: Effect
    origin: Origin
    agent: str | None = None
    condition: Condition | None = None  # SPEC 10: only calls whose arguments meet it
    # An `ask` rule's `approve: out-of-band`: only an approver confirms its calls (SPEC 11),
    # never the caller's own terminal, `--yes`, elicitation or a local "always allow".
    by_approver: bool = False
    approvals: int = 1  # how many different people must approve (`approvals: 2`)

    @cached_property
    def parts(self) -> tuple[str, str]:
        return split_rule(self.pattern)

    def matches(self, server: str, tool: str) -> bool:
        server_part, tool_part = self.parts
        return part_matches(server_part, server) and part_matches(tool_part, tool)

    @property
    def head(self) -> str:
        owner = f"agents.{self.agent}.{self.effect}" if self.agent else "policy.deny"
        return f"{owner}: {self.pattern}"

    @property
    def label(self) -> str:
        approver = " (approved out of band)" if self.by_approver else ""
        if self.by_approver and self.approvals > 1:
            approver = f" (approved out of band by {self.approvals} people)"
        if self.condition is not None:
            return f"{self.head} if {self.condition.describe()}{approver}"
        return self.head + approver

    @property
    def key(self) -> str:
        """The rule as the policy digest sees it: its pattern, its conditions, and who may
        approve its calls."""
        key = self.pattern
        if self.condition is not None:
            key = f"{key} if {json.dumps(self.condition.canonical, sort_keys=True)}"
        if self.by_approver and self.approvals > 1:
            return f"{key} approve=out-of-band approvals={self.approvals}"
        return f"{key} approve=out-of-band" if self.by_approver else key


@dataclass(frozen=True)
class AgentSpec:
    """An agent's own rules (not yet inheriting) and its parents."""

    name: str
    origin: Origin
    rules: tuple[Rule, ...] = ()
    extends: tuple[tuple[str, Origin], ...] = ()


@dataclass(frozen=True)
class PolicySet:
    """Everything the engine decides from."""

    agents: Mapping[str, AgentSpec]
    default: Literal["allow", "deny"] = "allow"
    default_origin: Origin | None = None  # None: the key is absent (agix's allow)
    global_deny: tuple[Rule, ...] = ()
    pin_tools: bool = False
    locked_tools: frozenset[tuple[str, str]] | None = None  # what the lock records
    # `policy.pins`: reviewed definitions of changed tools (`server.tool` → sha256 of the live
    # definition), which `pin_tools` lets through
    pins: Mapping[str, str] = field(default_factory=dict)
    sandbox: str | None = None  # policy.sandbox as written (absent: on; `mcpio.sandbox`)


def no_rule_grants(agent: str) -> str:
    """What decided a listed agent's call no rule of it matches (its own rules did: none)."""
    return f"no rule of agent {agent!r} grants it"


@dataclass(frozen=True)
class Decision:
    """The policy's answer for one call: the effect, the rule that decided it (None: a
    default), and why. What the running call carries (its id, who made it, its trace) travels
    with the call (`calls.calldata.ToolCall`), not here."""

    agent: str
    server: str
    tool: str
    effect: Effect
    rule: Rule | None
    reason: str
    matched_effect: Effect  # before an unconfirmable `ask` became deny
    conditional: bool = False  # a rule with argument conditions names the tool (SPEC 10)
    checked: bool = False  # decided with the call's arguments
    # The grants whose conditions this call did not meet (rule and the part that failed,
    # never an argument's value), when the call was refused or asked for because of it.
    failed: tuple[str, ...] = ()
    listed: bool = field(default=True, compare=False)  # the agent is listed under agents:

    @property
    def explain(self) -> str:
        """The `policy explain` command line for this decision, as it runs (an agent that is
        not listed needs --unlisted)."""
        extra = "" if self.listed else " --unlisted"
        return f"bundlectl policy explain --agent {self.agent} {self.qualified}{extra}"

    def stricter(self, other: Decision) -> bool:
        """Whether this decision refuses more than `other` (deny > ask > allow)."""
        return STRENGTH[self.effect] > STRENGTH[other.effect]

    @property
    def qualified(self) -> str:
        return f"{self.server}.{self.tool}"

    @property
    def decided_by(self) -> str:
        """What decided, as `policy explain` says it: the rule's pattern, `policy.default` for
        an agent that is not listed, or that no rule of a listed agent grants the tool."""
        if self.rule is not None:
            return self.rule.pattern
        return "policy.default" if not self.listed else no_rule_grants(self.agent)

    @property
    def approvals_needed(self) -> int:
        """How many different people must approve the call (`approvals:` of its rule)."""
        return self.rule.approvals if self.by_approver and self.rule is not None else 1

    @property
    def by_approver(self) -> bool:
        """An `ask` whose rule says `approve: out-of-band`: only an approver confirms it."""
        return self.matched_effect == "ask" and self.rule is not None and self.rule.by_approver
