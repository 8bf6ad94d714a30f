"""What a change to a project does to who may do what (`bundlectl policy diff`, #59): two
resolved projects compared decision by decision over both catalogs, with the engine `lint`,
`matrix` and `explain` use. Pure: no I/O.

For each agent of either side and each tool of either catalog, a cell is what the agent gets
(allow; ask; ask, approved out of band by N people; deny; or absent: the tool is not in that
side's catalog) together with the rules with argument conditions that name the tool, as
written. A cell that differs is a change, told with the deciding rule and its file:line on each
side; it *widens* when the agent gets more without anyone asking (deny < out-of-band ask < ask <
allow, and a new conditional grant counts as half a step). So a new bundle version whose tools
fall under an existing wildcard shows up as tools gained. Besides the cells: who may act as each
agent (`match:`, token references by name, `gateway.auth`), the quotas, tool pinning, the
sandbox setting and the servers themselves (by the lock's digest of each).

Agents whose rules, inherited rules and global denies are the same on both sides, over the same
tools, are skipped without deciding anything: a 3,000-agent review of a one-line change decides
only for the agents it touches.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Literal

from bundlectl.policy.catalog import agent_row
from bundlectl.policy.rules import Rule
from bundlectl.resolve.resolved import GATEWAY_AUTH, Resolution, identity_digests, server_digest
from bundlectl.spread import Spread, serially

if TYPE_CHECKING:
    from bundlectl.policy.engine import CompiledAgent

Kind = Literal["widened", "narrowed", "changed"]
# What decides a tool, in the order `decide` asks (SPEC 3): deny, pinning, ask, allow, default.
_DECIDED_BY: tuple[Literal["deny", "pin", "ask", "allow", "default"], ...] = (
    "deny",
    "pin",
    "ask",
    "allow",
    "default",
)
ABSENT = "absent"


@dataclass(frozen=True)
class Cell:
    """One agent's access to one tool on one side."""

    effect: str  # allow | ask | ask (out of band[, N people]) | deny | absent
    rank: float
    conditions: tuple[str, ...] = ()  # rules with argument conditions naming it, as written
    rule: str | None = None  # the deciding rule (None: a default)
    where: str | None = None  # its file:line:col
    reason: str = ""

    @property
    def shown(self) -> str:
        if not self.conditions:
            return self.effect
        return f"{self.effect}; " + "; ".join(self.conditions)


ABSENT_CELL = Cell(ABSENT, 0.0, reason="not in this side's catalog")


@dataclass(frozen=True)
class ToolChange:
    """One agent's change over a group of tools that changed alike: the same access before and
    after, decided by the same rules (a new global deny is one change of many tools)."""

    agent: str
    tools: tuple[str, ...]
    before: Cell
    after: Cell

    @property
    def tool(self) -> str:
        return self.tools[0]

    @property
    def kind(self) -> Kind:
        if self.after.rank > self.before.rank:
            return "widened"
        if self.after.rank < self.before.rank:
            return "narrowed"
        return "changed"


@dataclass(frozen=True)
class OtherChange:
    """A change outside the cells: identities, quotas, pinning, sandbox, servers."""

    what: str  # "identity" | "limits" | "pinning" | "sandbox" | "server"
    subject: str  # the agent, the server, or the setting
    before: str | None
    after: str | None
    widens: bool  # what it does could give someone more (always true for identities)


@dataclass
class PolicyDiff:
    tools: list[ToolChange] = field(default_factory=list)
    other: list[OtherChange] = field(default_factory=list)
    agents_compared: int = 0

    def __bool__(self) -> bool:
        return bool(self.tools or self.other)

    def by_agent(self) -> dict[str, list[ToolChange]]:
        """Each agent's changes, widened first, then by their first tool."""
        order = {"widened": 0, "changed": 1, "narrowed": 2}
        out: dict[str, list[ToolChange]] = {}
        for change in sorted(self.tools, key=lambda c: (c.agent, order[c.kind], c.tool)):
            out.setdefault(change.agent, []).append(change)
        return out

    def counts(self) -> dict[str, int]:
        """Tools (per agent) widened, narrowed and otherwise changed, and the other changes."""
        found = {"widened": 0, "narrowed": 0, "changed": 0}
        for change in self.tools:
            found[change.kind] += len(change.tools)
        found["other"] = len(self.other)
        return found


