"""Where a sandboxed server may write, drawn from the policy (#55 item 2).

A local server in its sandbox may write where the rules of the agents it serves bound their
calls' paths, plus what `servers.NAME.sandbox.write` adds (`mcpio.sandbox.profile_for`). A rule
that allows or asks for a tool of the server that is not read-only (`readOnlyHint`; every
tool, for a server without a catalog) with a `{path: }` condition lets it write below that
glob's fixed part: `docs/**` → `docs`, `notes/*.md` → `notes`, `docs/todo.txt` → `docs` (a
file's folder: it may not exist yet). A rule without such a bound — no condition, or
conditions on other arguments — says nothing of where its calls write, so it adds nothing:
the project stays read-only for it unless `write:` says more (a sandbox that guessed "the
whole project" from `github.*` would be no sandbox). An agent with no such rule gives the
server nothing to write. The project's governed files stay read-only whatever this says
(`mcpio.sandbox`); the calls are still judged one by one.
"""

from __future__ import annotations

import posixpath
import weakref
from collections.abc import Collection, Iterable, Iterator
from typing import TYPE_CHECKING

from bundlectl.policy.conditions import Condition, Matcher
from bundlectl.policy.patterns import part_matches
from bundlectl.policy.rules import AgentSpec, Rule

if TYPE_CHECKING:
    from bundlectl.policy.engine import CompiledAgent, Policy
    from bundlectl.resolve.resolved import Resolution

ANYWHERE = "."
_GLOB = frozenset("*?[{")


def writes_from_policy(
    resolution: Resolution, server: str, agents: Collection[str] | None = None
) -> tuple[str, ...]:
    """The project-relative folders the rules of `agents` (None: every listed agent) let
    `server`'s calls write in; `(".",)` for the whole project (a `**` bound), `()` for none."""
    found, _ = _drawn(resolution, server, agents)
    return _outermost(found)


def writes_needed(resolution: Resolution, server: str) -> tuple[str, ...] | None:
    """Where the calls the policy grants on `server` could write, when every rule that grants
    one of its writing tools bounds its path (a known catalog); None when that cannot be
    told (a rule without a path bound, or no catalog): what lint holds `write:` to."""
    merged = resolution.merged.servers.get(server)
    if merged is None or not merged.spec.tools:
        return None
    found, unbounded = _drawn(resolution, server, None)
    return None if unbounded else _outermost(found)


def _drawn(
    resolution: Resolution, server: str, agents: Collection[str] | None
) -> tuple[set[str], bool]:
    """The folders the granting rules bound, and whether some granting rule is unbounded.
    Each rule is judged once, however many agents inherit it, and each pattern part once per
    server (`resolve` asks this of every server: 3,000 agents deep in `extends` made it
    hundreds of millions of matches)."""
    merged = resolution.merged.servers.get(server)
    if merged is None:
        return set(), False
    catalog = merged.spec.tools
    writers = [t.name for t in catalog if not (t.annotations or {}).get("readOnlyHint")]
    if catalog and not writers:
        return set(), False  # every tool of it only reads
    policy = resolution.policy
    compiled = [policy.agent(agent) for agent in (policy.agents if agents is None else agents)]
    unbounded = any(agent.falls_open and agent.may_reach(server) for agent in compiled)
    found: set[str] = set()
    writing: dict[str, bool] = {}
    granting = _everyones(policy) if agents is None else _by_server_part(_granting(compiled))
    for server_part, rules in granting.items():
        if not part_matches(server_part, server):
            continue
        for rule in rules:
            tool_part = rule.parts[1]
            if catalog:
                writes = writing.get(tool_part)
                if writes is None:
                    writes = writing[tool_part] = any(part_matches(tool_part, t) for t in writers)
                if not writes:
                    continue
            bounds = _bounds(rule.condition)
            if bounds is None:
                unbounded = True
            else:
                found |= bounds
    return found, unbounded


# Every listed agent's granting rules by server part, made once per policy (`resolve` and lint
# ask for every server in turn); a policy no longer used takes its entry with it.
_EVERYONES: weakref.WeakKeyDictionary[Policy, dict[str, list[Rule]]] = weakref.WeakKeyDictionary()


def _everyones(policy: Policy) -> dict[str, list[Rule]]:
    found = _EVERYONES.get(policy)
    if found is None:
        found = _EVERYONES[policy] = _by_server_part(_granting(policy.set.agents.values()))
    return found


def _by_server_part(rules: Iterable[Rule]) -> dict[str, list[Rule]]:
    groups: dict[str, list[Rule]] = {}
    for rule in rules:
        groups.setdefault(rule.parts[0], []).append(rule)
    return groups


def _granting(owners: Iterable[AgentSpec] | Iterable[CompiledAgent]) -> Iterator[Rule]:
    """The allow and ask rules of the given agents' `extends` chains, each once. Every listed
    agent's spec (its own rules: each listed agent heads its own chain), or the members of
    some compiled agents' chains."""
    seen: set[int] = set()
    for owner in owners:
        members = (
            [owner.rules] if isinstance(owner, AgentSpec) else (m.rules for m in owner.members)
        )
        for rules in members:
            if id(rules) in seen:
                continue
            seen.add(id(rules))
            yield from (rule for rule in rules if rule.effect != "deny")


def _bounds(condition: Condition | None) -> set[str] | None:
    """The folders a rule's `{path: }` conditions keep its calls' paths in; None: unbounded."""
    if condition is None:
        return None
    for _, _, matcher in condition.args:
        folders = _folders(matcher)
        if folders is not None:
            return folders
    return None


def _folders(matcher: Matcher) -> set[str] | None:
    if matcher.kind == "path":
        return {_fixed_part(str(matcher.operand))}
    if matcher.kind == "any":
        found: set[str] = set()
        for alternative in matcher.operand:
            folders = _folders(alternative)
            if folders is None:
                return None  # one alternative is not a path bound
            found |= folders
        return found
    return None


def _fixed_part(pattern: str) -> str:
    """The folder a path glob stays in: its leading parts without glob characters (a literal
    path's folder)."""
    parts = [p for p in posixpath.normpath(pattern).split("/") if p not in ("", ".")]
    fixed: list[str] = []
    for part in parts:
        if _GLOB & set(part):
            break
        fixed.append(part)
    else:
        fixed = fixed[:-1]  # a file: the folder it is in (it may not exist yet)
    return "/".join(fixed) or ANYWHERE


def _outermost(folders: Iterable[str]) -> tuple[str, ...]:
    """`folders` without those inside another of them, sorted."""
    ordered = sorted(set(folders), key=lambda f: (f.count("/"), f))
    kept: list[str] = []
    for folder in ordered:
        if folder == ANYWHERE:
            return (ANYWHERE,)
        if not any(folder == k or folder.startswith(k + "/") for k in kept):
            kept.append(folder)
    return tuple(sorted(kept))
