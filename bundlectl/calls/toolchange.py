"""A "tool changed" request (`pin_tools`, #60) as a person reads it: the definitions it binds,
what differs, and the difference line by line — for `approvals show`, the approvers' page and the
announcement sent to `policy.approvals.notify`."""

from __future__ import annotations

import json
from typing import Any

from bundlectl.state import Approval


def change_of(approval: Approval) -> tuple[dict[str, Any], dict[str, Any]]:
    """A "tool changed" request's definitions: (as reviewed, as the server gives it now)."""
    try:
        data = json.loads(approval.shown)
        return dict(data["before"]), dict(data["after"])
    except (ValueError, KeyError, TypeError):
        return {}, {}


_PARTS = (
    ("description", "description"),
    ("input_schema", "input schema"),
    ("annotations", "annotations"),
)


def changed_parts(approval: Approval) -> list[str]:
    """What differs in a "tool changed" request: `name`, `description`, `input schema`..."""
    before, after = change_of(approval)
    parts = ["name"] if before.get("name") != after.get("name") else []
    return parts + [label for key, label in _PARTS if before.get(key) != after.get(key)]


def change_lines(approval: Approval) -> list[str]:
    """A "tool changed" request as a person reads it: a renamed or moved tool's names, then
    each part that differs as a unified diff (`-` as reviewed, `+` now) — the description by
    its lines, schemas and annotations as indented JSON. Raw text: a caller shows each line
    through `output.visible` (lines are split at `\n` alone, so a server's U+2028 cannot start
    one)."""
    import difflib  # noqa: PLC0415 - only where a person reads a change

    before, after = change_of(approval)
    lines = []
    if before.get("name") != after.get("name"):
        lines.append(f"name: {before.get('name')} → {after.get('name')}")
    for key, label in _PARTS:
        old, new = before.get(key), after.get(key)
        if old == new:
            continue
        lines.append(f"{label}:")
        diff = difflib.unified_diff(_text_lines(old), _text_lines(new), lineterm="", n=3)
        lines.extend(f"  {line}" for line in diff if not line.startswith(("---", "+++")))
    return lines


def _text_lines(value: Any) -> list[str]:
    if isinstance(value, str):
        return value.split("\n")
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False).split("\n")
