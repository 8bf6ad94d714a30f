"""`bundlectl lint`: validate and analyse, for CI."""

from __future__ import annotations

import sys
from pathlib import Path

from bundlectl.errors import UsageError
from bundlectl.fsio import atomic_write
from bundlectl.lint import engine
from bundlectl.lint.formats import FORMATS
from bundlectl.lint.rules import SEVERITY_RANK, Severity


def run(
    targets: list[Path],
    *,
    config: Path | None,
    fmt: str,
    output: Path | None,
    fail_level: str,
    select: list[str],
    ignore: list[str],
    exit_zero: bool,
) -> int:
    if fmt not in FORMATS:
        raise UsageError(f"unknown format {fmt!r}", hint=f"use one of {', '.join(FORMATS)}")
    if fail_level not in SEVERITY_RANK:
        raise UsageError(f"unknown fail level {fail_level!r}", hint="use error, warning or info")
    level: Severity = fail_level  # type: ignore[assignment]
    selection = engine.Selection(engine.check_ids(select), engine.check_ids(ignore))
    findings = engine.run(targets, config, selection)
    rendered = FORMATS[fmt](findings)
    if output is not None:
        atomic_write(output, rendered)
    else:
        sys.stdout.write(rendered)
    if exit_zero:
        return 0
    return 1 if engine.failing(findings, level) else 0
