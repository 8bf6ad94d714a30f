"""`bundlectl limits status`: each quota's use in its current window, per agent."""

from __future__ import annotations

import time
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from bundlectl.calls.limits import Limits
from bundlectl.cli.options import Format
from bundlectl.config.project import load_project
from bundlectl.output import JSON_FORMAT_VERSION, emit_json, out, table
from bundlectl.state import open_store


def status(config: Path | None, *, agent: str | None, fmt: Format) -> int:
    project = load_project(config)
    limits = Limits(list(project.config.limits), str(project.root))
    agents = [agent] if agent is not None else sorted(project.config.agents)
    now = time.time()
    rows: list[dict[str, Any]] = []
    wanted = [
        (limit, who, limit.counter(limits.project, who, now))
        for limit in limits.limits
        for who in agents
        if any(_fits(who, pattern) for pattern in limit.rule.agents)
    ]
    state = project.config.state
    store = open_store(state.url if state is not None else None) if wanted else None
    used = store.usage([counter.key for _, _, counter in wanted], now) if store else {}
    for limit, who, counter in wanted:
        rows.append(
            {
                "limit": limit.index,
                "agent": who,
                "counts": limit.describe().split(": ", 1)[1],
                "used": used.get(counter.key, 0),
                "calls": limit.rule.calls,
                "per": limit.rule.per,
                "resets": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(counter.ends)),
            }
        )
    if fmt is Format.json:
        emit_json({"format_version": JSON_FORMAT_VERSION, "limits": rows})
        return 0
    if not limits:
        out("no limits: in bundlectl.yaml")
        return 0
    if not rows:
        out("no listed agent is covered by a limit (name one with --agent)")
        return 0
    table(
        [
            [
                f"limits[{r['limit']}]",
                r["agent"],
                f"{r['used']}/{r['calls']}",
                r["counts"],
                r["resets"],
            ]
            for r in rows
        ],
        ["LIMIT", "AGENT", "USED", "COUNTS", "RESETS"],
    )
    return 0


def _fits(agent: str, pattern: str) -> bool:
    return fnmatchcase(agent, pattern)
