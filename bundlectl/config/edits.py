"""Edit `bundlectl.yaml` as text, at the positions the parser reports: the `bundles:` list, and
the entries of a top-level mapping (`servers:`, `agents:`, `policy:`).

Everything outside the edited entries stays byte for byte: comments, quoting, indentation, flow or
block style. The result is parsed again and checked before anyone writes it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from bundlectl.config.requirements import requirement_name
from bundlectl.config.yamlio import YamlDoc, parse_yaml
from bundlectl.errors import BundlectlError

_FLOW_UNSAFE = re.compile(r"[,\[\]{}#]")


def _name(requirement: str) -> str:
    return requirement_name(requirement)


def _offsets(text: str) -> list[int]:
    starts = [0]
    for index, char in enumerate(text):
        if char == "\n":
            starts.append(index + 1)
    return starts


class _Text:
    """The file as text with (line, column) → offset conversion (1-based)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.starts = _offsets(text)

    def at(self, line: int, column: int) -> int:
        if line > len(self.starts):  # the end of a file without a final newline
            return len(self.text)
        return self.starts[line - 1] + column - 1

    def line_end(self, line: int) -> int:
        """Offset just past the newline of `line` (or the end of the text)."""
        return self.starts[line] if line < len(self.starts) else len(self.text)


def edit_bundles(text: str, *, add: Sequence[str] = (), remove: Collection[str] = ()) -> str:
    """`text` with requirements added (an entry of the same bundle is replaced in place) and
    bundles removed by name."""
    doc = parse_yaml(text, "bundlectl.yaml")
    expected = _expected(doc, add, remove)
    new = _edit(doc, text, add, remove)
    check = parse_yaml(new, "bundlectl.yaml")
    got = check.data.get("bundles") if isinstance(check.data, dict) else None
    if check.problems or (got or []) != expected:
        raise BundlectlError(
            "could not edit the bundles list of bundlectl.yaml safely",
            hint="edit the bundles: list by hand; nothing was written",
        )
    return new


def _expected(doc: YamlDoc, add: Sequence[str], remove: Collection[str]) -> list[str]:
    current = list(doc.data.get("bundles") or []) if isinstance(doc.data, dict) else []
    replacing = {_name(r): r for r in add}
    out = []
    for item in current:
        name = _name(item)
        if name in remove:
            continue
        out.append(replacing.pop(name, item))
    out.extend(replacing.values())
    return out


def _edit(doc: YamlDoc, text: str, add: Sequence[str], remove: Collection[str]) -> str:
    buf = _Text(text)
    if not isinstance(doc.data, dict) or "bundles" not in doc.data:
        if not add:
            return text
        sep = "" if not text or text.endswith("\n") else "\n"
        return text + sep + "bundles:\n" + "".join(f"  - {r}\n" for r in add)
    items = doc.data["bundles"] or []
    seq_span = doc.values[("bundles",)]
    flow = (items == [] and doc.data["bundles"] is not None) or text[
        buf.at(seq_span.line, seq_span.column) :
    ].startswith("[")
    replacing = {_name(r): r for r in add}
    edits: list[tuple[int, int, str]] = []  # (start, end, replacement), applied back to front
    kept = 0
    for index, item in enumerate(items):
        span = doc.values[("bundles", index)]
        start, end = buf.at(span.line, span.column), buf.at(span.end_line, span.end_column)
        name = _name(item)
        if name in remove:
            edits.append(
                _removal(buf, doc, index, count=len(items), flow=flow, start=start, end=end)
            )
        else:
            kept += 1
            if name in replacing:
                edits.append((start, end, _scalar(replacing.pop(name), flow)))
    appended = [r for r in add if _name(r) in replacing]
    if appended:
        edits.append(_append(buf, doc, items, flow=flow, kept=kept, appended=appended))
    elif items and not kept and not flow:  # every entry removed: leave an empty list, not null
        key = doc.keys[("bundles",)]
        colon = text.index(":", buf.at(key.end_line, key.end_column))
        edits.append((colon + 1, colon + 1, " []"))
    new = text
    for start, end, replacement in sorted(edits, key=lambda e: e[0], reverse=True):
        new = new[:start] + replacement + new[end:]
    return new


def _scalar(requirement: str, flow: bool) -> str:
    return f"'{requirement}'" if flow and _FLOW_UNSAFE.search(requirement) else requirement


