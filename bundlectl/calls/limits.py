"""Quotas (SPEC 11, `limits:`): how many calls an agent may make of some tools per window.

Windows are fixed: a limit `per: 1h` counts from each whole hour since 1970 (UTC) to the next,
so every process and replica that shares the state store counts the same window, and "resets
at" is one moment for everyone. Each agent has its own count per limit. Only calls the policy
let through are counted, once each, when they are let through (before anything starts); a call
over any limit that covers it is refused then, and no limit counts it. An `ask` is checked
against its limits before a person is asked to approve it (`check`), and a call refused for
its arguments before anything was sent gets its count back (`Store.refund`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

from bundlectl.config.lockfile import digest_json
from bundlectl.config.models import ToolSpec
from bundlectl.config.settings import LimitRule, seconds
from bundlectl.errors import PolicyDenied
from bundlectl.output import span_text
from bundlectl.policy.catalog import in_class
from bundlectl.policy.patterns import matches
from bundlectl.state import Counter

if TYPE_CHECKING:
    from bundlectl.state import Store


class LimitReached(PolicyDenied):
    """A quota is used up for this window: nothing was started. `limit`: which entry
    (`limits[N]`)."""

    limit = ""
    resets: float | None = None  # when the window that is full ends (a time.time() stamp)


@dataclass(frozen=True)
class Limit:
    """One `limits:` entry, where it is written, and the identity its counters carry (editing
    the entry starts its count afresh)."""

    index: int
    rule: LimitRule
    identity: str

    def covers(self, agent: str, server: str, tool: str, spec: ToolSpec | None) -> bool:
        rule = self.rule
        if not any(fnmatchcase(agent, pattern) for pattern in rule.agents):
            return False
        if rule.tools and not any(matches(pattern, server, tool) for pattern in rule.tools):
            return False
        return rule.tool_class is None or in_class(spec, rule.tool_class)

    def window(self, now: float) -> tuple[float, float]:
        span = seconds(self.rule.per)
        start = now - now % span
        return start, start + span

    def counter(self, project: str, agent: str, now: float) -> Counter:
        start, ends = self.window(now)
        key = f"{project}\x1f{self.identity}\x1f{agent}\x1f{start:.0f}"
        return Counter(key, self.rule.calls, ends)

    def describe(self) -> str:
        rule = self.rule
        what = ", ".join(rule.tools) if rule.tools else f"{rule.tool_class} tools"
        if rule.tools and rule.tool_class:
            what += f" ({rule.tool_class})"
        return f"limits[{self.index}]: {rule.calls} call(s) of {what} per {rule.per}"


class Limits:
    """The project's `limits:`, and the counting of one call against them."""

    def __init__(self, rules: list[LimitRule], project: str) -> None:
        self.project = project
        self.limits = [
            Limit(i, rule, digest_json(rule.model_dump(mode="json", by_alias=True)))
            for i, rule in enumerate(rules)
        ]

    def __bool__(self) -> bool:
        return bool(self.limits)

    def covering(self, agent: str, server: str, tool: str, spec: ToolSpec | None) -> list[Limit]:
        return [limit for limit in self.limits if limit.covers(agent, server, tool, spec)]

    def charge(
        self, store: Store, agent: str, server: str, tool: str, spec: ToolSpec | None
    ) -> list[Counter]:
        """Count the call against every limit that covers it, or refuse it (LimitReached):
        the counters it was counted on (for a `refund`)."""
        covering = self.covering(agent, server, tool, spec)
        if not covering:
            return []
        now = time.time()
        counters = [limit.counter(self.project, agent, now) for limit in covering]
        full = store.charge(counters)
        if full is None:
            return counters
        raise self._refusal(covering[counters.index(full)], full, agent, f"{server}.{tool}", now)

    def check(
        self, store: Store, agent: str, server: str, tool: str, spec: ToolSpec | None
    ) -> None:
        """Refuse a call that a limit would refuse now (LimitReached), counting nothing: what
        is asked before a person is asked to approve it."""
        covering = self.covering(agent, server, tool, spec)
        if not covering:
            return
        now = time.time()
        counters = [limit.counter(self.project, agent, now) for limit in covering]
        used = store.usage([c.key for c in counters], now)
        for limit, counter in zip(covering, counters, strict=True):
            if used.get(counter.key, 0) >= counter.limit:
                raise self._refusal(limit, counter, agent, f"{server}.{tool}", now)

    @staticmethod
    def _refusal(
        limit: Limit, full: Counter, agent: str, qualified: str, now: float
    ) -> LimitReached:
        server, tool = qualified.split(".", 1)
        resets = time.strftime("%H:%M:%S UTC", time.gmtime(full.ends))
        refusal = LimitReached(
            f"agent {agent!r} may not call {server}.{tool} now: {limit.describe()}, all used "
            f"in this window, which resets at {resets} (in {span_text(full.ends - now)}); nothing "
            "was started",
            hint="`bundlectl limits status` shows every limit's use",
        )
        refusal.limit, refusal.resets = f"limits[{limit.index}]", full.ends
        return refusal