def _effect(effect: str, rule: Rule | None) -> tuple[str, float]:
    if effect == "ask" and rule is not None and rule.by_approver:
        people = f", {rule.approvals} people" if rule.approvals > 1 else ""
        return f"ask (out of band{people})", 1.0 - min(rule.approvals, 9) / 100
    return effect, {"allow": 3.0, "ask": 2.0, "deny": 0.0}[effect]


class _Cells:
    """Cells of one side, made once per deciding rule: the words and position of a rule are
    the same for every tool it decides."""

    def __init__(self) -> None:
        self._made: dict[tuple[Any, ...], Cell] = {}

    def of(self, agent: CompiledAgent, server: str, tool: str) -> Cell:
        conditional = agent.conditional_matching(server, tool) if agent.with_conditions else []
        if conditional:
            decision = agent.decide(server, tool, interactive=True)
            return self.made_of(
                decision.matched_effect, decision.rule, decision.reason, conditional
            )
        effect, rule, reason = agent.unconditional(server, tool)
        return self.made_of(effect, rule, reason, [])

    def made_of(
        self, matched: str, rule: Rule | None, reason: str, conditional: list[Rule]
    ) -> Cell:
        key = (matched, id(rule), reason if rule is None else "", *map(id, conditional))
        found = self._made.get(key)
        if found is None:
            effect, rank = _effect(matched, rule)
            if any(r.effect in ("allow", "ask") for r in conditional) and rank < 3.0:
                rank += 0.5  # some calls of it get more, depending on their arguments
            found = self._made[key] = Cell(
                effect,
                rank,
                tuple(r.label for r in conditional),
                rule.label if rule is not None else None,
                rule.origin.position if rule is not None else None,
                reason,
            )
        return found


def _signatures(resolution: Resolution) -> dict[str, str]:
    """Per listed agent, a digest of its chain: its own rules and its parents' digests (so the
    whole `extends` chain, in order). With `_common`, everything its decisions follow from
    besides the catalog. Made once per agent, without compiling any (a chain is walked with a
    stack: it may be thousands deep)."""
    agents = resolution.policy.set.agents
    done: dict[str, str] = {}
    for start in agents:
        stack = [start]
        while stack:
            name = stack[-1]
            if name in done:
                stack.pop()
                continue
            spec = agents[name]
            waiting = [p for p, _ in spec.extends if p in agents and p not in done]
            if waiting:
                stack.extend(waiting)
                continue
            stack.pop()
            own = [_rule_key(r) for r in spec.rules]
            parents = [(p, done.get(p)) for p, _ in spec.extends]
            text = repr((own, parents))
            done[name] = hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
    return done


def _common(resolution: Resolution) -> str:
    """What every agent's decisions follow from: the global denies, the default, pinning."""
    policy = resolution.policy.set
    return repr((policy.default, policy.pin_tools, [_rule_key(r) for r in policy.global_deny]))


def _rule_key(rule: Rule) -> tuple[str, str, str | None]:
    return (rule.effect, rule.key, rule.agent)


