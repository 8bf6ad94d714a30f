"""The policy engine (SPEC 3). Pure: no I/O. Rules carry where they were written, so every
decision can be explained.

deny beats ask beats allow, whatever the order or specificity. An agent with allow/ask rules is an
allow-list; a deny-only agent may call everything else; an agent with no rules may call nothing;
unlisted agents get `policy.default`; `policy.deny` applies to all; with `pin_tools`, tools the lock
does not record are denied.
"""

from __future__ import annotations

import contextlib
import itertools
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from operator import itemgetter
from typing import TYPE_CHECKING, Any, TypeVar

from bundlectl.errors import UsageError
from bundlectl.policy.patterns import (
    has_wildcard,
    parse_tool_name,
    part_matches,
    regex_source,
)
from bundlectl.suggest import Suggester

if TYPE_CHECKING:  # conditions are imported only by a policy that has them (models.py)
    from bundlectl.policy.conditions import PathReader

from bundlectl.policy.inheritance import ancestors, check_extends, parent_names
from bundlectl.policy.rules import EFFECTS, Decision, Effect, PolicySet, Rule

T = TypeVar("T")
_DECIDED_KEPT = 4096  # decisions kept per agent; then they are made afresh


# One call as the conditions see it: server, tool, arguments, input schema, path reader.
_Call = tuple[str, str, "Mapping[str, Any] | None", "Mapping[str, Any] | None", "PathReader | None"]


class _Matcher:
    """The rules of one effect, indexed per server so a decision does not scan every rule.

    For each server (built on first use) the rules whose server part matches it are split into
    exact tool names (a dict) and one alternation regex of the wildcard tool parts, written in
    declaration order so the leftmost alternative that matches is the first rule that does.
    """

    def __init__(self, rules: Iterable[Rule]) -> None:
        self.rules = list(rules)
        self._servers: dict[str, tuple[dict[str, int], re.Pattern[str] | None, list[int]]] = {}

    def _index(self, server: str) -> tuple[dict[str, int], re.Pattern[str] | None, list[int]]:
        exact: dict[str, int] = {}
        wild: list[int] = []
        for index, rule in enumerate(self.rules):
            server_part, tool_part = rule.parts
            if not part_matches(server_part, server):
                continue
            if has_wildcard(tool_part):
                wild.append(index)
            else:
                exact.setdefault(tool_part, index)
        regex = None
        if wild:
            regex = re.compile(
                "|".join(f"({regex_source(self.rules[i].parts[1])})" for i in wild), re.DOTALL
            )
        entry = (exact, regex, wild)
        self._servers[server] = entry
        return entry

    def first(self, server: str, tool: str) -> Rule | None:
        """The first rule, in declaration order, that matches."""
        entry = self._servers.get(server)
        if entry is None:
            entry = self._index(server)
        exact, regex, wild = entry
        hit = exact.get(tool)
        if regex is not None:
            found = regex.fullmatch(tool)
            if found is not None and found.lastindex:
                other = wild[found.lastindex - 1]
                if hit is None or other < hit:
                    hit = other
        return None if hit is None else self.rules[hit]


