"""2xx: who may act as an agent — `match:` rules that any authenticated user fits, agents whose
matches one token can fit at once (the gateway then refuses it: 403), and approvers whose match
an agent's token can fit (#54)."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import combinations

from bundlectl.lint.context import Context, at
from bundlectl.lint.rules import Finding
from bundlectl.policy.claims import can_share, fits_anyone


def _matched(ctx: Context) -> list[tuple[str, dict[str, str | list[str]]]]:
    model = ctx.config_model
    if model is None:
        return []
    return [(name, rules.match) for name, rules in model.agents.items() if rules.match]


def broad_matches(ctx: Context) -> Iterator[Finding]:
    """BCL217, at an agent's `match:` that every authenticated user fits."""
    config = ctx.config
    if config is None:
        return
    for name, match in _matched(ctx):
        if fits_anyone(match):
            claims = ", ".join(sorted(match))
            yield at(
                "BCL217",
                config.doc,
                ("agents", name, "match"),
                f"agent {name!r}'s match: fits every authenticated user whose token carries "
                f"{claims}: each of them may act as {name!r}",
                anchor=name,
            )


def overlapping_matches(ctx: Context) -> Iterator[Finding]:
    """BCL218, at the second of two agents whose matches one token can fit at once."""
    config = ctx.config
    if config is None:
        return
    for (first, one), (second, other) in combinations(_matched(ctx), 2):
        if can_share(one, other):
            yield at(
                "BCL218",
                config.doc,
                ("agents", second, "match"),
                f"one token can fit the match: of both {first!r} and {second!r}; the gateway "
                "refuses such a token (403)",
                anchor=f"{first}:{second}",
            )


def approvers_as_agents(ctx: Context) -> Iterator[Finding]:
    """BCL219, at `policy.approvals.approvers.match` when one token can fit it and an agent's."""
    config, model = ctx.config, ctx.config_model
    if config is None or model is None or model.policy.approvals is None:
        return
    approvers = model.policy.approvals.approvers
    if approvers is None:
        return
    for name, match in _matched(ctx):
        if can_share(approvers.match, match):
            yield at(
                "BCL219",
                config.doc,
                ("policy", "approvals", "approvers", "match"),
                f"one token can fit both the approvers' match: and agent {name!r}'s: whoever "
                f"holds it may make calls as {name!r} and approve the calls of others",
                anchor=name,
            )
