"""Printing: tables for people, stable JSON for programs, errors and notes on stderr."""

from __future__ import annotations

import contextlib
import contextvars
import csv
import functools
import json
import json.encoder
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

JSON_FORMAT_VERSION = 1


# Everything bundlectl writes to the terminal goes through these (the error funnel included).


# Colour (SGR codes) on a terminal only; NO_COLOR (https://no-color.org) or TERM=dumb turn it off.
_STYLES = {"error": "1;31", "warning": "33", "info": "36", "hint": "36", "note": "2", "allow": "32"}
_STYLES |= {"ask": "33", "deny": "31"}


_PLAIN = contextvars.ContextVar("plain", default=False)


@contextlib.contextmanager
def plain() -> Iterator[None]:
    """No colour inside (text rendered for a file)."""
    token = _PLAIN.set(True)
    try:
        yield
    finally:
        _PLAIN.reset(token)


def colour(stream: Any) -> bool:
    """Whether to colour what goes to `stream`."""
    if _PLAIN.get() or os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return _is_terminal(stream)


def paint(text: str, style: str, stream: Any = None) -> str:
    """`text` in the colour of `style` (error, warning, info, hint, note, allow, ask, deny)
    when `stream` (stdout by default) is a terminal that wants colour."""
    code = _STYLES.get(style)
    if code is None or not colour(sys.stdout if stream is None else stream):
        return text
    return f"\x1b[{code}m{text}\x1b[0m"


_PREFIXES = (
    ("internal error:", "error"),
    ("error:", "error"),
    ("warning:", "warning"),
    ("hint:", "hint"),
    ("note:", "note"),
)


# Printable by `str.isprintable` and still invisible, or able to hide what follows: the
# combining grapheme joiner, Hangul fillers, Khmer vowels inherent, Mongolian and other
# variation selectors.
_INVISIBLE = frozenset(
    "\u034f\u115f\u1160\u17b4\u17b5\u180b\u180c\u180d\u180e\u180f\u3164\uffa0"
    + "".join(map(chr, range(0xFE00, 0xFE10)))
    + "".join(map(chr, range(0xE0100, 0xE01F0)))
)
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(char: str) -> str:
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def visible(text: str, fold: int | None = None, *, size: int | None = None) -> str:
    """Text an agent, a server or another person wrote, as a person may be shown it: every
    C0/C1 control, line and paragraph separator, bidi or other formatting character, space
    other than U+0020, surrogate, private-use or unassigned code point, and the few printable
    invisible ones, written as a visible escape (`\\u2028`), so the text cannot break a line,
    redraw the screen or reorder what a person reads. `fold`: at most this many characters
    are shown, the rest replaced by how many characters the value holds (`size`, when `text`
    is an encoding of the value, as JSON).

    Every place a person reads such text goes through this one function: `approvals
    show/list`, exec's `ask` question, `policy explain`, `audit`'s text output (every `table`
    cell), the notifier's summary and the approvers' page."""
    if not (text.isprintable() and _INVISIBLE.isdisjoint(text)):
        text_out = "".join(
            _escape(c) if not c.isprintable() or c in _INVISIBLE else c for c in text
        )
    else:
        text_out = text
    if fold is not None and len(text_out) > fold:
        return f"{text_out[: max(fold - 1, 0)]}… ({len(text) if size is None else size} characters)"
    return text_out


def visible_lines(text: str) -> str:
    """`visible`, with the text's own line breaks (`\\n`) and tabs kept: a message or a
    description of several lines, shown as lines."""
    return "\n".join(
        "\t".join(visible(part) for part in line.split("\t")) for line in text.split("\n")
    )


# What a terminal takes as a command (C0 but tab and line feed, DEL, C1): a server's result shown
# on a terminal cannot clear the screen, move the cursor or hide what follows.
_TERMINAL_CONTROLS = frozenset(
    chr(c) for c in (*range(0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0))
)


