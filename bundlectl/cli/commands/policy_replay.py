"""`bundlectl policy replay [AUDIT_LOG]`: the calls a log records, decided again under the working
policy (#59). Exit 0 when every call is decided as it was, 1 when some are not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bundlectl.calls.replay import Replayed, replay
from bundlectl.cli.commands.audit import log_file, log_lines
from bundlectl.cli.options import Format
from bundlectl.config.project import load_project
from bundlectl.errors import UsageError
from bundlectl.output import emit_json, note, out, table, visible
from bundlectl.resolve.resolved import resolve_project


def run(config: Path | None, file: Path | None, *, agents: list[str], fmt: Format) -> int:
    resolution = resolve_project(load_project(config))
    policy = resolution.policy
    for agent in agents:
        if agent not in policy.set.agents:
            raise UsageError(
                f"agent {agent!r} is not listed under agents",
                hint="agents: " + (", ".join(policy.agents) or "none"),
            )
    found = replay(log_lines(log_file(file)), policy, set(agents) if agents else None)
    if fmt == Format.json:
        emit_json(_as_json(found))
    else:
        _text(found)
    return 1 if found.changes else 0


def _ordered(found: Replayed) -> list[Any]:
    return sorted(found.changes.values(), key=lambda c: (-c.calls, c.agent, c.tool))


def _text(found: Replayed) -> None:
    if found.unreadable:
        note(f"{found.unreadable} lines are not JSON records; skipped")
    out(
        f"{found.calls} calls replayed: {found.same} decided as they were, {found.changed} "
        f"decided differently now, {sum(found.needs_arguments.values())} need their arguments "
        "(a rule with conditions names the tool; the log keeps no values)"
    )
    if found.changes:
        table(
            [
                [
                    visible(c.agent) + (" (not listed)" if c.unlisted else ""),
                    visible(c.tool),
                    f"{c.then} → {c.now}",
                    str(c.calls),
                    visible(c.rule_now or "") + (f" ({c.where_now})" if c.where_now else ""),
                    f"{c.first} … {c.last}" if c.first != c.last else c.first,
                ]
                for c in _ordered(found)
            ],
            header=["AGENT", "TOOL", "THEN → NOW", "CALLS", "DECIDED NOW BY", "WHEN"],
        )
    if found.needs_arguments:
        listed = sorted(found.needs_arguments.items(), key=lambda item: -item[1])
        shown = ", ".join(f"{agent} {tool} ({n})" for (agent, tool), n in listed[:10])
        more = f", and {len(listed) - 10} more" if len(listed) > 10 else ""
        out(f"need their arguments: {visible(shown)}{more}")


def _as_json(found: Replayed) -> dict[str, Any]:
    return {
        "format_version": 1,
        "calls": found.calls,
        "same": found.same,
        "changed": found.changed,
        "unreadable": found.unreadable,
        "changes": [vars(c) for c in _ordered(found)],
        "needs_arguments": [
            {"agent": agent, "tool": tool, "calls": n}
            for (agent, tool), n in sorted(found.needs_arguments.items())
        ],
    }
