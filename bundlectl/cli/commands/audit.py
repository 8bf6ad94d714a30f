"""`bundlectl audit`: read the audit log — filter it, sum it up, and check its hash chain."""

from __future__ import annotations

import calendar
import csv
import io
import json
import time
from array import array
from collections import Counter, deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bundlectl.calls import auditchain, auditfile, auditseal
from bundlectl.cli.options import Format, MatrixFormat
from bundlectl.config import userconfig
from bundlectl.config.fsio import atomic_write
from bundlectl.config.paths import display_path
from bundlectl.config.settings import option_seconds
from bundlectl.errors import ReportedFailure, UsageError
from bundlectl.output import JSON_FORMAT_VERSION, emit_json, err, out, table, write
from bundlectl.policy.patterns import matches
from bundlectl.suggest import Suggester

COLUMNS = ["timestamp", "agent", "server", "tool", "decision", "outcome", "duration_ms", "via"]


def log_file(file: Path | None) -> Path:
    return file if file is not None else auditfile.log_path(userconfig.load().audit.path)


def log_lines(path: Path) -> Iterator[bytes]:
    try:
        yield from auditfile.lines(path)
    except FileNotFoundError:
        raise UsageError(
            f"no audit log at {display_path(path)}",
            hint="calls write it (exec, serve); BUNDLECTL_AUDIT_LOG or audit.path moves it",
        ) from None
    except OSError as exc:
        raise UsageError(f"cannot read {display_path(path)}: {exc.strerror}") from None


def _records(path: Path, *, pending: bool = True) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each call record with its line number; `pending`: see `auditfile.records`."""
    for number, record in auditfile.records(log_lines(path), pending=pending):
        if record is None:
            err(f"warning: {display_path(path)}:{number}: not a JSON record; skipped")
            continue
        yield number, record


def _walk(path: Path) -> tuple[tuple[int, str] | None, int, int, int]:
    """The chain's first break (line, what), and the records, chained and unchained seen."""
    problem: tuple[int, str] | None = None
    unchained = chained = records = 0
    before: bytes | None = None  # the line before the one being checked
    for number, raw in enumerate(log_lines(path), start=1):
        records = number
        line, before = before, raw
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
            if record.get("event") == "log-start":  # a rotation's first record
                problem = _continues(path, record)
                if problem is not None:
                    break
                chained += 1
                continue
            problem = (number, "links to a record before it, and there is none (the head of the "
                       "log was removed)")  # fmt: skip
            break
        assert line is not None
        if prev != auditchain.link(line):
            problem = (number, f"does not link to line {number - 1}: one of the two was "
                       "changed, or records between them were removed or inserted")  # fmt: skip
            break
        chained += 1
    return problem, records, chained, unchained


def verify(file: Path | None, *, fmt: Format, key: str | None = None) -> int:
    """Check the chain: each record's `prev` is the digest of the line before it. The first
    record that breaks it is reported by line (exit 1). `key`: the verification key of a
    sealed log (`audit seal --init`): every seal is checked too (`seal.verify_sealed`)."""
    from bundlectl.cli.commands import seal  # noqa: PLC0415 - a small module of its own

    path = log_file(file)
    first = seal.key_from(key) if key is not None else None
    problem, records, chained, unchained = _walk(path)
    if problem is None and not chained and unchained > 1:
        problem = (2, "no record carries a chain (`prev`): nothing can be verified")
    sealed = seal.verify_sealed(path, first) if first is not None and problem is None else None
    where = display_path(path)
    if fmt is Format.json:
        emit_json(
            {
                "format_version": JSON_FORMAT_VERSION,
                "file": str(path),
                "records": records,
                "chained": chained,
                "broken_at": problem[0] if problem else None,
                "problem": problem[1] if problem else None,
                "sealed": sealed,
            }
        )
    elif problem is None:
        out(f"{where}: {records} record(s), each linked to the one before it")
        if unchained > 1:
            err(f"note: the first {unchained} were written before records were chained")
        if sealed is not None:
            for line in seal.said(sealed):
                out(line)
        else:
            err(
                "note: anyone can recompute a hash chain: a log rewritten with its chain "
                "recomputed passes this check. "
                + (
                    "Give --key to check its seals"
                    if auditseal.state_path(path).exists()
                    else "Seal the log (`bundlectl audit seal --init`) to make that detectable"
                )
            )
    if problem is not None:
        intact = problem[0] - 2
        raise ReportedFailure(
            f"{where}:{problem[0]}: the record {problem[1]}",
            hint=(f"lines 1-{intact} link up intact; " if intact > 0 else "")
            + "compare with a copy of the log shipped elsewhere",
        )
    return 0


def _continues(path: Path, start: dict[str, Any]) -> tuple[int, str] | None:
    """A rotated log's start record links to the last line of the file it continues, when that
    file is still beside it: `NAME.1` for `NAME`, `NAME.3` for `NAME.2` (rotations shift them)."""
    base, _, number = path.name.rpartition(".")
    earlier = f"{base}.{int(number) + 1}" if number.isdigit() else f"{path.name}.1"
    rotated = path.with_name(earlier)
    if not rotated.is_file():
        return None  # the earlier file was removed (`keep` of them are kept): nothing to check
    tail = deque(log_lines(rotated), maxlen=1)
    if not tail or start.get("prev") != auditchain.link(tail[0]):
        return (1, f"does not link to the last record of {earlier}, the log it continues")
    return None


