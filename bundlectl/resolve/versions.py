"""Pick one version per bundle so that every constraint holds. Pure: the registry is a protocol.

Newest versions first, pins from the lock preferred unless upgrading, backtracking when a
dependency's constraint conflicts with a choice already made. Deterministic: the order of work is
the order of the requirements, then of each manifest's `requires`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from bundlectl.config.requirements import parse_requirement
from bundlectl.errors import ResolutionError
from bundlectl.suggest import Suggester


class Repository(Protocol):
    """What the resolver needs to know about the available bundles."""

    def names(self) -> list[str]: ...

    def versions(self, name: str) -> Sequence[Version]: ...

    def requires(self, name: str, version: Version) -> Sequence[str]: ...


@dataclass(frozen=True)
class Constraint:
    """A requirement and who imposed it (a file, or `name@version` of a bundle)."""

    name: str
    specifier: SpecifierSet
    text: str
    imposed_by: str
    by_bundle: str | None = None  # the bundle whose choice imposed it (None: the user)

    def describe(self) -> str:
        return f"{self.text} (required by {self.imposed_by})"


def constraint(text: str, imposed_by: str, by_bundle: str | None = None) -> Constraint:
    req = parse_requirement(text)
    return Constraint(req.name, req.specifier, text, imposed_by, by_bundle)


@dataclass(frozen=True)
class _Conflict:
    name: str
    constraints: tuple[Constraint, ...]
    available: tuple[Version, ...]


class _Solver:
    def __init__(
        self, repo: Repository, prefer: Mapping[str, Version], upgrade: set[str] | None
    ) -> None:
        self.repo = repo
        self.prefer = prefer
        self.upgrade = upgrade  # None: keep every pin; empty set: upgrade all; else these names
        # state → the bundles whose choices made it fail (conflict-directed backjumping)
        self.failed: dict[frozenset[tuple[str, Version]], frozenset[str]] = {}
        self.conflict: _Conflict | None = None
        self._deps: dict[tuple[str, Version], list[Constraint]] = {}
        self._fitting: dict[tuple[str, tuple[str, ...]], list[Version]] = {}

    def dependencies(self, name: str, version: Version) -> list[Constraint]:
        key = (name, version)
        if key not in self._deps:
            self._deps[key] = [
                constraint(t, f"{name}@{version}", name) for t in self.repo.requires(name, version)
            ]
        return self._deps[key]

    def _preferred(self, name: str) -> Version | None:
        if self.upgrade is not None and (not self.upgrade or name in self.upgrade):
            return None
        return self.prefer.get(name)

    def candidates(self, name: str, constraints: Sequence[Constraint]) -> list[Version]:
        key = (name, tuple(sorted({str(c.specifier) for c in constraints})))
        if key not in self._fitting:
            combined = SpecifierSet()
            for item in constraints:
                combined &= item.specifier
            available = sorted(self.repo.versions(name), reverse=True)
            self._fitting[key] = list(combined.filter(available))
        fitting = list(self._fitting[key])
        pin = self._preferred(name)
        if pin in fitting:
            fitting.remove(pin)
            fitting.insert(0, pin)
        if not fitting:
            known = tuple(sorted(self.repo.versions(name)))
            self._note(_Conflict(name, tuple(constraints), known))
        return fitting

    def _note(self, conflict: _Conflict) -> None:
        if self.conflict is None:
            self.conflict = conflict

    def solve(
        self,
        chosen: dict[str, Version],
        constraints: dict[str, tuple[Constraint, ...]],
        order: list[str],
    ) -> dict[str, Version] | frozenset[str]:
        """A complete choice, or the set of bundle names whose choices caused the failure.

        When a failure below does not involve the bundle being decided here, trying its other
        versions cannot help, so the failure jumps straight back to a bundle that can.
        """
        pending = next((n for n in order if n not in chosen), None)
        if pending is None:
            return chosen
        key = frozenset(chosen.items())
        if key in self.failed:
            return self.failed[key]
        conflict = {c.by_bundle for c in constraints[pending] if c.by_bundle}
        for version in self.candidates(pending, constraints[pending]):
            new = self.dependencies(pending, version)
            clash = next(
                (
                    c
                    for c in new
                    if c.name in chosen
                    and not c.specifier.contains(chosen[c.name], prereleases=True)
                ),
                None,
            )
            if clash is not None:
                self._note(
                    _Conflict(clash.name, (*constraints[clash.name], clash), (chosen[clash.name],))
                )
                conflict.add(clash.name)
                continue
            next_constraints = dict(constraints)  # tuples are shared, never mutated
            next_order = list(order)
            for item in new:
                if item.name not in next_constraints:
                    next_constraints[item.name] = ()
                    next_order.append(item.name)
                next_constraints[item.name] = (*next_constraints[item.name], item)
            result = self.solve({**chosen, pending: version}, next_constraints, next_order)
            if isinstance(result, dict):
                return result
            if pending not in result:
                self.failed[key] = result
                return result
            conflict |= result - {pending}
        self.failed[key] = frozenset(conflict)
        return self.failed[key]


def resolve(
    requirements: Iterable[Constraint],
    repo: Repository,
    *,
    prefer: Mapping[str, Version] | None = None,
    upgrade: set[str] | None = None,
) -> dict[str, Version]:
    """Choose versions for the requirements and everything they require.

    `prefer` holds pins (from the lock) tried first; `upgrade` is None to keep pins, an empty set
    to ignore all of them, or the names whose pins to ignore. Raises `ResolutionError`.
    """
    constraints: dict[str, tuple[Constraint, ...]] = {}
    order: list[str] = []
    known = set(repo.names())
    for item in requirements:
        if item.name not in known:
            close = Suggester(known).closest(item.name, n=3)
            hint = f"did you mean {', '.join(close)}?" if close else "`bundlectl list` shows them"
            raise ResolutionError(
                f"no bundle named {item.name!r} in any registry (required by {item.imposed_by})",
                hint=hint,
            )
        if item.name not in constraints:
            constraints[item.name] = ()
            order.append(item.name)
        constraints[item.name] = (*constraints[item.name], item)
    solver = _Solver(repo, prefer or {}, upgrade)
    result = solver.solve({}, constraints, order)
    if not isinstance(result, dict):
        raise _explain(solver.conflict, known)
    # Report in a stable order: the requirement order, then dependencies as discovered.
    return result


def _explain(conflict: _Conflict | None, known: set[str]) -> ResolutionError:
    if conflict is None:  # pragma: no cover - the solver always records why it failed
        return ResolutionError("no set of bundle versions satisfies the requirements")
    if conflict.name not in known:
        who = ", ".join(c.imposed_by for c in conflict.constraints)
        return ResolutionError(
            f"no bundle named {conflict.name!r} in any registry (required by {who})",
            hint="publish it with `bundlectl registry add` or fix the name",
        )
    lines = [f"no version of {conflict.name!r} satisfies every constraint:"]
    lines += [f"  {c.describe()}" for c in conflict.constraints]
    versions = ", ".join(str(v) for v in conflict.available) or "none"
    lines.append(f"  available: {versions}")
    return ResolutionError(
        "\n".join(lines),
        hint="relax one of these constraints, or run `bundlectl show NAME` to see the versions",
    )
