"""The project's policy in Cedar (`bundlectl policy export --format cedar`, #59): a schema, the
entities of the catalog and policies that decide every call as bundlectl does, for ToolHive and
anything else that speaks Cedar. Pure: text and data, no I/O.

The model: an agent is `Agent::"name"`; a tool is `Tool::"server.tool"` with its `server` and
`name`, its annotations as `readOnly`, `destructive` and `openWorld`, and `pinned` (the lock
records it); there is one action, `Action::"call"`, whose context says whether a person confirmed
the call where it was made (`confirmed`) and how many approvers approved it out of band
(`approvals`), as the gateway knows.

bundlectl's precedence is written with Cedar's (a `forbid` overrides every `permit`, nothing
permitted is denied):
- a deny rule, `policy.deny` and pinning are `forbid`s;
- an allow rule is a `permit`;
- an ask rule is a `permit` and a `forbid` unless the call was confirmed (or approved by as many
  people as its first matching ask rule needs: `approve: out-of-band` wants approvers only);
- a listed agent with deny rules only, and agents not listed under `policy.default: allow`, are
  permitted what nothing forbids.

Patterns become `==` and `like` on the server and the tool's name. What Cedar cannot say exactly
— a `?` in a pattern (Cedar's `like` has only `*`), a rule with argument conditions — is refused,
listed with its position, never approximated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bundlectl.policy.catalog import in_class, is_destructive
from bundlectl.policy.patterns import split_rule
from bundlectl.policy.rules import Rule
from bundlectl.resolve.resolved import Resolution

SCHEMA: dict[str, Any] = {
    "": {
        "entityTypes": {
            "Agent": {},
            "Tool": {
                "shape": {
                    "type": "Record",
                    "attributes": {
                        "server": {"type": "String"},
                        "name": {"type": "String"},
                        "readOnly": {"type": "Boolean"},
                        "destructive": {"type": "Boolean"},
                        "openWorld": {"type": "Boolean"},
                        "pinned": {"type": "Boolean"},
                    },
                }
            },
        },
        "actions": {
            "call": {
                "appliesTo": {
                    "principalTypes": ["Agent"],
                    "resourceTypes": ["Tool"],
                    "context": {
                        "type": "Record",
                        "attributes": {
                            "confirmed": {"type": "Boolean"},
                            "approvals": {"type": "Long"},
                        },
                    },
                }
            }
        },
    }
}


@dataclass
class CedarPolicies:
    policies: str
    entities: list[dict[str, Any]]
    schema: dict[str, Any] = field(default_factory=lambda: SCHEMA)
    refused: list[str] = field(default_factory=list)  # what Cedar cannot say, with where


def _string(text: str) -> str:
    """A Cedar string literal (Cedar's escapes: `\\u{...}`, not JSON's `\\uXXXX`)."""
    out = []
    for char in text:
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif char == "\t":
            out.append("\\t")
        elif char == "\r":
            out.append("\\r")
        elif ord(char) < 0x20 or 0x7F <= ord(char) < 0xA0:
            out.append(f"\\u{{{ord(char):x}}}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _part(attribute: str, part: str) -> str | None:
    if part == "*":
        return None
    if "*" in part:
        return f"resource.{attribute} like {_string(part)}"  # a glob's `*` is like's
    return f"resource.{attribute} == {_string(part)}"


def _match(rule: Rule) -> str:
    server, tool = split_rule(rule.pattern)
    parts = [p for p in (_part("server", server), _part("name", tool)) if p is not None]
    return " && ".join(parts) or "true"


def _confirmed(rule: Rule) -> str:
    if rule.by_approver:
        return f"context.approvals >= {rule.approvals}"
    return "context.confirmed || context.approvals >= 1"


def export(resolution: Resolution) -> CedarPolicies:
    """The project's policy, its catalog and the schema, in Cedar."""
    policy = resolution.policy
    refused: list[str] = []
    listed = sorted(policy.set.agents)
    out: list[str] = [
        "// bundlectl's policy in Cedar: `bundlectl policy export --format cedar`.",
        "// context.confirmed: a person confirmed the call where it was made;",
        "// context.approvals: how many approvers approved it out of band.",
    ]

    def usable(rule: Rule) -> bool:
        if rule.condition is not None:
            refused.append(f"{rule.label} ({rule.origin}): argument conditions")
            return False
        if "?" in rule.pattern:
            refused.append(f"{rule.label} ({rule.origin}): `?` (Cedar's like has only `*`)")
            return False
        return True

    def emit(comment: str, effect: str, principal: str, when: str) -> None:
        out.append("")
        out.append(f"// {comment}")
        out.append(f'{effect} (principal{principal}, action == Action::"call", resource)')
        out.append(f"when {{ {when} }};")

    for rule in policy.set.global_deny:
        if usable(rule):
            emit(f"{rule.label} ({rule.origin})", "forbid", "", _match(rule))
    if policy.set.pin_tools and policy.set.locked_tools is not None:
        emit("policy.pin_tools: tools the lock does not record", "forbid", "", "!resource.pinned")
    for name in listed:
        agent = policy.agent(name)
        who = f" == Agent::{_string(name)}"
        own = [r for r in agent.rules if r.agent is not None]
        earlier_asks: list[str] = []
        for rule in own:
            if not usable(rule):
                continue
            where = f"{rule.label} ({rule.origin})"
            match = _match(rule)
            if rule.effect == "deny":
                emit(where, "forbid", who, match)
            elif rule.effect == "allow":
                emit(where, "permit", who, match)
            else:
                emit(where, "permit", who, match)
                first = " && ".join(f"!({m})" for m in earlier_asks)
                unless = f"{match}{' && ' + first if first else ''} && !({_confirmed(rule)})"
                emit(f"{where}: unless confirmed", "forbid", who, unless)
                earlier_asks.append(match)
        if agent.falls_open:
            emit(f"agent {name!r} has deny rules only: the rest is allowed", "permit", who, "true")
    if policy.set.default == "allow":
        others = ", ".join(f"Agent::{_string(n)}" for n in listed)
        origin = policy.set.default_origin
        emit(
            f"policy.default: allow ({origin or 'absent'}): agents not listed",
            "permit",
            "",
            f"!(principal in [{others}])" if listed else "true",
        )
    locked = policy.set.locked_tools
    entities: list[dict[str, Any]] = [
        {"uid": {"type": "Agent", "id": name}, "attrs": {}, "parents": []} for name in listed
    ]
    for ref in resolution.catalog.tools:
        spec = ref.spec
        entities.append(
            {
                "uid": {"type": "Tool", "id": ref.qualified},
                "attrs": {
                    "server": ref.server,
                    "name": ref.tool,
                    "readOnly": in_class(spec, "read-only"),
                    "destructive": in_class(spec, "destructive")
                    or (spec is not None and is_destructive(spec)),
                    "openWorld": in_class(spec, "open-world"),
                    "pinned": locked is None or (ref.server, ref.tool) in locked,
                },
                "parents": [],
            }
        )
    return CedarPolicies("\n".join(out) + "\n", entities, refused=refused)
