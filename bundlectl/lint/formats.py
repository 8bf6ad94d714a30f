"""Lint output: text, versioned JSON, SARIF 2.1.0 for code scanning, GitHub annotations."""

from __future__ import annotations

from collections import Counter
from typing import Any

from bundlectl import __version__
from bundlectl.lint.rules import RULES, Finding
from bundlectl.output import paint, pretty_json

JSON_VERSION = 1


def text(findings: list[Finding]) -> str:
    """A line per finding, its fix hint indented below it, then the counts."""
    lines = []
    for f in findings:
        lines.append(
            f"{f.file}:{f.line}:{f.column}: {f.rule} {paint(f.severity, f.severity)} {f.message}"
            + (f" ({f.yaml_path})" if f.yaml_path else "")
        )
        if f.hint:
            lines.append(f"  {paint('hint:', 'hint')} {f.hint}")
    counts = Counter(f.severity for f in findings)
    files = len({f.file for f in findings})
    if findings:
        lines.append(
            f"{counts['error']} errors, {counts['warning']} warnings, "
            f"{counts['info']} info in {files} file{'s' if files != 1 else ''}"
        )
    else:
        lines.append("no problems found")
    return "\n".join(lines) + "\n"


def as_json(findings: list[Finding]) -> str:
    data = {
        "version": JSON_VERSION,
        "findings": [_finding_json(f) for f in findings],
        "summary": dict(Counter(f.severity for f in findings)),
    }
    return pretty_json(data) + "\n"


def _finding_json(f: Finding) -> dict[str, Any]:
    p = f.problem
    return {
        "rule": f.rule,
        "name": RULES[f.rule].name,
        "severity": f.severity,
        "message": p.message,
        "file": p.file,
        "line": p.line,
        "column": p.column,
        "end_line": f.end_line,
        "end_column": f.end_column,
        "yaml_path": p.yaml_path,
        "fingerprint": f.fingerprint,
        "hint": f.hint,
    }


_LEVEL = {"error": "error", "warning": "warning", "info": "note"}


def sarif(findings: list[Finding]) -> str:
    """SARIF 2.1.0 as GitHub code scanning accepts it."""
    used = sorted({f.rule for f in findings} | set(RULES))
    index = {rule: i for i, rule in enumerate(used)}
    rules: list[dict[str, Any]] = []
    for rule_id in used:
        rule = RULES[rule_id]
        props: dict[str, Any] = {"tags": ["security"] if rule.security is not None else []}
        if rule.security is not None:
            props["security-severity"] = f"{rule.security:.1f}"
        rules.append(
            {
                "id": rule.id,
                "name": rule.name,
                "shortDescription": {"text": rule.rationale},
                "fullDescription": {"text": f"{rule.rationale} {rule.hint}"},
                "help": {"text": rule.hint, "markdown": f"**{rule.name}**: {rule.hint}"},
                "defaultConfiguration": {"level": _LEVEL[rule.severity]},
                "properties": props,
            }
        )
    results = [
        {
            "ruleId": f.rule,
            "ruleIndex": index[f.rule],
            "level": _LEVEL[f.severity],
            "message": {"text": f.message + (f" — {f.hint}" if f.hint else "")},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": {"uri": f.file},
                        "region": {
                            "startLine": f.line,
                            "startColumn": f.column,
                            "endLine": max(f.end_line, f.line),
                            "endColumn": max(f.end_column, f.column + 1)
                            if f.end_line <= f.line
                            else f.end_column,
                        },
                    }
                }
            ],
            "partialFingerprints": {"bundlectlFingerprint/v1": f.fingerprint},
        }
        for f in findings
    ]
    log = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "bundlectl",
                        "version": __version__,
                        "semanticVersion": __version__,
                        "informationUri": "https://pypi.org/project/bundlectl/",
                        "rules": rules,
                    }
                },
                "results": results,
            }
        ],
    }
    return pretty_json(log) + "\n"


def _escape_data(value: str) -> str:
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(value: str) -> str:
    return _escape_data(value).replace(":", "%3A").replace(",", "%2C")


def github(findings: list[Finding]) -> str:
    """GitHub Actions workflow commands, one annotation per finding."""
    kind = {"error": "error", "warning": "warning", "info": "notice"}
    lines = []
    for f in findings:
        props = ",".join(
            [
                f"file={_escape_property(f.file)}",
                f"line={f.line}",
                f"col={f.column}",
                f"endLine={f.end_line}",
                f"endColumn={f.end_column}",
                f"title={_escape_property(f'{f.rule} {RULES[f.rule].name}')}",
            ]
        )
        lines.append(f"::{kind[f.severity]} {props}::{_escape_data(f.message)}")
    return "\n".join(lines) + ("\n" if lines else "")


FORMATS = {"text": text, "json": as_json, "sarif": sarif, "github": github}
