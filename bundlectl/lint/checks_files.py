"""0xx: the files themselves — syntax, duplicate keys, schema, names, ambiguous scalars."""

from __future__ import annotations

from collections.abc import Iterator

from bundlectl.config.yamlio import format_path
from bundlectl.errors import Problem
from bundlectl.lint.context import Context, LintedFile, at, from_problem
from bundlectl.lint.rules import RULES, Finding

_TYPES = {
    "tag:yaml.org,2002:float": "a number",
    "tag:yaml.org,2002:int": "an integer",
    "tag:yaml.org,2002:bool": "a boolean",
    "tag:yaml.org,2002:null": "null",
    "tag:yaml.org,2002:timestamp": "a date",
}
_RULE_OF_CODE = {
    "yaml_syntax": "BCL001",
    "yaml_limit": "BCL001",
    "invalid_tool_schema": "BCL006",
    "unknown_bundle": "BCL101",
    "missing_registry": "BCL109",
    "registry_layout": "BCL110",
    "duplicate_key": "BCL002",
    "invalid_name": "BCL005",
    "unsupported_pattern": "BCL206",
}


def rule_of(problem: Problem) -> str:
    """The rule a loader or validator problem belongs to."""
    return _RULE_OF_CODE.get(problem.code, "BCL003")


def file_problems(ctx: Context) -> Iterator[Finding]:
    """Every loader and validator problem, as the rule its kind belongs to."""
    for linted in ctx.files:
        yield from _classify(linted)


def _classify(linted: LintedFile) -> Iterator[Finding]:
    doc = linted.doc
    for problem in linted.problems:
        rule = rule_of(problem)
        path = tuple(_path_parts(problem.yaml_path))
        plain = doc.plain_scalars.get(path)
        if problem.code == "string_type" and plain is not None and plain.tag in _TYPES:
            # Not a schema problem so much as YAML reading the value as something else.
            yield at(
                "BCL004",
                doc,
                path,
                f"unquoted {plain.text} is read as {_TYPES[plain.tag]}, not a string; "
                f"quote it: '{plain.text}'",
                anchor=plain.text,
            )
            continue
        yield from_problem(rule, problem)


def _path_parts(text: str) -> list[str | int]:
    parts: list[str | int] = []
    for chunk in text.replace("[", ".[").split("."):
        if not chunk:
            continue
        parts.append(int(chunk[1:-1]) if chunk.startswith("[") else chunk)
    return parts


def yaml11_scalars(ctx: Context) -> Iterator[Finding]:
    """Plain strings YAML 1.1 readers take for booleans or numbers (no, on, 010, 1:30)."""
    for linted in ctx.files:
        for path, plain in linted.doc.plain_scalars.items():
            if plain.tag == "tag:yaml.org,2002:str":
                yield at(
                    "BCL004",
                    linted.doc,
                    path,
                    f"unquoted {plain.text!r} is a string here but a boolean or number "
                    f"to YAML 1.1 tools; quote it: '{plain.text}'",
                    anchor=plain.text,
                )


def merge_keys(ctx: Context) -> Iterator[Finding]:
    """BCL007: every `<<` merge key, at the key."""
    for linted in ctx.files:
        for path, span in linted.doc.merges:
            where = format_path(path) or "the document"
            problem = Problem(
                linted.doc.file,
                span.line,
                span.column,
                f"a merge key copies keys into {where} from elsewhere; they take effect here "
                "unseen",
                format_path(path),
                end_line=span.end_line,
                end_column=span.end_column,
            )
            yield Finding("BCL007", problem, RULES["BCL007"].severity, f"<<{format_path(path)}")
