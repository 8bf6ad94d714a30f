"""`# bundlectl: ignore[BCL204,BCL207] reason` on the offending line or the line above."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from bundlectl.errors import Problem
from bundlectl.lint.rules import RULES, Finding

_COMMENT = re.compile(r"#\s*bundlectl:\s*ignore\[([A-Za-z0-9,\s]+)\]")


@dataclass
class Suppression:
    file: str
    line: int
    column: int
    end_column: int
    rules: list[str]
    used: set[str] = field(default_factory=set)


def find(file: str, text: str) -> list[Suppression]:
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        match = _COMMENT.search(line)
        if match:
            ids = [r.strip().upper() for r in match.group(1).split(",") if r.strip()]
            found.append(Suppression(file, number, match.start() + 1, len(line) + 1, ids))
    return found


def apply(findings: list[Finding], suppressions: list[Suppression]) -> list[Finding]:
    """Mark suppressed findings; report each suppression that suppressed nothing (BCL901)."""
    by_place: dict[tuple[str, int], list[Suppression]] = {}
    for item in suppressions:
        by_place.setdefault((item.file, item.line), []).append(item)
        by_place.setdefault((item.file, item.line + 1), []).append(item)
    for finding in findings:
        for item in by_place.get((finding.file, finding.line), []):
            if finding.rule in item.rules:
                finding.suppressed = True
                item.used.add(finding.rule)
    unused = []
    for item in suppressions:
        for rule in item.rules:
            if rule not in item.used:
                known = "" if rule in RULES else " (no such rule)"
                unused.append(
                    Finding(
                        "BCL901",
                        Problem(
                            item.file,
                            item.line,
                            item.column,
                            f"suppression of {rule}{known} suppressed nothing",
                            end_line=item.line,
                            end_column=item.end_column,
                        ),
                        RULES["BCL901"].severity,
                        f"{rule}@{item.line}",
                    )
                )
    return unused
