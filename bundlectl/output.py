"""Printing: tables for people, stable JSON for programs, errors and notes on stderr."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from enum import Enum
from typing import Any

JSON_FORMAT_VERSION = 1


class Format(str, Enum):
    """--format values of commands that print data."""

    text = "text"
    json = "json"


def out(line: str = "") -> None:
    sys.stdout.write(line + "\n")


def err(line: str) -> None:
    sys.stderr.write(line + "\n")


def note(line: str) -> None:
    err(f"note: {line}")


def emit_json(value: Any) -> None:
    """JSON on stdout, pretty and key-ordered as built (stable)."""
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")


def table(rows: Sequence[Sequence[str]], header: Sequence[str] | None = None) -> None:
    """Left-aligned columns; the last column is not padded."""
    all_rows = [list(header)] + [list(r) for r in rows] if header else [list(r) for r in rows]
    if not all_rows:
        return
    widths = [max(len(r[i]) for r in all_rows) for i in range(len(all_rows[0]) - 1)]
    for row in all_rows:
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])] + [row[-1]]
        out("  ".join(cells).rstrip())