def _removal(
    buf: _Text, doc: YamlDoc, index: int, *, count: int, flow: bool, start: int, end: int
) -> tuple[int, int, str]:
    if not flow:
        span = doc.values[("bundles", index)]
        return buf.starts[span.line - 1], buf.line_end(span.end_line), ""
    text = buf.text
    if index + 1 < count:  # remove up to the next item
        nxt = doc.values[("bundles", index + 1)]
        return start, buf.at(nxt.line, nxt.column), ""
    # last item: remove from the previous comma (or the bracket) to the item's end
    cut = start
    while cut > 0 and text[cut - 1] not in ",[":
        cut -= 1
    if text[cut - 1] == ",":
        cut -= 1
    return cut, end, ""


def _append(
    buf: _Text, doc: YamlDoc, items: list[str], *, flow: bool, kept: int, appended: list[str]
) -> tuple[int, int, str]:
    text = buf.text
    seq = doc.values[("bundles",)]
    if flow:
        close = buf.at(seq.end_line, seq.end_column) - 1  # the ']'
        body = ", ".join(_scalar(r, True) for r in appended)
        return close, close, (", " if kept else "") + body
    if not items:  # `bundles:` with no value
        key = doc.keys[("bundles",)]
        end = buf.line_end(key.line)
        indent = " " * (key.column + 1)
        prefix = "" if text[:end].endswith("\n") else "\n"
        return end, end, prefix + "".join(f"{indent}- {r}\n" for r in appended)
    last = doc.values[("bundles", len(items) - 1)]
    line_start = buf.starts[last.line - 1]
    dash = text[line_start : buf.at(last.line, last.column)]
    end = buf.line_end(last.end_line)
    prefix = "" if text[:end].endswith("\n") else "\n"
    return end, end, prefix + "".join(f"{dash}{r}\n" for r in appended)


def set_entries(text: str, section: str | tuple[str, ...], entries: Mapping[str, Any]) -> str:
    """`text` with `SECTION.KEY: VALUE` for each entry — an entry of that key replaced where it
    is, a new one appended to the section (which is added at the end when missing). `section`
    is a top-level key or the path of a mapping below one (`("servers", "git")`, which must
    exist). Every other byte stays, comments included; a flow-style section (`servers: {}`) is
    rewritten in block style. The result is parsed again and compared with the intended data
    before it is returned."""
    if not entries:
        return text
    path = (section,) if isinstance(section, str) else section
    doc = parse_yaml(text, "bundlectl.yaml")
    before = doc.data if isinstance(doc.data, dict) else {}
    new = text
    for key, value in entries.items():
        new = _set_entry(new, path, key, value)
    check = parse_yaml(new, "bundlectl.yaml")
    got = check.data if isinstance(check.data, dict) else {}
    wanted = _replaced(before, path, entries)
    if check.problems or got != wanted:
        where = ".".join(path)
        raise BundlectlError(
            f"could not edit the {where}: mapping of bundlectl.yaml safely",
            hint=f"edit {where}: by hand; nothing was written",
        )
    return new


def remove_entries(text: str, section: str, keys: Collection[str]) -> str:
    """`text` without the top-level mapping `section`'s entries `keys` (an emptied or
    flow-style mapping is written `{...}` on its key's line). Every other byte stays, comments
    included; the result is parsed again and compared with the intended data."""
    doc = parse_yaml(text, "bundlectl.yaml")
    data = doc.data if isinstance(doc.data, dict) else {}
    current = data.get(section)
    gone = [key for key in keys if isinstance(current, dict) and key in current]
    if not isinstance(current, dict) or not gone:
        return text
    left = {k: v for k, v in current.items() if k not in gone}
    buf = _Text(text)
    if not left or _is_flow(buf, doc, (section,)):
        where = doc.keys[(section,)]
        start = text.index(":", buf.at(where.end_line, where.end_column)) + 1
        end = _value_end(buf, doc, (section,))
        new = text[:start] + " " + json.dumps(left, ensure_ascii=False) + "\n" + text[end:]
    else:
        new = text
        for key in sorted(gone, key=lambda k: doc.keys[(section, k)].line, reverse=True):
            start = buf.starts[doc.keys[(section, key)].line - 1]
            end = _value_end(buf, doc, (section, key))
            new = new[:start] + new[end:]
    check = parse_yaml(new, "bundlectl.yaml")
    if check.problems or check.data != {**data, section: left}:
        raise BundlectlError(
            f"could not edit the {section}: mapping safely",
            hint=f"edit {section}: by hand; nothing was written",
        )
    return new


def _replaced(data: Any, path: tuple[str, ...], entries: Mapping[str, Any]) -> Any:
    """`data` with the mapping at `path` updated by `entries`."""
    if not path:
        return {**(data if isinstance(data, dict) else {}), **entries}
    inner = data.get(path[0]) if isinstance(data, dict) else None
    return {**data, path[0]: _replaced(inner or {}, path[1:], entries)}