@dataclass
class CompiledAgent:
    """An agent's effective policy: own and inherited rules plus policy.deny, ready to decide."""

    name: str
    listed: bool
    members: list[_Member] = field(repr=False)  # the chain's own rules, then `policy.deny`'s
    chain: list[str]  # the agent and its ancestors, nearest first
    policy: PolicySet
    _conditional_memo: dict[tuple[str, str], dict[Effect, list[Rule]]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    # Decisions no argument can change, by (server, tool, interactive): a gateway judges the
    # same few tools on every call (the policy is compiled anew when its files change).
    _decided: dict[tuple[str, str, bool], Decision] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @cached_property
    def rules(self) -> list[Rule]:
        """Every rule that applies to the agent: its own, its ancestors' (nearest first) and
        `policy.deny`, in that order."""
        return list(itertools.chain.from_iterable(m.rules for m in self.members))

    @cached_property
    def plain(self) -> dict[Effect, list[Rule]]:
        """Per effect, the rules without argument conditions, in declaration order."""
        join = itertools.chain.from_iterable
        return {e: list(join(m.plain[e] for m in self.members)) for e in EFFECTS}

    @cached_property
    def has_grants(self) -> bool:
        """Whether a rule of the chain (not `policy.deny`) allows or asks (`falls_open`)."""
        return any(m.grants for m in self.members[:-1])

    @cached_property
    def has_denies(self) -> bool:
        return any(m.denies for m in self.members[:-1])

    @cached_property
    def _matchers(self) -> dict[Effect, _Matcher]:
        """Per effect, the rules without conditions indexed for single decisions (built on the
        first `decide`; the catalog's masks never need them)."""
        return {effect: _Matcher(self.plain[effect]) for effect in EFFECTS}

    @cached_property
    def _conditional(self) -> dict[Effect, list[Rule]]:
        """Per effect, the rules with argument conditions (SPEC 10), in declaration order."""
        found: dict[Effect, list[Rule]] = {effect: [] for effect in EFFECTS}
        for member in self.members:
            for rule in member.conditioned:
                found[rule.effect].append(rule)
        return found

    def _conditional_of(self, server: str, tool: str) -> dict[Effect, list[Rule]]:
        """Per effect, the rules with conditions that name `server.tool`: found once per tool
        (a decision is then not a scan of every such rule), remembered for up to 65,536
        tools."""
        key = (server, tool)
        found = self._conditional_memo.get(key)
        if found is None:
            if len(self._conditional_memo) >= 65536:
                self._conditional_memo.clear()
            found = {
                effect: [r for r in self._conditional[effect] if r.matches(server, tool)]
                for effect in EFFECTS
            }
            self._conditional_memo[key] = found
        return found

    def _applies(self, effect: Effect, call: _Call) -> tuple[Rule | None, bool, list[str]]:
        """The first rule of `effect` that applies to this call, whether a conditional rule
        names the tool (the decision depends on the arguments), and the conditions that
        failed. Without `arguments` a conditional grant counts as applying and a conditional
        deny as not: what the call could get (listing a tool, `tools`, export)."""
        server, tool, arguments, schema, paths = call
        rule = self._matchers[effect].first(server, tool)
        conditional = self._conditional_of(server, tool)[effect]
        failed: list[str] = []
        if rule is not None or not conditional:
            return rule, bool(conditional), failed
        if arguments is None:
            return (None if effect == "deny" else conditional[0]), True, failed
        context = {"agent": self.name, "server": server, "tool": tool}
        for candidate in conditional:
            assert candidate.condition is not None
            why = candidate.condition.failed(arguments, schema, effect != "allow", context, paths)
            if why is None:
                return candidate, True, failed
            failed.append(f"{candidate.head} ({candidate.origin}): {why} does not hold")
        return None, True, failed

    @property
    def falls_open(self) -> bool:
        """Whether a tool no rule matches is allowed: an unlisted agent under `default: allow`,
        or a listed agent with deny rules only (SPEC 3)."""
        if not self.listed:
            return self.policy.default == "allow"
        return not self.has_grants and self.has_denies

    def may_reach(self, server: str) -> bool:
        """Whether some tool of `server` could be allowed or asked for: when no rule could
        grant anything there (or a deny covers every tool of it), the server need not be
        started, connected to or sent a credential for this agent."""
        denied_whole = any(
            r.parts[1] == "*" and part_matches(r.parts[0], server)
            for r in self._matchers["deny"].rules
        )
        if denied_whole:
            return False
        if self.falls_open:
            return True
        return any(
            part_matches(r.parts[0], server)
            for effect in ("allow", "ask")
            for r in (*self._matchers[effect].rules, *self._conditional[effect])
        )

    def opens(self, server: str, tools: Iterable[str]) -> bool:
        """Whether the agent may read `server`'s resources and get its prompts (SPEC 15): when
        one of the server's `tools` is allowed to it outright. Not when it may call them only
        after a person confirms (`ask`: a read has no confirmation), nor when a grant holds only
        for some arguments (SPEC 10: a read has none to judge). The one rule `serve`, `read`,
        `prompt` and `exec --follow-links` apply."""
        if not self.may_reach(server):
            return False
        for tool in tools:
            decision = self.decide(server, tool, interactive=True)
            if decision.effect == "allow" and (
                decision.rule is None or decision.rule.condition is None
            ):
                return True
        return False

    def usable(self, server: str, tools: Iterable[T], name: Callable[[T], str]) -> list[T]:
        """The tools of `server` this agent may call (allowed, or asked for): the one answer to
        "which tools may the agent use" that `serve`, `export` and `codegen` all give."""
        if not self.may_reach(server):
            return []
        return [t for t in tools if self.decide(server, name(t), interactive=True).effect != "deny"]

    def whole(self, server: str) -> Effect | None:
        """ "allow"/"ask" when every tool of `server`, declared or not, gets that effect (every
        rule that can match the server matches all of its tools); None otherwise."""
        if self.policy.pin_tools:
            return None  # tools the lock does not record are denied
        for rule in self.rules:
            server_part, tool_part = rule.parts
            if part_matches(server_part, server) and (tool_part != "*" or rule.condition):
                return None  # a rule for some tools, or some calls, of the server
        effect = self.decide(server, "\x00any tool", interactive=True).effect
        return effect if effect != "deny" else None

    @property
    def with_conditions(self) -> list[Rule]:
        """Every rule of the agent that has argument conditions."""
        return [rule for effect in EFFECTS for rule in self._conditional[effect]]

    def conditional_rules(self, server: str) -> list[Rule]:
        """The rules with argument conditions that can apply to a tool of `server`."""
        return [
            rule
            for effect in EFFECTS
            for rule in self._conditional[effect]
            if part_matches(rule.parts[0], server)
        ]

    def denies_unlisted(self, server: str, listed: Collection[str]) -> bool:
        """Whether a tool of `server` outside `listed` (a declared catalog, which the server
        may have outgrown) could be denied: a name no rule grants, or a deny rule that can
        match a name not listed (a wildcard, or a literal name the catalog lacks)."""
        if self.decide(server, "\x00any tool", interactive=True).effect == "deny":
            return True
        return any(
            part_matches(rule.parts[0], server)
            and (has_wildcard(rule.parts[1]) or rule.parts[1] not in listed)
            for rule in self._matchers["deny"].rules
        )

    def grant(self, deny: int, ask: int, allow: int, unpinned: int, full: int) -> tuple[int, int]:
        """(allowed, asked) from which rules match: the one place precedence is written.

        Each argument is a set of tools as a bitmask (bit i: tool i matched a rule of that effect;
        `unpinned`: not recorded in the lock under `pin_tools`). `decide` uses it over a set of one
        tool, the catalog's masks (`catalog.agent_row`) over every tool at once: deny beats ask
        beats allow, and what nothing matched is allowed only when the agent falls open.
        """
        open_ = full & ~(deny | unpinned)
        asked = ask & open_
        allowed = allow & open_ & ~asked
        if self.falls_open:
            allowed |= open_ & ~asked
        return allowed, asked

    def decide(
        self,
        server: str,
        tool: str,
        *,
        interactive: bool = False,
        arguments: Mapping[str, Any] | None = None,
        schema: Mapping[str, Any] | None = None,
        paths: PathReader | None = None,
    ) -> Decision:
        """The decision for a call of `server.tool`; with `arguments` (and the tool's input
        `schema`, for defaults) the rules' argument conditions are checked, path arguments as
        `paths` reads them (the server's own reading; default lexical)."""
        if any(self._conditional.values()) and any(self._conditional_of(server, tool).values()):
            given = (server, tool, arguments, schema, paths)
            deny, d_cond, _ = self._applies("deny", given)
            ask, a_cond, a_failed = self._applies("ask", given)
            allow, l_cond, l_failed = self._applies("allow", given)
            conditional = d_cond or a_cond or l_cond
            failed = a_failed + l_failed  # the grants whose conditions did not hold
            kept = None
        else:
            kept = (server, tool, interactive)
            known = self._decided.get(kept)
            if known is not None:
                return known
            deny = self._matchers["deny"].first(server, tool)
            ask = self._matchers["ask"].first(server, tool)
            allow = self._matchers["allow"].first(server, tool)
            conditional, failed = False, []
        effect, rule, reason = self.settled(server, tool, deny, ask, allow)
        final: Effect = effect
        if effect == "ask" and not interactive:
            final = "deny"
            if rule is not None and rule.by_approver:
                reason += "; only an approver can confirm it (policy.approvals)"
            else:
                reason += "; no one can confirm it here (use a terminal or --yes)"
        failed_shown: tuple[str, ...] = ()
        if effect != "allow" and failed and arguments is not None:
            reason += "; a rule's condition did not hold: " + "; ".join(failed)
            failed_shown = tuple(failed)
        if not conditional:
            made = Decision(
                self.name, server, tool, final, rule, reason, effect, listed=self.listed
            )
            if kept is not None:
                if len(self._decided) >= _DECIDED_KEPT:
                    self._decided.clear()
                self._decided[kept] = made
            return made
        return Decision(
            self.name,
            server,
            tool,
            final,
            rule,
            reason,
            effect,
            conditional=True,
            checked=arguments is not None,
            failed=failed_shown,
            listed=self.listed,
        )

    def unconditional(self, server: str, tool: str) -> tuple[Effect, Rule | None, str]:
        """What `decide` says of a tool no rule with argument conditions names (an ask as
        asked), without making a Decision: `policy diff` reads millions of cells."""
        return self.settled(
            server,
            tool,
            self._matchers["deny"].first(server, tool),
            self._matchers["ask"].first(server, tool),
            self._matchers["allow"].first(server, tool),
        )

    def settled(
        self, server: str, tool: str, deny: Rule | None, ask: Rule | None, allow: Rule | None
    ) -> tuple[Effect, Rule | None, str]:
        """The effect given the first rule of each effect that matches the tool (found here, or
        over a catalog's masks by `policy diff`), the rule that decided, and why (pinning and
        precedence: `grant`)."""
        pol = self.policy
        unpinned = (
            pol.pin_tools
            and pol.locked_tools is not None
            and (server, tool) not in pol.locked_tools
        )
        allowed, asked = self.grant(
            int(deny is not None), int(ask is not None), int(allow is not None), int(unpinned), 1
        )
        effect: Effect = "ask" if asked else "allow" if allowed else "deny"
        rule, reason = self._why(effect, deny, ask, allow, unpinned)
        return effect, rule, reason

    def _why(
        self,
        effect: Effect,
        deny: Rule | None,
        ask: Rule | None,
        allow: Rule | None,
        unpinned: bool,
    ) -> tuple[Rule | None, str]:
        """The rule that decided, and the reason in words."""
        if deny is not None:
            return deny, f"denied by {deny.label}"
        if unpinned:
            return None, "policy.pin_tools: the lock does not record this tool"
        if ask is not None:
            return ask, f"needs confirmation by {ask.label}"
        if allow is not None:
            return allow, f"allowed by {allow.label}"
        pol = self.policy
        if not self.listed:
            where = f" ({pol.default_origin})" if pol.default_origin else " (absent: allow)"
            return None, (
                f"agent {self.name!r} is not listed under agents; policy.default is {effect}{where}"
            )
        if self.has_grants:
            return None, f"no allow or ask rule of agent {self.name!r} matches"
        if self.has_denies:
            return None, f"agent {self.name!r} has only deny rules and none matches"
        return None, f"agent {self.name!r} has no rules: it may call nothing"

    def matching(self, server: str, tool: str) -> list[Rule]:
        """Every rule without conditions that matches, in effect order then declaration order
        (for explain)."""
        return [
            r for effect in EFFECTS for r in self._matchers[effect].rules if r.matches(server, tool)
        ]

    def conditional_matching(self, server: str, tool: str) -> list[Rule]:
        """The rules with argument conditions that name `server.tool`, in effect order."""
        return [
            r for effect in EFFECTS for r in self._conditional[effect] if r.matches(server, tool)
        ]


@dataclass(frozen=True)
class _Member:
    """One agent's own rules (or `policy.deny`'s) as its descendants' compiled agents take
    them: all, those without conditions per effect, those with conditions, and whether any
    grants or denies."""

    rules: tuple[Rule, ...]
    plain: dict[Effect, tuple[Rule, ...]]
    conditioned: tuple[Rule, ...]
    grants: bool
    denies: bool

    @classmethod
    def of(cls, rules: tuple[Rule, ...]) -> _Member:
        plain: dict[Effect, list[Rule]] = {effect: [] for effect in EFFECTS}
        conditioned = []
        for rule in rules:
            if rule.condition is None:
                plain[rule.effect].append(rule)
            else:
                conditioned.append(rule)
        return cls(
            rules,
            {effect: tuple(found) for effect, found in plain.items()},
            tuple(conditioned),
            any(r.effect in ("allow", "ask") for r in rules),
            any(r.effect == "deny" for r in rules),
        )


class Policy:
    """The engine over one PolicySet. Load-time errors (extends) are raised on construction."""

    def __init__(self, policy_set: PolicySet) -> None:
        self.set = policy_set
        self._compiled: dict[str, CompiledAgent] = {}
        self._members: dict[str, _Member] = {}
        self._chains: dict[str, list[str]] = {}
        check_extends(policy_set.agents)

    @property
    def agents(self) -> list[str]:
        return sorted(self.set.agents)

    def agent(self, name: str) -> CompiledAgent:
        """The compiled policy of an agent (listed or not): its chain's rules, each member's
        sorted once per policy (an agent deep in `extends` inherits thousands of rules, and
        shares most of its ancestors with its siblings)."""
        found = self._compiled.get(name)
        if found is None:
            chain = self._chains.get(name)
            if chain is None:
                chain = self._chains[name] = ancestors(self._parents, name)
            members = self._members_of(chain)
            members.append(self._global)
            found = self._compiled[name] = CompiledAgent(
                name, name in self.set.agents, members, chain, self.set
            )
        return found

    def share_chains(self, other: Policy) -> None:
        """Use `other`'s `extends` chains from now on when every agent has the same parents
        (the two sides of a `policy diff`, which compile thousands of the same agents)."""
        if other is not self and other._parents == self._parents:
            other._chains.update(self._chains)
            self._chains = other._chains

    @cached_property
    def _parents(self) -> dict[str, list[str]]:
        return parent_names(self.set.agents)

    def _members_of(self, chain: list[str]) -> list[_Member]:
        """The chain's members, in its order. Its ancestors' are made already as a rule (they
        were compiled, or inherited, before): then they are looked up at C speed, a hundred
        at a time in a long `extends` chain."""
        if len(chain) > 2:
            self._member(chain[0])
            with contextlib.suppress(KeyError):
                return list(itemgetter(*chain)(self._members))
        return [self._member(m) for m in chain]

    def _member(self, name: str) -> _Member:
        found = self._members.get(name)
        if found is None:
            found = self._members[name] = _Member.of(self.set.agents[name].rules)
        return found

    @cached_property
    def _global(self) -> _Member:
        return _Member.of(self.set.global_deny)

    def unlisted(self, agent: str) -> str | None:
        """None when `agent` is listed under `agents:`; else what it gets, with a did-you-mean
        (an unlisted name is governed by `policy.default`, SPEC 3 — often a typo)."""
        if agent in self.set.agents:
            return None
        close = Suggester(self.set.agents).closest(agent)
        guess = f"; did you mean {close[0]!r}?" if close else ""
        return (
            f"agent {agent!r} is not listed under agents: policy.default "
            f"({self.set.default}) applies{guess}"
        )

    def require_listed(self, agents: Iterable[str], *, unlisted: bool = False) -> None:
        """Refuse (exit 2) to make an artifact or a review for an agent that is not listed —
        unless `unlisted` says that what `policy.default` gives such an agent is what is wanted."""
        if unlisted:
            return
        for agent in agents:
            if agent not in self.set.agents:
                close = Suggester(self.set.agents).closest(agent)
                listed = ", ".join(self.agents) or "none"
                which = "pass --agent NAME" if agent == "default" else "agents"
                raise UsageError(
                    f"agent {agent!r} is not listed under agents"
                    + (f"; did you mean {close[0]!r}?" if close else ""),
                    hint=f"{which}: {listed}; or --unlisted, for what policy.default "
                    f"({self.set.default}) gives an agent that is not listed",
                )

    def decide(self, agent: str, qualified: str, *, interactive: bool = False) -> Decision:
        server, tool = parse_tool_name(qualified)
        return self.agent(agent).decide(server, tool, interactive=interactive)
