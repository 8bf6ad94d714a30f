"""The universe of tools, and the sets of tools each rule matches over it. Pure.

A match set is an int bitmask over the catalog's order, computed once per pattern. Agents, the
policy matrix and lint's exact analyses combine masks instead of deciding tool by tool.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from bundlectl.policy.engine import CompiledAgent
from bundlectl.policy.patterns import (
    SEPARATOR,
    compiled,
    has_wildcard,
    in_joined,
    part_matches,
    split_rule,
)
from bundlectl.policy.rules import EFFECTS, AgentSpec, Effect, Rule

if TYPE_CHECKING:  # a tool's declared spec, as the config's model has it
    from bundlectl.config.models import ToolSpec

_DESTRUCTIVE_NAME = re.compile(
    r"(^|[_\-./])(delete|remove|rm|write|push|exec|run|drop|destroy|kill|uninstall|apply|merge|"
    r"update|patch|create|move|rename|truncate|reset|revert|force)([_\-./]|$)",
    re.IGNORECASE,
)


def is_destructive(spec: ToolSpec) -> bool:
    """Whether a tool may change or destroy things: its annotations say so, or, without a
    `readOnlyHint` or `destructiveHint: false`, its name holds a verb such as delete or write."""
    notes = spec.annotations
    if notes.get("destructiveHint") is True:
        return True
    if notes.get("readOnlyHint") is True or notes.get("destructiveHint") is False:
        return False
    return bool(_DESTRUCTIVE_NAME.search(spec.name))


def in_class(spec: ToolSpec | None, kind: str) -> bool:
    """Whether a tool is of an annotation class; a tool without the annotation (or without a
    declared definition) counts as the unsafe side: not read-only, destructive, open-world."""
    notes: dict[str, Any] = spec.annotations if spec is not None else {}
    read_only = notes.get("readOnlyHint") is True
    if kind == "read-only":
        return read_only
    if kind == "destructive":
        return not read_only and notes.get("destructiveHint") is not False
    return notes.get("openWorldHint") is not False  # open-world


@dataclass(frozen=True)
class ToolRef:
    """One tool of the catalog: its qualified name and its declared definition."""

    server: str
    tool: str
    spec: ToolSpec | None = field(default=None, compare=False)

    @property
    def qualified(self) -> str:
        return f"{self.server}.{self.tool}"

    @property
    def description(self) -> str:
        return self.spec.description if self.spec is not None else ""


# '0' and '1' to 0 and 1: a mask's binary digits as selectors for itertools.compress.
_DIGIT_VALUES = bytes.maketrans(b"01", b"\x00\x01")


def _bits(mask: int) -> bytes:
    """One byte per bit of `mask`, lowest first: every step in C (walking the set bits one by
    one costs a big-integer operation each, quadratic on masks of thousands of tools)."""
    return bin(mask)[:1:-1].encode().translate(_DIGIT_VALUES) if mask > 0 else b""


class Catalog:
    """An ordered set of tools with per-pattern match masks."""

    def __init__(self, tools: Iterable[ToolRef]) -> None:
        unique = {(t.server, t.tool): t for t in tools}
        self.tools: list[ToolRef] = [unique[key] for key in sorted(unique)]
        self.index = {(t.server, t.tool): i for i, t in enumerate(self.tools)}
        self.by_server: dict[str, list[int]] = {}
        for i, t in enumerate(self.tools):
            self.by_server.setdefault(t.server, []).append(i)
        self.full = (1 << len(self.tools)) - 1
        self._masks: dict[str, int] = {}
        self._inherited: dict[
            int, tuple[Mapping[str, AgentSpec], dict[str, tuple[int, int, int]]]
        ] = {}

    def __len__(self) -> int:
        return len(self.tools)

    def mask(self, pattern: str) -> int:
        """Bitmask of the tools `pattern` matches."""
        cached = self._masks.get(pattern)
        if cached is None:
            cached = self._masks[pattern] = self._compute(pattern)
        return cached

    def share_masks(self, other: Catalog) -> None:
        """Use `other`'s masks from now on when it holds the same tools (two sides of a
        `policy diff`, whose rules are mostly the same patterns)."""
        if other is not self and other.index.keys() == self.index.keys():
            other._masks.update(self._masks)
            self._masks = other._masks

    def mask_casefold(self, pattern: str) -> int:
        """Bitmask of the tools `pattern` matches when case is ignored (lint BCL208)."""
        server, tool = split_rule(pattern)
        if not has_wildcard(server) and not has_wildcard(tool):  # the common case: a dict hit
            return self._folded.get((server.lower(), tool.lower()), 0)
        return self._compute(pattern, casefold=True)

    @cached_property
    def _folded(self) -> dict[tuple[str, str], int]:
        folded: dict[tuple[str, str], int] = {}
        for i, ref in enumerate(self.tools):
            key = (ref.server.lower(), ref.tool.lower())
            folded[key] = folded.get(key, 0) | 1 << i
        return folded

    def _compute(self, pattern: str, *, casefold: bool = False) -> int:
        server, tool = split_rule(pattern)
        if not casefold and not has_wildcard(server):
            servers = [server] if server in self.by_server else []
        else:
            servers = [s for s in self.by_server if part_matches(server, s, casefold=casefold)]
        if not casefold and not has_wildcard(tool):
            return sum(1 << self.index[(s, tool)] for s in servers if (s, tool) in self.index)
        bits = 0
        found = in_joined(tool, casefold=casefold)
        joined = self._joined if SEPARATOR not in tool else {}
        for s in servers:
            names = joined.get(s)
            if names is None:  # a name (or the pattern) holds the separator: name by name
                regex = compiled(tool, casefold=casefold)
                for i in self.by_server[s]:
                    if regex.fullmatch(self.tools[i].tool):
                        bits |= 1 << i
                continue
            text, index_at = names
            for match in found.finditer(text):
                bits |= 1 << index_at[match.start()]
        return bits

    @cached_property
    def _joined(self) -> dict[str, tuple[str, dict[int, int]]]:
        """Per server, its tool names joined for `in_joined`, and the catalog index of the name
        that starts at each offset (a server with a name holding the separator is left out)."""
        found: dict[str, tuple[str, dict[int, int]]] = {}
        for server, indexes in self.by_server.items():
            names = [self.tools[i].tool for i in indexes]
            if any(SEPARATOR in name for name in names):
                continue
            index_at, offset = {}, 1
            for i, name in zip(indexes, names, strict=True):
                index_at[offset] = i
                offset += len(name) + 1
            found[server] = (SEPARATOR + SEPARATOR.join(names) + SEPARATOR, index_at)
        return found

    @cached_property
    def destructive(self) -> int:
        """Bitmask of the tools `is_destructive` says may change or destroy things."""
        bits = 0
        for i, ref in enumerate(self.tools):
            if ref.spec is not None and is_destructive(ref.spec):
                bits |= 1 << i
        return bits

    def class_mask(self, kind: str) -> int:
        """Bitmask of the tools of an annotation class (`in_class`); for `destructive` also
        those `is_destructive` judges so by name: a policy's invariants fail closed."""
        bits = 0
        for i, ref in enumerate(self.tools):
            if in_class(ref.spec, kind) or (
                kind == "destructive" and ref.spec is not None and is_destructive(ref.spec)
            ):
                bits |= 1 << i
        return bits

    def spec(self, server: str, tool: str) -> ToolSpec | None:
        """The declared definition of `server.tool`, or None."""
        index = self.index.get((server, tool))
        return self.tools[index].spec if index is not None else None

    def input_schema(self, server: str, tool: str) -> dict[str, Any] | None:
        """The declared input schema of `server.tool` (its `default`s fill in omitted
        arguments when a decision checks conditions), or None."""
        index = self.index.get((server, tool))
        spec = self.tools[index].spec if index is not None else None
        schema = spec.input_schema if spec is not None else None
        return schema if isinstance(schema, dict) else None

    def members(self, mask: int, limit: int | None = None) -> list[ToolRef]:
        """The tools in `mask` (the first `limit`), in catalog order."""
        return list(itertools.islice(itertools.compress(self.tools, _bits(mask)), limit))

    def names(self, mask: int) -> list[str]:
        """The qualified names of the tools in `mask`, in catalog order."""
        return list(itertools.compress(self._qualified, _bits(mask)))

    @cached_property
    def _qualified(self) -> list[str]:
        return [ref.qualified for ref in self.tools]

    def rules_mask(self, rules: Sequence[Rule]) -> int:
        """The tools the rules may apply to: a deny with argument conditions may not hold for
        a call, so it is left out; a grant with conditions may (what the agent could call)."""
        bits = 0
        for rule in rules:
            if rule.condition is None or rule.effect != "deny":
                bits |= self.mask(rule.pattern)
        return bits

    def inherited_masks(self, agents: Mapping[str, AgentSpec], name: str) -> tuple[int, int, int]:
        """(deny, ask, allow) masks of an agent's own and inherited rules.

        Each agent's masks are built once from its own rules and its parents' masks, so long
        `extends` chains cost one OR per parent instead of one mask per inherited rule.
        """
        # Keyed by the mapping's identity, which the entry keeps alive (so the id is not reused).
        memo = self._inherited.setdefault(id(agents), (agents, {}))[1]
        stack, active = [(name, False)], set()
        while stack:
            current, expanded = stack.pop()
            if current in memo or current not in agents:
                continue
            parents = [p for p, _ in agents[current].extends if p in agents]
            if not expanded:
                active.add(current)
                stack.append((current, True))
                # An extends cycle is a load error; a parent still open is skipped, not looped.
                stack.extend((p, False) for p in parents if p not in memo and p not in active)
                continue
            active.discard(current)
            rules = agents[current].rules
            own = [self.rules_mask([r for r in rules if r.effect == e]) for e in EFFECTS]
            for parent in parents:
                inherited = memo.get(parent, (0, 0, 0))
                own = [mine | theirs for mine, theirs in zip(own, inherited, strict=True)]
            memo[current] = (own[0], own[1], own[2])
        return memo.get(name, (0, 0, 0))


