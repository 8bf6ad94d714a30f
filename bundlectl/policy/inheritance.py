"""`extends`: an agent's rules with everything it inherits, cycles found and reported, and the
policy as plain data for the lock's digest. Pure.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from bundlectl.errors import InputFileError, Problem

if TYPE_CHECKING:  # conditions are imported only by a policy that has them (models.py)
    pass

from bundlectl.policy.rules import EFFECTS, AgentSpec, PolicySet


def parent_names(agents: Mapping[str, AgentSpec]) -> dict[str, list[str]]:
    """Each agent's parents by name, as `ancestors` walks them."""
    return {name: [parent for parent, _ in spec.extends] for name, spec in agents.items()}


def ancestors(parents: Mapping[str, Sequence[str]], name: str) -> list[str]:
    """The agent and every ancestor, breadth-first, each once (`parents`: `parent_names`)."""
    if name not in parents:
        return []
    order, seen = [name], {name}
    for current in order:  # the list is the queue: it grows while it is walked
        # (an unknown parent has none: a load error reported elsewhere)
        for parent in parents.get(current, ()):
            if parent not in seen:
                seen.add(parent)
                order.append(parent)
    return order


def canonical_policy(policy_set: PolicySet) -> tuple[dict[str, object], dict[str, object]]:
    """The effective policy as plain data: (project-wide settings, each agent's rules).

    Each agent's allow/ask/deny are the flattened union over its `extends` chain, sorted and
    without duplicates, so comments, key order, formatting, the order of rules and where a rule
    was written change nothing; what an agent may call changes it. Load errors in `extends` leave
    the affected agents with what they can reach.
    """
    flat = _flattened(policy_set.agents)
    agents: dict[str, object] = {}
    for name in sorted(policy_set.agents):
        agents[name] = {
            effect: sorted(patterns) for effect, patterns in zip(EFFECTS, flat[name], strict=True)
        }
    settings: dict[str, object] = {
        "default": policy_set.default,
        "deny": sorted({r.key for r in policy_set.global_deny}),
        "pin_tools": policy_set.pin_tools,
    }
    if policy_set.sandbox is not None:  # (a project without it keeps the digest it had)
        settings["sandbox"] = policy_set.sandbox
    if policy_set.pins:  # (likewise)
        settings["pins"] = dict(sorted(policy_set.pins.items()))
    return settings, agents


_Flat = tuple[frozenset[str], frozenset[str], frozenset[str]]  # patterns per effect, EFFECTS order


def _flattened(agents: Mapping[str, AgentSpec]) -> dict[str, _Flat]:
    """Each agent's patterns per effect with everything it inherits, each parent's sets built
    once (children reuse them) instead of walking every agent's whole ancestry."""
    done: dict[str, _Flat] = {}
    nothing: _Flat = (frozenset(), frozenset(), frozenset())
    for root in agents:
        stack = [(root, False)]
        active: set[str] = set()
        while stack:
            name, expanded = stack.pop()
            if name in done or name not in agents:
                continue
            parents = [p for p, _ in agents[name].extends]
            if not expanded:
                active.add(name)
                stack.append((name, True))
                # A parent still being expanded closes a cycle (a load error): it is skipped.
                stack.extend((p, False) for p in parents if p not in active)
                continue
            active.discard(name)
            rules = agents[name].rules
            inherited = [done.get(p, nothing) for p in parents]
            deny, ask, allow = (
                frozenset(r.key for r in rules if r.effect == effect).union(
                    *(flat[i] for flat in inherited)
                )
                for i, effect in enumerate(EFFECTS)
            )
            done[name] = (deny, ask, allow)
    return done


def check_extends(agents: Mapping[str, AgentSpec]) -> None:
    """Unknown parents and cycles are load errors (exit 2), each at its position."""
    problems = extends_problems(agents)
    if problems:
        raise InputFileError(problems, hint="fix the agents' extends lists")


def extends_problems(agents: Mapping[str, AgentSpec]) -> list[Problem]:
    problems: list[Problem] = []
    for spec in agents.values():
        for parent, origin in spec.extends:
            if parent not in agents:
                problems.append(
                    Problem(
                        origin.file,
                        origin.line,
                        origin.column,
                        f"agent {spec.name!r} extends unknown agent {parent!r}",
                        f"agents.{spec.name}.extends",
                        f"define agent {parent!r} or remove it from extends",
                    )
                )
    reported: set[frozenset[str]] = set()
    cyclic = _on_cycles(agents)
    for name in sorted(cyclic):
        cycle = _find_cycle(agents, name)
        if cycle and frozenset(cycle) not in reported:
            reported.add(frozenset(cycle))
            origin = agents[name].origin
            problems.append(
                Problem(
                    origin.file,
                    origin.line,
                    origin.column,
                    "extends cycle: " + " -> ".join([*cycle, cycle[0]]),
                    f"agents.{name}.extends",
                    "break the cycle: an agent cannot inherit from itself",
                )
            )
    return problems


def _on_cycles(agents: Mapping[str, AgentSpec]) -> set[str]:
    """The agents that lie on an extends cycle: what remains after repeatedly removing agents
    that no remaining agent extends (Kahn's algorithm), keeping only those that reach a cycle
    through their parents, as a cycle's members do. Linear; no recursion."""
    children: dict[str, int] = dict.fromkeys(agents, 0)
    for spec in agents.values():
        for parent, _ in spec.extends:
            if parent in children:
                children[parent] += 1
    ready = deque(name for name, count in children.items() if count == 0)
    while ready:
        spec = agents[ready.popleft()]
        for parent, _ in spec.extends:
            if parent in children:
                children[parent] -= 1
                if children[parent] == 0:
                    ready.append(parent)
    left = {name for name, count in children.items() if count > 0}
    # Left are the cycles and what they extend: a superset of the cycles' members, since each
    # member extends another agent that is left.
    return {n for n in left if any(p in left for p, _ in agents[n].extends)}


def _find_cycle(agents: Mapping[str, AgentSpec], start: str) -> list[str] | None:
    """A path of parents from `start` back to itself, if there is one (iterative: an extends
    chain may be thousands long)."""

    def parents(name: str) -> Iterator[str]:
        return iter([p for p, _ in agents[name].extends])

    path, on_path, explored = [start], {start}, set()
    stack = [parents(start)]
    while stack:
        parent = next(stack[-1], None)
        if parent is None:
            stack.pop()
            done = path.pop()
            on_path.discard(done)
            explored.add(done)
            continue
        if parent == start:
            return list(path)
        if parent in on_path or parent in explored or parent not in agents:
            continue
        path.append(parent)
        on_path.add(parent)
        stack.append(parents(parent))
    return None