class _Side:
    """One side's catalog seen in the union of both sides' tools: masks of tools (bit u: the
    u-th tool of the union, in catalog order) and the cells made so far."""

    def __init__(self, resolution: Resolution, union: list[tuple[str, str]]) -> None:
        self.resolution = resolution
        self.catalog = catalog = resolution.catalog
        own = [(t.server, t.tool) for t in catalog.tools]
        self.same = own == union  # the usual case: no bundle brought or took a tool
        self.inverse = [catalog.index.get(key, len(own)) for key in union]
        self.present = self.to_union(catalog.full)
        policy = resolution.policy.set
        locked = policy.locked_tools if policy.pin_tools else None
        self.unpinned = (
            0
            if locked is None
            else self.present & ~sum(1 << u for u, key in enumerate(union) if key in locked)
        )
        self.cells = _Cells()
        self._masks: dict[str, int] = {}

    def to_union(self, mask: int) -> int:
        """A mask over this side's catalog as a mask over the union (C-speed string work)."""
        if self.same or not self.inverse:
            return mask
        bits = format(mask, f"0{len(self.catalog)}b")[::-1] + "0"  # "0": absent here
        picked = itemgetter(*self.inverse)(bits)
        text = picked if isinstance(picked, str) else "".join(picked)
        return int(text[::-1], 2)

    def mask(self, pattern: str) -> int:
        found = self._masks.get(pattern)
        if found is None:
            found = self._masks[pattern] = self.to_union(self.catalog.mask(pattern))
        return found

    def prepare(self, agents: list[str]) -> None:
        """The masks the agents' rows are made of — each rule's of their whole `extends` chains,
        and the global denies' — made here once, rather than again by each process `spread`
        forks (each would make nearly all of them: neighbours share ancestors)."""
        policy = self.resolution.policy.set
        for name in agents:
            self.catalog.inherited_masks(policy.agents, name)
        self.catalog.rules_mask(policy.global_deny)

    def row(self, agent: CompiledAgent) -> tuple[int, int]:
        """The tools the agent may call outright and those it is asked about, over the union."""
        row = agent_row(agent, self.catalog)
        return self.to_union(row.allow & ~row.ask), self.to_union(row.ask)

    def parts(
        self, agent: CompiledAgent, wanted: int, union: list[tuple[str, str]]
    ) -> list[tuple[int, Cell]]:
        """`wanted` (tools no rule with conditions names) split by what decides them, as
        `decide` does: the first deny rule that matches, pinning, the first ask rule, the
        first allow rule, or the agent's default; tools not in this side's catalog are
        absent. Each part is one cell."""
        parts: list[tuple[int, Cell]] = []
        if wanted & ~self.present:
            parts.append((wanted & ~self.present, ABSENT_CELL))
        left = wanted & self.present
        for effect in _DECIDED_BY:
            if not left:
                break
            if effect == "pin":
                candidates: Iterable[tuple[int, Rule | None]] = [(self.unpinned, None)]
            elif effect == "default":
                candidates = [(left, None)]
            else:
                candidates = (  # lazily: the search ends once every wanted tool is decided
                    (self.mask(r.pattern), r) for m in agent.members for r in m.plain[effect]
                )
            for mask, rule in candidates:
                hit = mask & left
                if not hit:
                    continue
                left &= ~hit
                server, tool = union[(hit & -hit).bit_length() - 1]
                found = agent.settled(
                    server,
                    tool,
                    rule if effect == "deny" else None,
                    rule if effect == "ask" else None,
                    rule if effect == "allow" else None,
                )
                parts.append((hit, self.cells.made_of(*found, [])))
                if not left:
                    break
        return parts

    def conditional(self, agent: CompiledAgent) -> int:
        found = 0
        for rule in agent.with_conditions:
            found |= self.mask(rule.pattern)
        return found

    def naming(self, agent: CompiledAgent, tools: int) -> list[tuple[int, tuple[Any, ...] | None]]:
        """`tools` split by everything their decision follows from: the agent's rules that name
        a tool, in order (with their conditions and approvers), whether it is pinned, and the
        agent's default (None: not in this side's catalog). Split mask by mask, as `parts`
        does: the parts are few where the tools are thousands."""
        if not tools:
            return []
        split: list[tuple[int, tuple[Any, ...]]] = []
        if tools & self.present:
            split.append((tools & self.present, ()))
        for rule in agent.rules:
            named = self.mask(rule.pattern) & tools
            if not named:
                continue
            key = _rule_key(rule)
            split = [
                piece
                for mask, keys in split
                for piece in ((mask & ~named, keys), (mask & named, (*keys, key)))
                if piece[0]
            ]
        fallback = (agent.listed, agent.falls_open, agent.has_grants, agent.has_denies)
        found: list[tuple[int, tuple[Any, ...] | None]] = []
        if tools & ~self.present:
            found.append((tools & ~self.present, None))
        for mask, keys in split:
            for pinned, part in ((False, mask & ~self.unpinned), (True, mask & self.unpinned)):
                if part:
                    found.append((part, (fallback, pinned, *keys)))
        return found


def _bits(mask: int) -> Iterator[int]:
    text = bin(mask)[:1:-1]
    at = text.find("1")
    while at >= 0:
        yield at
        at = text.find("1", at + 1)


