"""`bundlectl audit`: read the audit log — filter it, sum it up, and check its hash chain."""

from __future__ import annotations

import calendar
import csv
import io
import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bundlectl.calls import audit, userconfig
from bundlectl.cli.options import Format, MatrixFormat
from bundlectl.config.models import DURATION_UNITS, seconds
from bundlectl.config.paths import display_path
from bundlectl.errors import ReportedFailure, UsageError
from bundlectl.output import JSON_FORMAT_VERSION, emit_json, err, out, table, write
from bundlectl.policy.patterns import matches

COLUMNS = ["timestamp", "agent", "server", "tool", "decision", "outcome", "duration_ms", "via"]


def _log(file: Path | None) -> Path:
    return file if file is not None else audit.log_path(userconfig.load().audit.path)


def _lines(path: Path) -> list[bytes]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(
            f"no audit log at {display_path(path)}",
            hint="calls write it (exec, serve); BUNDLECTL_AUDIT_LOG or audit.path moves it",
        ) from None
    except OSError as exc:
        raise UsageError(f"cannot read {display_path(path)}: {exc.strerror}") from None
    return data.rstrip(b"\n").split(b"\n") if data else []


def _records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, line in enumerate(_lines(path), start=1):
        try:
            record = json.loads(line)
        except ValueError:
            err(f"warning: {display_path(path)}:{number}: not a JSON record; skipped")
            continue
        if isinstance(record, dict):
            yield number, record


def verify(file: Path | None, *, fmt: Format) -> int:
    """Check the chain: each record's `prev` is the digest of the line before it. The first
    record that breaks it is reported by line (exit 1)."""
    path = _log(file)
    lines = _lines(path)
    problem: tuple[int, str] | None = None
    unchained = chained = 0
    for number, raw in enumerate(lines, start=1):
        try:
            record = json.loads(raw)
        except ValueError:
            problem = (number, "is not a JSON record (changed, or cut short)")
            break
        prev = record.get("prev") if isinstance(record, dict) else None
        if prev is None:
            if chained:
                problem = (number, "has no `prev`: the chain ends here (a record was rewritten)")
                break
            unchained += 1
            continue
        if number == 1:
            problem = (number, "links to a record before it, and there is none (the head of the "
                       "log was removed)")  # fmt: skip
            break
        if prev != audit.link(lines[number - 2]):
            problem = (number, f"does not link to line {number - 1}: one of the two was "
                       "changed, or records between them were removed or inserted")  # fmt: skip
            break
        chained += 1
    if problem is None and not chained and unchained > 1:
        problem = (2, "no record carries a chain (`prev`): nothing can be verified")
    where = display_path(path)
    if fmt is Format.json:
        emit_json(
            {
                "format_version": JSON_FORMAT_VERSION,
                "file": str(path),
                "records": len(lines),
                "chained": chained,
                "broken_at": problem[0] if problem else None,
                "problem": problem[1] if problem else None,
            }
        )
    elif problem is None:
        out(f"{where}: {len(lines)} record(s), each linked to the one before it")
        if unchained > 1:
            err(f"note: the first {unchained} were written before records were chained")
    if problem is not None:
        intact = problem[0] - 2
        raise ReportedFailure(
            f"{where}:{problem[0]}: the record {problem[1]}",
            hint=(f"lines 1-{intact} link up intact; " if intact > 0 else "")
            + "compare with a copy of the log shipped elsewhere",
        )
    return 0


def _since(text: str | None) -> float | None:
    if text is None:
        return None
    if not text[:-1].isdigit() or text[-1:] not in DURATION_UNITS or text.startswith("0"):
        raise UsageError(f"--since {text!r} is not a duration", hint="for example 30m, 1h, 7d")
    return time.time() - seconds(text)


def _stamp(text: str) -> float:
    try:
        return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))
    except (ValueError, TypeError):
        return 0.0


def _selected(
    path: Path, agent: str | None, tool: str | None, outcome: str | None, since: str | None
) -> list[dict[str, Any]]:
    after = _since(since)
    outcomes = set(outcome.split(",")) if outcome else None
    chosen = []
    for _, record in _records(path):
        if agent is not None and record.get("agent") != agent:
            continue
        if tool is not None and not matches(
            tool, str(record.get("server")), str(record.get("tool"))
        ):
            continue
        if outcomes is not None and record.get("outcome") not in outcomes:
            continue
        if after is not None and _stamp(str(record.get("timestamp"))) < after:
            continue
        chosen.append(record)
    return chosen


def query(
    file: Path | None,
    *,
    agent: str | None,
    tool: str | None,
    outcome: str | None,
    since: str | None,
    fmt: MatrixFormat,
) -> int:
    records = _selected(_log(file), agent, tool, outcome, since)
    if fmt is MatrixFormat.json:
        emit_json({"format_version": JSON_FORMAT_VERSION, "records": records})
        return 0
    if fmt is MatrixFormat.csv:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(records)
        write(buffer.getvalue())
        return 0
    if not records:
        out("no records match")
        return 0
    table(
        [
            [
                str(r.get("timestamp", "")),
                str(r.get("agent", "")),
                f"{r.get('server')}.{r.get('tool')}",
                str(r.get("decision", "")),
                str(r.get("outcome", "")),
                f"{r.get('duration_ms', 0):g}",
                str(r.get("via", "")),
            ]
            for r in records
        ],
        ["TIME", "AGENT", "TOOL", "DECISION", "OUTCOME", "MS", "VIA"],
    )
    return 0


def summary(file: Path | None, *, agent: str | None, since: str | None, fmt: Format) -> int:
    """Calls per agent and tool: how many, how they ended, how long they took (pending records,
    which pair with their outcome, are not counted)."""
    records = [
        r for r in _selected(_log(file), agent, None, None, since) if r.get("outcome") != "pending"
    ]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for record in records:
        key = (str(record.get("agent")), f"{record.get('server')}.{record.get('tool')}")
        groups.setdefault(key, []).append(record)
    rows: list[dict[str, Any]] = []
    for (who, what), found in sorted(groups.items()):
        outcomes = Counter(str(r.get("outcome")) for r in found)
        durations = sorted(
            float(r.get("duration_ms") or 0) for r in found if r.get("outcome") == "ok"
        )
        rows.append(
            {
                "agent": who,
                "tool": what,
                "records": len(found),
                "ok": outcomes.get("ok", 0),
                "denied": sum(v for k, v in outcomes.items() if k.startswith("denied")),
                "failed": sum(
                    v
                    for k, v in outcomes.items()
                    if k not in ("ok",) and not k.startswith("denied")
                ),
                "median_ms": durations[len(durations) // 2] if durations else None,
                "outcomes": dict(outcomes),
            }
        )
    if fmt is Format.json:
        emit_json({"format_version": JSON_FORMAT_VERSION, "summary": rows})
        return 0
    if not rows:
        out("no records")
        return 0
    table(
        [
            [
                r["agent"],
                r["tool"],
                str(r["records"]),
                str(r["ok"]),
                str(r["denied"]),
                str(r["failed"]),
                "-" if r["median_ms"] is None else f"{r['median_ms']:g}",
            ]
            for r in rows
        ],
        ["AGENT", "TOOL", "RECORDS", "OK", "DENIED", "OTHER", "MEDIAN MS"],
    )
    return 0
