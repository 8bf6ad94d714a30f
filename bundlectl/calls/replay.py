"""`bundlectl policy replay`: every call an audit log records, decided again under the working
policy, and the decisions that change (#59).

The log keeps no argument values, so a call a rule with argument conditions names is not guessed:
it is counted as needing its arguments. A recorded `deny` that the same `ask` rule decides now is
the same decision (an ask no one could confirm where the call was made is recorded as a deny).
Resource reads, approval steps, refused requests and the `pending` half of a call are not calls to
decide again.

A log of gigabytes streams: records are grouped by what decides them (agent, server, tool, the
decision, the outcome, the rule), read from each line's bytes where bundlectl wrote them, and each
group is decided once; a line in another shape is read as JSON.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from bundlectl.policy.engine import Policy

_HEAD = b'{"timestamp": "'
_AGENT = b'"agent": '
_LOCK = b', "lock_digest": '
_OUTCOME = b'"outcome": "'
_RULE_END = b', "rule_source": '
_APPROVALS = b'"via": "approvals"'
_APPROVAL = b'"approval": '
NOT_CALLS = frozenset({"pending", "unauthorized", "unauthenticated", "withheld", "tool-changed"})


@dataclass
class Change:
    """Calls one agent made of one tool that are decided differently now."""

    agent: str
    tool: str
    then: str
    now: str
    rule_then: str | None
    rule_now: str | None
    where_now: str | None
    unlisted: bool
    calls: int = 0
    first: str = ""
    last: str = ""


@dataclass
class Replayed:
    calls: int = 0
    same: int = 0
    changes: dict[tuple[str, str, str, str], Change] = field(default_factory=dict)
    needs_arguments: dict[tuple[str, str], int] = field(default_factory=dict)
    unreadable: int = 0

    @property
    def changed(self) -> int:
        return sum(c.calls for c in self.changes.values())


@dataclass(frozen=True)
class _Verdict:
    kind: str  # skip | same | changed | arguments
    change: tuple[str, str, str, str] | None = None
    template: Change | None = None
    tool: tuple[str, str] | None = None


class _Judge:
    def __init__(self, policy: Policy, agents: set[str] | None) -> None:
        self.policy = policy
        self.agents = agents
        self.memo: dict[Any, _Verdict] = {}

    def verdict(self, record: dict[str, Any]) -> _Verdict:
        agent, server, tool = record.get("agent"), record.get("server"), record.get("tool")
        decision, outcome = record.get("decision"), record.get("outcome")
        if (
            not isinstance(agent, str)
            or not isinstance(server, str)
            or not isinstance(tool, str)
            or decision not in ("allow", "ask", "deny")
            or outcome in NOT_CALLS
            or record.get("via") == "approvals"
            or record.get("approval") is not None
            or tool == "-"
            or "/" in tool  # a resource read or a prompt, not a tool call
            or (self.agents is not None and agent not in self.agents)
        ):
            return _Verdict("skip")
        recorded_rule = record.get("rule")
        decided = self.policy.agent(agent).decide(server, tool, interactive=True)
        qualified = f"{server}.{tool}"
        if decided.conditional:
            return _Verdict("arguments", tool=(agent, qualified))
        now = decided.matched_effect
        rule = decided.rule
        unconfirmable = decision == "deny" and now == "ask" and rule is not None
        if now == decision or (unconfirmable and rule.pattern == recorded_rule):  # type: ignore[union-attr]
            return _Verdict("same")
        key = (agent, qualified, str(decision), now)
        template = Change(
            agent,
            qualified,
            str(decision),
            now,
            recorded_rule if isinstance(recorded_rule, str) else None,
            rule.label if rule is not None else decided.reason,
            rule.origin.position if rule is not None else None,
            unlisted=not decided.listed,
        )
        return _Verdict("changed", key, template)


def replay(source: Iterable[bytes], policy: Policy, agents: set[str] | None = None) -> Replayed:
    """Decide again every call the log lines of `source` record."""
    found = Replayed()
    judge = _Judge(policy, agents)
    memo = judge.memo
    for line in source:
        if not line.strip():
            continue
        stamp = line[15:35] if line.startswith(_HEAD) else b""
        key = _key(line)
        verdict = memo.get(key) if key is not None else None
        if verdict is None:
            try:
                record = json.loads(line)
            except ValueError:
                found.unreadable += 1
                continue
            if not isinstance(record, dict) or "event" in record:
                continue
            verdict = judge.verdict(record)
            if key is not None:
                memo[key] = verdict
        if verdict.kind == "skip":
            continue
        found.calls += 1
        if verdict.kind == "same":
            found.same += 1
        elif verdict.kind == "arguments":
            assert verdict.tool is not None
            found.needs_arguments[verdict.tool] = found.needs_arguments.get(verdict.tool, 0) + 1
        else:
            assert verdict.change is not None
            assert verdict.template is not None
            change = found.changes.get(verdict.change)
            if change is None:
                template = verdict.template
                change = found.changes[verdict.change] = Change(**vars(template))
            change.calls += 1
            when = stamp.decode("ascii", "replace")
            if not change.first:
                change.first = when
            change.last = when
    return found


def _key(line: bytes) -> tuple[bytes, bytes, bool, bool] | None:
    """What decides a record, as the bytes bundlectl wrote (None: another shape: parse it):
    agent to decision, outcome to rule, whether it is an approval's step."""
    start = line.find(_AGENT)
    end = line.find(_LOCK, start)
    if start < 0 or end < 0:
        return None
    at = line.find(_OUTCOME, end)
    stop = line.find(_RULE_END, at) if at >= 0 else -1
    if stop < 0:  # no rule (a default decided): the outcome alone
        stop = line.find(b'"', at + len(_OUTCOME)) if at >= 0 else end
    return (line[start:end], line[at:stop], _APPROVALS in line, _APPROVAL in line)
