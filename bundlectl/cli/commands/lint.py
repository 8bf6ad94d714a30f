"""`bundlectl lint`: validate and analyse, for CI."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from bundlectl.cli.options import FailLevel, LintFormat
from bundlectl.config.fsio import atomic_write
from bundlectl.lint import engine
from bundlectl.lint.formats import FORMATS
from bundlectl.lint.rules import Severity
from bundlectl.output import plain, write


def run(
    targets: list[Path],
    *,
    config: Path | None,
    fmt: LintFormat,
    output: Path | None,
    fail_level: FailLevel,
    select: list[str],
    ignore: list[str],
    exit_zero: bool,
    environment: bool = False,
    strict: bool = False,
) -> int:
    level: Severity = fail_level.value
    selection = engine.Selection(engine.check_ids(select), engine.check_ids(ignore))
    selection.environment = environment
    findings = engine.run(targets, config, selection)
    if strict:  # every warning is an error (what a hostile description gets in CI)
        findings = [
            dataclasses.replace(f, severity="error") if f.severity == "warning" else f
            for f in findings
        ]
    if output is not None:
        with plain():  # a file gets no terminal colours
            atomic_write(output, FORMATS[fmt.value](findings))
    else:
        write(FORMATS[fmt.value](findings))
    if exit_zero:
        return 0
    return 1 if engine.failing(findings, level) else 0