def _since(text: str | None) -> float | None:
    if text is None:
        return None
    return time.time() - option_seconds(text, "--since", "30m, 1h or 7d")


def _stamp(text: str) -> float:
    try:
        return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))
    except (ValueError, TypeError):
        return 0.0


def _outcomes(given: str | None) -> set[str] | None:
    """`--outcome a,b`: the outcomes asked for, each one a record can have (else exit 2)."""
    if not given:
        return None
    wanted = {part.strip() for part in given.split(",") if part.strip()}
    for name in sorted(wanted - set(auditfile.OUTCOMES)):
        close = Suggester(auditfile.OUTCOMES).closest(name)
        raise UsageError(
            f"--outcome {name!r} is no outcome a record has"
            + (f"; did you mean {close[0]!r}?" if close else ""),
            hint="outcomes: " + ", ".join(auditfile.OUTCOMES),
        )
    return wanted


def _selected(
    path: Path,
    agent: str | None,
    tool: str | None,
    outcome: str | None,
    since: str | None,
    *,
    pending: bool = True,
    project: Path | None = None,
) -> Iterator[dict[str, Any]]:
    """The records that pass the filters, one at a time (`pending`: see `_records`)."""
    after = _since(since)
    outcomes = _outcomes(outcome)
    root = str(project.resolve()) if project is not None else None
    for _, record in _records(path, pending=pending):
        if agent is not None and record.get("agent") != agent:
            continue
        if root is not None and record.get("project") != root:
            continue
        if tool is not None and not matches(
            tool, str(record.get("server")), str(record.get("tool"))
        ):
            continue
        if outcomes is not None and record.get("outcome") not in outcomes:
            continue
        if after is not None and _stamp(str(record.get("timestamp"))) < after:
            continue
        yield record


def query(
    file: Path | None,
    *,
    agent: str | None,
    tool: str | None,
    outcome: str | None,
    since: str | None,
    fmt: MatrixFormat,
    project: Path | None = None,
) -> int:
    records = list(_selected(log_file(file), agent, tool, outcome, since, project=project))
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


def summary(
    file: Path | None,
    *,
    agent: str | None,
    since: str | None,
    fmt: Format,
    html: Path | None = None,
    project: Path | None = None,
) -> int:
    """Calls per agent and tool: how many, how they ended, how long they took (pending records,
    which pair with their outcome, are not counted)."""
    # Streamed: per agent and tool, the outcomes counted and the ok calls' durations kept as
    # 8-byte floats (a gigabyte of log is never held in memory).
    counts: dict[tuple[str, str], Counter[str]] = {}
    durations: dict[tuple[str, str], array[float]] = {}
    picture = None
    if html is not None:  # the page's counts too
        from bundlectl.calls.activity import Activity  # noqa: PLC0415 - only for --html

        picture = Activity()
    # pending records pair with their outcome, which is counted
    chosen = _selected(log_file(file), agent, None, None, since, pending=False, project=project)
    for record in chosen:
        if picture is not None:
            picture.add(record)
        ended = str(record.get("outcome"))
        key = (str(record.get("agent")), f"{record.get('server')}.{record.get('tool')}")
        bucket = counts.get(key)
        if bucket is None:
            bucket = counts[key] = Counter()
        bucket[ended] += 1
        if ended == "ok":
            took = durations.get(key)
            if took is None:
                took = durations[key] = array("d")
            took.append(float(record.get("duration_ms") or 0))
    if picture is not None and html is not None:
        from bundlectl.calls.activity import rendered  # noqa: PLC0415
        from bundlectl.gateway.approvals_html import document  # noqa: PLC0415 - its style

        page = document(rendered(picture, title="Activity"), "bundlectl activity")
        try:
            atomic_write(html, page)
        except OSError as exc:
            raise UsageError(
                f"cannot write {display_path(html)}: {exc.strerror or exc}",
                hint="choose a file in a folder you can write (--html FILE)",
            ) from None
        err(f"wrote {display_path(html)}")
    rows: list[dict[str, Any]] = []
    for (who, what), outcomes in sorted(counts.items()):
        ordered = sorted(durations.get((who, what), ()))
        rows.append(
            {
                "agent": who,
                "tool": what,
                "records": sum(outcomes.values()),
                "ok": outcomes.get("ok", 0),
                "denied": sum(v for k, v in outcomes.items() if k.startswith("denied")),
                "failed": sum(
                    v
                    for k, v in outcomes.items()
                    if k not in ("ok",) and not k.startswith("denied")
                ),
                "median_ms": ordered[len(ordered) // 2] if ordered else None,
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


def seal(file: Path | None, *, init: bool, every: str | None) -> int:
    """`bundlectl audit seal`: see `seal.seal`."""
    from bundlectl.cli.commands import seal as sealing  # noqa: PLC0415

    return sealing.seal(log_file(file), init=init, every=every)