def _set_entry(text: str, path: tuple[str, ...], key: str, value: Any) -> str:
    doc = parse_yaml(text, "bundlectl.yaml")
    data: Any = doc.data if isinstance(doc.data, dict) else {}
    for part in path[:-1]:
        data = data.get(part) if isinstance(data, dict) else None
        if not isinstance(data, dict):
            raise BundlectlError(f"bundlectl.yaml has no mapping {'.'.join(path)}")
    buf = _Text(text)
    section = path[-1]
    depth = 2 * len(path)  # a new section's entries: block style, two spaces per level
    if section not in data:
        if len(path) > 1:
            raise BundlectlError(f"bundlectl.yaml has no mapping {'.'.join(path)}")
        sep = "" if not text or text.endswith("\n") else "\n"
        return text + sep + f"{section}:\n" + _render({key: value}, 2)
    current = data[section]
    section_key = doc.keys[path]
    if not current or not isinstance(current, dict) or _is_flow(buf, doc, path):
        # `servers:`, `servers: {}` or a flow mapping: the whole value, in block style
        merged = {**(current if isinstance(current, dict) else {}), key: value}
        start = text.index(":", buf.at(section_key.end_line, section_key.end_column)) + 1
        span = doc.values.get(path)
        end = buf.at(span.end_line, span.end_column) if current is not None and span else start
        rest = text[end:]
        tail = rest[rest.index("\n") + 1 :] if "\n" in rest else ""
        comment = rest[: rest.index("\n")] if "\n" in rest else rest
        indent = section_key.column - 1 + 2 if len(path) > 1 else depth
        return text[:start] + comment.rstrip() + "\n" + _render(merged, indent) + tail
    indent = doc.keys[(*path, next(iter(current)))].column - 1
    if key in current:
        entry = doc.keys[(*path, key)]
        start = buf.starts[entry.line - 1]
        end = _value_end(buf, doc, (*path, key))
        return text[:start] + _render({key: value}, indent) + text[end:]
    last = list(current)[-1]
    end = _value_end(buf, doc, (*path, last))
    prefix = "" if text[:end].endswith("\n") else "\n"
    return text[:end] + prefix + _render({key: value}, indent) + text[end:]


def _is_flow(buf: _Text, doc: YamlDoc, path: tuple[str, ...]) -> bool:
    span = doc.values[path]
    return buf.text[buf.at(span.line, span.column) :].startswith("{")


def _value_end(buf: _Text, doc: YamlDoc, path: tuple[str, ...]) -> int:
    """Offset just past the line where the value at `path` ends: a block value's span runs to
    the next token, so blank and comment lines before it (they belong to what follows) are
    left out."""
    span = doc.values[path]
    end = buf.at(span.end_line, span.end_column)
    start = buf.at(span.line, span.column)
    if buf.text[start:].startswith(("{", "[")) or span.end_line == span.line:
        return buf.line_end(span.end_line)
    # the next token's line is not ours unless the value ends after something on it
    line = span.end_line if buf.text[buf.at(span.end_line, 1) : end].strip() else span.end_line - 1
    line = min(line, len(buf.starts))
    while line > span.line:
        content = buf.text[buf.at(line, 1) : buf.line_end(line)].strip()
        if content and not content.startswith("#"):
            break
        line -= 1
    return buf.line_end(line)


def _render(entries: Mapping[str, Any], indent: int) -> str:
    """Entries as block YAML (lists of scalars in flow style, as `bundlectl init` writes them),
    indented."""
    import io  # noqa: PLC0415  # start-up: only commands that edit entries render YAML

    from ruamel.yaml import YAML  # noqa: PLC0415  # start-up, as above
    from ruamel.yaml.comments import CommentedSeq  # noqa: PLC0415  # start-up, as above

    def styled(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: styled(v) for k, v in value.items()}
        if isinstance(value, list):
            items = [styled(v) for v in value]
            if all(not isinstance(v, (dict, list)) for v in items):
                seq = CommentedSeq(items)
                seq.fa.set_flow_style()
                return seq
            return items
        return value

    yaml = YAML()
    yaml.default_flow_style = False
    yaml.width = 100
    yaml.indent(mapping=2, sequence=4, offset=2)
    out = io.StringIO()
    yaml.dump(styled(dict(entries)), out)
    return "".join(" " * indent + line for line in out.getvalue().splitlines(keepends=True))