def compare(
    before: Resolution,
    after: Resolution,
    *,
    agents: list[str] | None = None,
    spread: Spread = serially,
) -> PolicyDiff:
    """What changes from `before` to `after` (only for `agents`, when given); the agents whose
    decisions may differ are compared as `spread` runs the work (over several cores, by the
    command line)."""
    found = PolicyDiff()
    union = sorted({(t.server, t.tool) for t in (*before.catalog.tools, *after.catalog.tools)})
    after.catalog.share_masks(before.catalog)
    after.policy.share_chains(before.policy)
    sides = _Side(before, union), _Side(after, union)
    same_tools = sides[0].same and sides[1].same and _locked(before) == _locked(after)
    listed = sorted(set(before.policy.agents) | set(after.policy.agents))
    signed_before, signed_after = _signatures(before), _signatures(after)
    same_common = _common(before) == _common(after)
    names = agents if agents is not None else listed
    found.agents_compared = len(names)
    compared = [
        name
        for name in names
        if not (same_tools and same_common)  # (a tool may fall under any agent's rule)
        or signed_before.get(name) is None
        or signed_before.get(name) != signed_after.get(name)
    ]
    # Of these, the agents whose own chains are the same on both sides (a global deny
    # changed, say): a tool asked on both sides is asked by the same rule on both.
    same_chain = {
        name
        for name in compared
        if signed_before.get(name) is not None and signed_before.get(name) == signed_after.get(name)
    }
    shown = [f"{server}.{tool}" for server, tool in union]

    def changes(some: Sequence[str]) -> list[list[ToolChange]]:
        return [_agent_changes(name, sides, union, shown, name in same_chain) for name in some]

    for side in sides:  # what every share of the work reads, made once before they part
        side.prepare(compared)
    for agent_changes in spread(changes, compared):
        found.tools.extend(agent_changes)
    found.other.extend(_identities(before, after))
    found.other.extend(_settings(before, after))
    found.other.extend(_servers(before, after))
    return found


def _agent_changes(
    name: str,
    sides: tuple[_Side, _Side],
    union: list[tuple[str, str]],
    names: list[str],
    same_chain: bool,
) -> list[ToolChange]:
    """One agent's cells that differ between the two sides, grouped by their two cells
    (`same_chain`: its own rules and its whole `extends` chain are the same on both sides)."""
    old_side, new_side = sides
    old = old_side.resolution.policy.agent(name)
    new = new_side.resolution.policy.agent(name)
    allow_old, ask_old = old_side.row(old)
    allow_new, ask_new = new_side.row(new)
    # What may differ: a different effect, or an ask on both sides (out of band, by how
    # many people) — unless the chain is the same: the first ask rule that matches a tool is
    # then the same rule on both sides (the global denies add no ask, and pinning or a deny
    # would have made it no ask). A tool a rule with conditions names is decided on its own.
    conditional = old_side.conditional(old) | new_side.conditional(new)
    wanted = (allow_old ^ allow_new) | (ask_old ^ ask_new)
    if not same_chain:
        wanted |= ask_old & ask_new
    wanted &= ~conditional
    groups: dict[tuple[Cell, Cell], list[str]] = {}
    parts_new = new_side.parts(new, wanted, union)
    for mask_old, cell_old in old_side.parts(old, wanted, union):
        for mask_new, cell_new in parts_new:
            both = mask_old & mask_new
            if both and _meaning(cell_old) != _meaning(cell_new):
                groups.setdefault((cell_old, cell_new), []).extend(names[u] for u in _bits(both))
    # Decided where the rules that name the tools differ (or where they are present on
    # one side only), once per set of tools named alike: equal rules over a tool decide
    # it equally. In the order of the tools, as the cells above.
    named_new = new_side.naming(new, conditional)
    differing = [
        (both, key_old, key_new)
        for mask_old, key_old in old_side.naming(old, conditional)
        for mask_new, key_new in named_new
        if key_old != key_new and (both := mask_old & mask_new)
    ]
    for both, key_old, key_new in sorted(differing, key=lambda d: d[0] & -d[0]):
        u = (both & -both).bit_length() - 1
        cell_old = ABSENT_CELL if key_old is None else old_side.cells.of(old, *union[u])
        cell_new = ABSENT_CELL if key_new is None else new_side.cells.of(new, *union[u])
        if _meaning(cell_old) != _meaning(cell_new):
            groups.setdefault((cell_old, cell_new), []).extend(names[u] for u in _bits(both))
    return [
        ToolChange(name, tuple(sorted(tools)), was, now) for (was, now), tools in groups.items()
    ]


def _meaning(cell: Cell) -> tuple[str, tuple[str, ...]]:
    """What a cell means to a caller: a tool not in the catalog is as uncallable as a denied
    one (a removed tool that was denied, or a new one that is, changes nothing)."""
    return ("deny" if cell.effect == ABSENT else cell.effect, cell.conditions)