def terminal_safe(text: str, stream: Any = None) -> str:
    """`text` as data for `stream` (stdout by default): as it is for a file or a pipe; on a
    terminal, with every control character but tab, line feed and a CRLF line end written as
    an escape (`\\x1b`). Other characters are left as they are, since this is what the person
    asked for (a file's text, in any script); messages and descriptions go through `visible`."""
    if _TERMINAL_CONTROLS.isdisjoint(text) or not _is_terminal(stream or sys.stdout):
        return text
    return "\r\n".join(  # a CRLF line end is harmless; a lone CR would write over the line
        "".join(_escape(c) if c in _TERMINAL_CONTROLS else c for c in part)
        for part in text.split("\r\n")
    )


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False


def out(line: str = "") -> None:
    sys.stdout.write(line + "\n")


def write(text: str) -> None:
    """Text on stdout as it is (a rendered report, a diff), flushed."""
    sys.stdout.write(text)
    sys.stdout.flush()


def err(line: str) -> None:
    """A line on stderr; its `error:`/`warning:`/`hint:`/`note:` prefix coloured on a
    terminal."""
    body = line.lstrip(" ")
    for prefix, style in _PREFIXES:
        if body.startswith(prefix):
            indent = line[: len(line) - len(body)]
            line = indent + paint(prefix, style, sys.stderr) + body[len(prefix) :]
            break
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def status(text: str) -> None:
    """Text on stderr without a line break (a progress line redrawn with `\\r`)."""
    sys.stderr.write(text)
    sys.stderr.flush()


def ask(question: str) -> str:
    """`question` on stderr, then the user's line from stdin ("" at the end of input)."""
    status(question)
    return sys.stdin.readline()


def note(line: str) -> None:
    err(f"note: {line}")


def emit_json(value: Any) -> None:
    """JSON on stdout, pretty and key-ordered as built (stable)."""
    sys.stdout.write(pretty_json(value) + "\n")


_SCALARS = (str, int, float, bool, type(None))


def pretty_json(value: Any, depth: int = 0) -> str:
    """`json.dumps(value, indent=2, ensure_ascii=False)`, byte for byte, at C speed.

    With `indent`, the json module uses its pure-Python encoder (5x slower: a lint report of
    10,000 findings took 0.7 s). Here each object or array whose members are all scalars is
    encoded by the C encoder, with the line break and indentation as its separator.
    """
    if isinstance(value, Shared):
        return value.at(depth)
    if not isinstance(value, dict | list) or not value:
        return _encode(value)
    pad = "  " * (depth + 1)
    if isinstance(value, dict) and not all(isinstance(k, str) for k in value):
        return json.dumps(value, indent=2, ensure_ascii=False).replace("\n", "\n" + pad[2:])
    members = value.values() if isinstance(value, dict) else value
    if all(isinstance(m, _SCALARS) for m in members):
        inner = _flat(depth)(value)[1:-1]
    elif isinstance(value, dict):
        inner = f",\n{pad}".join(
            f"{_encode_str(k)}: {pretty_json(v, depth + 1)}" for k, v in value.items()
        )
    else:
        inner = f",\n{pad}".join(pretty_json(v, depth + 1) for v in value)
    brackets = "{}" if isinstance(value, dict) else "[]"
    return f"{brackets[0]}\n{pad}{inner}\n{pad[2:]}{brackets[1]}"


# `json.dumps` with any option builds a new encoder per call: a 10 MB report made 100,000.
_encode = json.JSONEncoder(ensure_ascii=False).encode
_encode_str: Callable[[str], str] = json.encoder.encode_basestring


@functools.cache
def _flat(depth: int) -> Callable[[Any], str]:
    """The encoder of an object or array of scalars at `depth`: a member per line."""
    separators = (",\n" + "  " * (depth + 1), ": ")
    return json.JSONEncoder(ensure_ascii=False, separators=separators).encode


class Shared:
    """A value that appears many times in one document (the same cell under thousands of
    changes): `pretty_json` encodes it once per depth."""

    def __init__(self, value: Any) -> None:
        self.value = value
        self._text: dict[int, str] = {}

    def at(self, depth: int) -> str:
        found = self._text.get(depth)
        if found is None:
            found = self._text[depth] = pretty_json(self.value, depth)
        return found