@dataclass(frozen=True)
class Row:
    """One agent's effect on every tool of the catalog, as masks (ask as if confirmable)."""

    agent: str
    allow: int
    ask: int
    conditional: int = 0  # tools a rule with argument conditions names: "depends on the call"

    def effect(self, index: int) -> Effect:
        bit = 1 << index
        return "ask" if self.ask & bit else "allow" if self.allow & bit else "deny"

    def codes(self, size: int) -> str:
        """One digit per tool of the catalog's `size`, in catalog order: 0 deny, 1 allow, 2 ask.

        Per-tool work happens in C (bit strings, byte translation, one big-integer OR): a
        3,000 x 5,000 matrix is 15 million cells.
        """
        if not size:
            return ""
        allow = format(self.allow & ~self.ask, f"0{size}b")[::-1].encode().translate(_ALLOW_CODE)
        ask = format(self.ask, f"0{size}b")[::-1].encode().translate(_ASK_CODE)
        both = int.from_bytes(allow, "little") | int.from_bytes(ask, "little")
        return both.to_bytes(size, "little").translate(_DIGIT_OF_CODE).decode("ascii")

    def effects(self, size: int) -> list[Effect]:
        """The effect on each of the catalog's `size` tools, in catalog order."""
        return list(map(_EFFECT_OF_DIGIT.__getitem__, self.codes(size)))

    def effects_json(self, size: int) -> str:
        """`effects` as a JSON array, written by string replacement on `codes` (three C passes
        instead of 5,000 list items encoded one by one)."""
        text = self.codes(size).replace("0", '"deny", ').replace("1", '"allow", ')
        return "[" + text.replace("2", '"ask", ')[:-2] + "]"


