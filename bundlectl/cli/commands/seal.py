"""`bundlectl audit seal` and the seals' part of `audit verify --key` (see `calls.auditseal`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bundlectl.calls import auditfile, auditseal
from bundlectl.config.paths import display_path
from bundlectl.config.settings import option_seconds
from bundlectl.errors import ReportedFailure, UsageError
from bundlectl.output import err, out


def seal(log: Path, *, init: bool, every: str | None) -> int:
    """`--init`: start sealing `log` and print the verification key once; else seal it now."""
    if every is not None and not init:
        raise UsageError("--every goes with --init", hint="bundlectl audit seal --init --every 1h")
    if init:
        interval = _interval(every)
        key = auditseal.initialise(log, interval)
        out(key)
        err(
            f"the audit log {display_path(log)} is sealed every {every or '15m'} from now on; "
            "the line above is its verification key, printed this once: keep it away from "
            "this machine (a password manager, the auditor's vault)"
        )
        err("hint: bundlectl audit verify --key KEY checks the log with it")
        return 0
    writer = auditfile.AuditFile(log)
    try:
        sealed = writer.seal()
    finally:
        writer.close()
    if not sealed:
        raise UsageError(
            f"the audit log {display_path(log)} is not sealed",
            hint="bundlectl audit seal --init starts sealing it",
        )
    out(f"sealed {display_path(log)}")
    return 0


def _interval(every: str | None) -> float:
    if every is None:
        return auditseal.DEFAULT_INTERVAL
    return option_seconds(every, "--every", "15m, 1h or 1d")


def key_from(text: str) -> bytes:
    """`--key`: the verification key itself, or `@FILE` holding it."""
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text()
        except OSError as exc:
            raise UsageError(f"cannot read {text[1:]}: {exc.strerror}") from None
    return auditseal.verification_key(text)


def files_of(log: Path) -> list[Path]:
    """The log and the rotated files before it, oldest first."""
    rotated = []
    number = 1
    while (earlier := log.with_name(f"{log.name}.{number}")).is_file():
        rotated.append(earlier)
        number += 1
    return [*reversed(rotated), log]


def verify_sealed(log: Path, key: bytes) -> dict[str, Any]:
    """Check the seals of `log` and its rotated files with the verification `key`: what is
    sealed, up to when; the records not sealed yet; or the first bad seal (ReportedFailure)."""
    files = files_of(log)
    spans: list[tuple[Path, int]] = []  # each file and the stream line it starts at

    def stream() -> Iterator[bytes]:
        number = 0
        for path in files:
            spans.append((path, number + 1))
            for line in auditfile.lines(path):
                number += 1
                yield line

    first = next(iter(auditfile.lines(files[0])), b"")
    rotated = b'"event": "log-start"' in first
    report = auditseal.check_seals(stream(), key, rotated=rotated)

    def where(number: int) -> str:
        path, start = next((p, s) for p, s in reversed(spans) if s <= number)
        return f"{display_path(path)}:{number - start + 1}"

    if report.problem is not None:
        line, what = report.problem
        raise ReportedFailure(
            f"{where(line)}: the record {what}",
            hint="the sealed records cannot be trusted; compare with a copy shipped elsewhere",
        )
    if report.seals == 0:
        raise ReportedFailure(
            f"{display_path(log)}: no seal to check (the log was sealed less than an epoch ago, "
            "or its seals were removed)",
            hint="bundlectl audit seal seals it now",
        )
    return {
        "seals": report.seals,
        "sealed_from_epoch": report.first_epoch,
        "sealed_through_epoch": report.last_epoch,
        "sealed_at": report.last_time,
        "sealed_through": where(report.last_line or 1),
        "unsealed_records": report.after,
        "rotated_away": rotated,
    }


def said(found: dict[str, Any]) -> list[str]:
    """`verify_sealed`'s answer for a person."""
    lines = [
        f"sealed through epoch {found['sealed_through_epoch']} ({found['sealed_at']}, "
        f"{found['sealed_through']}): {found['seals']} seal(s) of epochs "
        f"{found['sealed_from_epoch']}-{found['sealed_through_epoch']}, each matching its "
        "epoch's key"
    ]
    if found["rotated_away"]:
        lines.append(
            "the files before the oldest one here were rotated away: epochs before "
            f"{found['sealed_from_epoch']} cannot be checked"
        )
    if found["unsealed_records"]:
        lines.append(
            f"{found['unsealed_records']} record(s) after it are not sealed yet (the next epoch "
            "seals them; `bundlectl audit seal` seals them now)"
        )
    return lines