class Lazy:
    """A JSON object (from (key, value) pairs) or array (from items) produced while it is
    written, so a large document is never held whole (`stream_json`)."""

    def __init__(self, items: Iterable[Any], *, mapping: bool) -> None:
        self.items = items
        self.mapping = mapping


@dataclass(frozen=True)
class RawJson:
    """A value already encoded as JSON text (one line), written by `stream_json` as it is."""

    text: str


def stream_json(value: Any, *, expand: int = 2) -> None:
    """Write a large JSON document to stdout as it is produced.

    Objects and arrays in the first `expand` levels are written one member per line; deeper
    values are encoded whole by the C encoder on one line (`json.dumps(..., indent=2)` falls back
    to the pure-Python encoder: 5x slower on a policy matrix). `Lazy` members are consumed as
    they are written; `RawJson` members are written as they are.
    """
    write = sys.stdout.write
    _stream(value, expand, 0, write)
    write("\n")


def _stream(value: Any, expand: int, depth: int, write: Any) -> None:
    lazy = isinstance(value, Lazy)
    is_map = isinstance(value, dict) or (lazy and value.mapping)
    if depth >= expand or not (lazy or isinstance(value, dict | list)):
        write(_one_line(value))
        return
    items: Iterable[Any] = value.items if lazy else (value.items() if is_map else value)
    pad = "  " * (depth + 1)
    write("{" if is_map else "[")
    first = True
    for entry in items:
        write("\n" + pad if first else ",\n" + pad)
        first = False
        member = entry
        if is_map:
            key, member = entry
            write(_encode_str(str(key)) + ": ")
        _stream(member, expand, depth + 1, write)
    if not first:
        write("\n" + "  " * depth)
    write("}" if is_map else "]")


def _one_line(value: Any) -> str:
    """`value` as JSON on one line; a mapping's `RawJson` members are written as they are."""
    if isinstance(value, dict) and any(isinstance(v, RawJson) for v in value.values()):
        members = (f"{_encode_str(str(k))}: {_one_line(v)}" for k, v in value.items())
        return "{" + ", ".join(members) + "}"
    if isinstance(value, RawJson):
        return value.text
    return _encode_plain(value)


def _plain(value: Any) -> Any:
    """What the json module cannot encode by itself, deeper than `RawJson` is written as is."""
    if isinstance(value, Lazy):
        return dict(value.items) if value.mapping else list(value.items)
    if isinstance(value, RawJson):
        return json.loads(value.text)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_encode_plain = json.JSONEncoder(ensure_ascii=False, default=_plain).encode


def write_csv(rows: Iterable[Sequence[str]]) -> None:
    """Rows as CSV on stdout (`\\n` line ends)."""
    csv.writer(sys.stdout, lineterminator="\n").writerows(rows)


def table(
    rows: Sequence[Sequence[str]],
    header: Sequence[str] | None = None,
    *,
    style: Callable[[str], str | None] | None = None,
) -> None:
    """Left-aligned columns; the last column is not padded. `style`: a cell's colour (see
    `paint`), applied after padding so the columns stay aligned."""
    shown = [[visible(cell) for cell in r] for r in rows]  # agents' and servers' words
    all_rows = [list(header), *shown] if header else shown
    if not all_rows:
        return
    widths = [max(len(r[i]) for r in all_rows) for i in range(len(all_rows[0]) - 1)]
    for number, row in enumerate(all_rows):
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])] + [row[-1]]
        if style is not None and (number or header is None):
            cells = [
                paint(text, chosen) if (chosen := style(cell)) else text
                for text, cell in zip(cells, row, strict=True)
            ]
        out("  ".join(cells).rstrip())


def span_text(seconds: float) -> str:
    """A stretch of time for a person: `42s`, `3m05s`, `2h07m`."""
    left = max(0, int(seconds))
    if left >= 3600:
        return f"{left // 3600}h{left % 3600 // 60:02}m"
    if left >= 60:
        return f"{left // 60}m{left % 60:02}s"
    return f"{left}s"