_ALLOW_CODE = bytes.maketrans(b"01", b"\x00\x01")
_ASK_CODE = bytes.maketrans(b"01", b"\x00\x02")
_DIGIT_OF_CODE = bytes.maketrans(b"\x00\x01\x02", b"012")
_EFFECT_OF_DIGIT: dict[str, Effect] = {"0": "deny", "1": "allow", "2": "ask"}


def agent_row(agent: CompiledAgent, catalog: Catalog) -> Row:
    """The agent's decisions over the whole catalog: its own `grant` over the rules' masks."""
    inherited = catalog.inherited_masks(agent.policy.agents, agent.name)
    global_deny = catalog.rules_mask(agent.policy.global_deny)
    masks = dict(zip(EFFECTS, inherited, strict=True))
    masks["deny"] |= global_deny
    policy = agent.policy
    unpinned = 0
    if policy.pin_tools and policy.locked_tools is not None:
        locked = sum(1 << catalog.index[key] for key in policy.locked_tools if key in catalog.index)
        unpinned = catalog.full & ~locked
    allow, ask = agent.grant(masks["deny"], masks["ask"], masks["allow"], unpinned, catalog.full)
    conditional = 0
    for rule in agent.with_conditions:
        conditional |= catalog.mask(rule.pattern)
    return Row(agent.name, allow, ask, conditional)


_WORD = re.compile(r"[a-z0-9]+")


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def search(tools: Sequence[ToolRef], query: str) -> list[tuple[float, ToolRef]]:
    """Tools ranked by relevance of name and description to `query` (best first, no zeros).

    Query words found in the tool's name count most, then in the server name, then in the
    description; a whole-name match and a prefix match add a bonus.
    """
    terms = _words(query)
    ranked: list[tuple[float, ToolRef]] = []
    for ref in tools:
        name_words = _words(ref.tool)
        server_words = _words(ref.server)
        desc_words = set(_words(ref.description))
        score = 0.0
        for term in terms:
            if term in name_words:
                score += 3
            elif any(w.startswith(term) or term.startswith(w) for w in name_words if len(w) > 2):
                score += 2
            if term in server_words:
                score += 1.5
            if term in desc_words:
                score += 1
            elif any(w.startswith(term) for w in desc_words if len(term) > 3):
                score += 0.5
        if score and query.strip().lower() in (ref.tool.lower(), ref.qualified.lower()):
            score += 5
        if score and terms and all(term in name_words for term in terms):
            score += 3
        # Among equals, the name with fewer words beyond the query is the closer match.
        score -= 0.01 * max(0, len(name_words) - len(terms)) if score else 0
        if score:
            ranked.append((score, ref))
    ranked.sort(key=lambda pair: (-pair[0], pair[1].server, pair[1].tool))
    return ranked