def _locked(resolution: Resolution) -> frozenset[tuple[str, str]] | None:
    return resolution.policy.set.locked_tools if resolution.policy.set.pin_tools else None


def _identities(before: Resolution, after: Resolution) -> Iterator[OtherChange]:
    """Who may act as each agent: its `match:` and token reference, and `gateway.auth`."""
    old = identity_digests(before.project.config)
    new = identity_digests(after.project.config)
    for key in sorted(set(old) | set(new)):
        if old.get(key) == new.get(key):
            continue
        if key == GATEWAY_AUTH:
            yield OtherChange(
                "identity",
                GATEWAY_AUTH,
                _auth_text(before),
                _auth_text(after),
                widens=True,
            )
        else:
            yield OtherChange(
                "identity",
                key,
                _who_text(before, key),
                _who_text(after, key),
                widens=True,
            )


def _who_text(resolution: Resolution, agent: str) -> str | None:
    rules = resolution.project.config.agents.get(agent)
    if rules is None:
        return None
    parts = []
    if rules.match:
        parts.append("match: " + _flow(rules.match))
    if rules.token:
        parts.append(f"token: {rules.token}")  # a ${VAR} reference, never a value
    return ", ".join(parts) or "no match: or token"


def _auth_text(resolution: Resolution) -> str | None:
    auth = resolution.project.config.gateway.auth
    if auth is None:
        return None
    issuers = ", ".join(f"{i.issuer} (aud {', '.join(i.audience)})" for i in auth.issuers)
    return f"issuers: {issuers or 'none'}; unmatched: {auth.unmatched}"


def _flow(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _settings(before: Resolution, after: Resolution) -> Iterator[OtherChange]:
    old, new = before.project.config.policy, after.project.config.policy
    limits_old = _limits(before)
    limits_new = _limits(after)
    for gone in [x for x in limits_old if x not in limits_new]:
        yield OtherChange("limits", "limits", gone, None, widens=True)
    for added in [x for x in limits_new if x not in limits_old]:
        yield OtherChange("limits", "limits", None, added, widens=False)
    if old.pin_tools != new.pin_tools:
        yield OtherChange(
            "pinning", "policy.pin_tools", str(old.pin_tools), str(new.pin_tools), not new.pin_tools
        )
    for name in sorted(set(old.pins) | set(new.pins)):  # reviewed definitions of changed tools
        was, now = old.pins.get(name), new.pins.get(name)
        if was != now:  # a newly accepted definition lets a changed tool through: a widening
            yield OtherChange("pinning", f"policy.pins {name}", was, now, now is not None)
    order = {"required": 2, "on": 1, "off": 0}
    was, now = old.sandbox or "on", new.sandbox or "on"  # absent: on
    if was != now:
        yield OtherChange("sandbox", "policy.sandbox", was, now, order[now] < order[was])


def _limits(resolution: Resolution) -> list[str]:
    return [
        _flow(limit.model_dump(mode="json", by_alias=True, exclude_defaults=True))
        for limit in resolution.project.config.limits
    ]


def _servers(before: Resolution, after: Resolution) -> Iterator[OtherChange]:
    """Servers added, removed or changed (command, URL, environment, auth, sandbox: the lock's
    digest of each)."""
    old, new = before.merged.servers, after.merged.servers
    for name in sorted(set(old) | set(new)):
        was, now = old.get(name), new.get(name)
        if (
            was is not None
            and now is not None
            and server_digest(was.spec.model_dump(mode="json"))
            == server_digest(now.spec.model_dump(mode="json"))
        ):
            continue
        yield OtherChange(
            "server",
            name,
            _server_text(before, name) if was is not None else None,
            _server_text(after, name) if now is not None else None,
            widens=True,
        )


def _server_text(resolution: Resolution, name: str) -> str:
    server = resolution.merged.servers[name]
    spec = server.spec
    what = spec.url if spec.transport != "stdio" else " ".join([spec.command or "", *spec.args])
    source = f" from {server.bundle}" if server.bundle else ""
    sandbox = ""
    if spec.sandbox is not None:
        sandbox = "; sandbox: " + _flow(spec.sandbox.model_dump(mode="json", exclude_defaults=True))
    return f"{spec.transport}: {what}{source}{sandbox}"
