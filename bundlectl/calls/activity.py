"""A picture of the week (issue 41): calls, denials, errors and held approvals per agent and day
as server-rendered SVG bars, and the tools denied most with the rule that denied them — at
`/activity` beside `/approvals` (the same sign-in: `?token=` or the identity provider) and in
`bundlectl audit summary --html FILE`. Every agent's bars share one scale; each outcome has its
colour.

Built from the audit log read as a stream; every name in it is escaped.
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from bundlectl.mcpio.requests import JsonObject
from bundlectl.policy.rules import no_rule_grants

# a bar's parts, bottom up
KINDS = ("ok", "denied", "over limit", "errors", "held", "unauthenticated")
COLOURS = {
    "ok": "#1a7f37",
    "denied": "#b42318",
    "over limit": "#0e7490",  # a quota refused it: neither the policy nor a failure
    "errors": "#b7791f",
    "held": "#6e56cf",
    "unauthenticated": "#667085",
}
UNAUTHENTICATED = "(unauthenticated)"  # the row of requests that failed authentication
BAR, GAP, HEIGHT = 18, 6, 120  # pixels


@dataclass
class Activity:
    """What the log says, counted: per agent, per day, per kind; and the denials by tool."""

    days: dict[str, dict[str, Counter[str]]] = field(default_factory=dict)  # agent→day→kind
    denied: Counter[tuple[str, str]] = field(default_factory=Counter)  # (tool, rule) → count

    def add(self, record: JsonObject) -> None:
        outcome = str(record.get("outcome"))
        kind = _kind(outcome)
        if kind is None:
            return
        agent = UNAUTHENTICATED if kind == "unauthenticated" else str(record.get("agent"))
        day = str(record.get("timestamp", ""))[:10]
        self.days.setdefault(agent, {}).setdefault(day, Counter())[kind] += 1
        if kind == "denied":
            tool = f"{record.get('server')}.{record.get('tool')}"
            self.denied[(tool, _decided_by(record, agent))] += 1


def _decided_by(record: JsonObject, agent: str) -> str:
    """What decided a denial, as `policy explain` says it (`Decision.decided_by`)."""
    rule = record.get("rule")
    if rule:
        return str(rule)
    return "policy.default" if record.get("unlisted") else no_rule_grants(agent)


def _kind(outcome: str) -> str | None:
    if outcome in (
        "pending",
        "approved",
        "approval-used",
        "approval-withdrawn",
        "withheld",
        "tool-changed",
        "asked",
    ):
        return None  # a step of a call counted by its outcome, or an approver's
    if outcome == "approval-requested":
        return "held"
    if outcome == "ok":
        return "ok"
    if outcome == "over-limit":
        return "over limit"
    if outcome == "unauthorized":
        return "unauthenticated"  # no agent was named: no policy decided it
    if outcome.startswith("denied"):
        return "denied"
    return "errors"


def counted(records: Iterable[JsonObject]) -> Activity:
    activity = Activity()
    for record in records:
        activity.add(record)
    return activity


def chart(per_day: dict[str, Counter[str]], days: list[str], top: int) -> str:
    """One agent's days as stacked bars (SVG), `top` calls a full bar (the same for every
    agent: a bar's height compares across agents)."""
    top = top or 1
    width = len(days) * (BAR + GAP) + GAP
    parts = [
        f'<svg class=chart role=img width="{width}" height="{HEIGHT + 18}" '
        f'viewBox="0 0 {width} {HEIGHT + 18}" xmlns="http://www.w3.org/2000/svg">'
    ]
    for index, day in enumerate(days):
        counts = per_day.get(day, Counter())
        x, y = GAP + index * (BAR + GAP), HEIGHT
        for kind in KINDS:
            n = counts.get(kind, 0)
            if not n:
                continue
            h = max(1, round(n / top * HEIGHT))
            y -= h
            title = html.escape(f"{day}: {n} {kind}")
            parts.append(
                f'<rect x="{x}" y="{y}" width="{BAR}" height="{h}" fill="{COLOURS[kind]}">'
                f"<title>{title}</title></rect>"
            )
        parts.append(
            f'<text x="{x + BAR / 2}" y="{HEIGHT + 13}" font-size="9" text-anchor="middle">'
            f"{html.escape(day[5:])}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def rendered(activity: Activity, *, title: str = "Activity") -> str:
    """The page's body: a legend, one chart and a total per agent, and the top denials."""
    e = html.escape
    days = sorted({day for per in activity.days.values() for day in per})[-31:]
    legend = " ".join(f'<span style="color:{COLOURS[k]}">■</span> {k}' for k in KINDS)
    top = max(
        (sum(c.values()) for per in activity.days.values() for d, c in per.items() if d in days),
        default=0,
    )
    rows = []
    for agent in sorted(activity.days):
        per_day = activity.days[agent]
        total: Counter[str] = Counter()
        for counts in per_day.values():
            total.update(counts)
        sums = " · ".join(f"{total.get(k, 0)} {k}" for k in KINDS)
        rows.append(
            f"<tr><th><code>{e(agent)}</code><br><span class=muted>{e(sums)}</span></th>"
            f"<td>{chart(per_day, days, top)}</td></tr>"
        )
    denied = "".join(
        f"<tr><td><code>{e(tool)}</code></td><td>{e(rule)}</td><td>{n}</td></tr>"
        for (tool, rule), n in activity.denied.most_common(10)
    )
    return (
        f"<h1>{e(title)}</h1><p class=muted>{legend}</p>"
        + (f"<table>{''.join(rows)}</table>" if rows else "<p>No calls in the log.</p>")
        + "<h2>Denied most</h2>"
        + (
            "<table><tr><th>Tool</th><th>Denied by</th><th>Times</th></tr>" + denied + "</table>"
            if denied
            else "<p>Nothing was denied.</p>"
        )
    )
