"""YAML in: plain data plus the position of every node, duplicate keys reported, never lost.

We build the data from the parser's events ourselves instead of using a constructor so that
every key and value keeps its 1-based line/column, every duplicate key is a problem (not
last-one-wins), lint can see how each scalar was written (BCL004), and a tag, alias or value
that cannot be read is a positioned problem, never an exception.
"""

from __future__ import annotations

import binascii
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import (
    AliasEvent,
    CollectionEndEvent,
    CollectionStartEvent,
    DocumentStartEvent,
    Event,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)
from ruamel.yaml.nodes import ScalarNode
from ruamel.yaml.resolver import VersionedResolver

from bundlectl.config.bounded_read import read_bounded
from bundlectl.config.yamlevents import bounded_events
from bundlectl.errors import InputFileError, Problem

YamlPath = tuple[str | int, ...]
_MERGE_TAG = "tag:yaml.org,2002:merge"
_STR_TAG = "tag:yaml.org,2002:str"
# Plain strings that YAML 1.1 readers (PyYAML, many tools) take for booleans or numbers.
_YAML11_AMBIGUOUS = re.compile(
    r"^(y|Y|yes|Yes|YES|n|N|no|No|NO|on|On|ON|off|Off|OFF|0[0-7]+|[0-9]+(:[0-5]?[0-9])+)$"
)


class Span(NamedTuple):
    """Where a node starts and ends, 1-based (a tuple: made once per node of every file)."""

    line: int
    column: int
    end_line: int
    end_column: int


@dataclass(frozen=True)
class PlainScalar:
    """An unquoted scalar that is not a string, or that YAML 1.1 would not read as one."""

    text: str
    tag: str


@dataclass
class YamlDoc:
    """A parsed YAML file: its data, where each node was written, and what was wrong with it."""

    file: str
    text: str
    data: Any = None
    values: dict[YamlPath, Span] = field(default_factory=dict)
    keys: dict[YamlPath, Span] = field(default_factory=dict)
    plain_scalars: dict[YamlPath, PlainScalar] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    # Where a merge key (`<<`) copies keys into a mapping: the mapping's path, the key's span.
    merges: list[tuple[YamlPath, Span]] = field(default_factory=list)

    def span(self, path: YamlPath, *, key: bool = False) -> Span:
        """The span of the deepest node on `path` that exists (the key's span when `key`)."""
        for cut in range(len(path), -1, -1):
            prefix = path[:cut]
            if key and cut == len(path) and prefix in self.keys:
                return self.keys[prefix]
            if prefix in self.values:
                return self.values[prefix]
        return Span(1, 1, 1, 1)

    def problem(
        self, path: YamlPath, message: str, *, hint: str | None = None, key: bool = False
    ) -> Problem:
        """A problem positioned at the node on `path`."""
        at = self.span(path, key=key)
        return Problem(
            self.file,
            at.line,
            at.column,
            message,
            format_path(path),
            hint,
            end_line=at.end_line,
            end_column=at.end_column,
        )


def format_path(path: YamlPath) -> str:
    """`("agents", "a", "allow", 0)` → `agents.a.allow[0]`."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _span(start: Event, end: Event) -> Span:
    first, last = start.start_mark, end.end_mark
    return Span(first.line + 1, first.column + 1, last.line + 1, last.column + 1)


_YAML_TAGS = "tag:yaml.org,2002:"
_COLLECTION_TAGS = frozenset(_YAML_TAGS + t for t in ("map", "seq", "set", "omap", "pairs"))
_Resolvers = dict[str | None, list[tuple[str, re.Pattern[str]]]]


@functools.lru_cache(maxsize=4)
def _implicit_resolvers(version: tuple[int, int] | None) -> _Resolvers:
    """ruamel's table of plain-scalar patterns (first character → (tag, regex)) for a version
    (read only: shared by every file of that version)."""

    table: _Resolvers = VersionedResolver(version=version or (1, 2)).versioned_resolver
    return table


class _Builder:
    """Plain data and positions from the parser's event stream, in one pass.

    Composing a node graph first cost more than the parse itself on large files (a node and a
    resolver call per scalar); here strings, by far the most common scalar, are taken from their
    event as they are, and only other tagged values go through ruamel's constructor. Aliases
    are expanded by building the anchored events again (`_scan` has bounded how much that adds).
    """

    def __init__(self, doc: YamlDoc, events: list[Event]) -> None:
        self.doc = doc
        self.events = events
        self.anchors: dict[str, int] = {}  # anchor → index of the event that starts its node
        self.open: set[int] = set()  # where the collections being built start
        self.replaying = 0  # inside an alias: its anchors are not defined again
        self.resolvers = _implicit_resolvers(None)
        self._constructor: Any = None

    def document(self) -> Any:
        events = self.events
        if len(events) < 3 or not isinstance(events[1], DocumentStartEvent):
            return None  # an empty stream
        self.resolvers = _implicit_resolvers(events[1].version)
        value, after = self.node(2, ())
        after += 1  # the DocumentEndEvent
        if after < len(events) and not isinstance(events[after], StreamEndEvent):
            self._problem(
                events[after],
                "YAML syntax error: expected a single document in the stream: "
                "but found another document",
                "keep one YAML document per file (remove the extra `---`)",
                "yaml_syntax",
            )
            return None
        return value

    def node(self, index: int, path: YamlPath) -> tuple[Any, int]:
        """The value of the node starting at `index`, and the index just after it."""
        event = self.events[index]
        if isinstance(event, AliasEvent):
            target = self._target(event)
            if target is not None:
                self.replaying += 1
                value, _ = self.node(target, path)
                self.replaying -= 1
                return value, index + 1
            return None, index + 1
        if not isinstance(event, ScalarEvent | CollectionStartEvent):
            raise AssertionError(f"unexpected {type(event).__name__} in a node")
        if event.anchor is not None and not self.replaying:
            self.anchors[event.anchor] = index
        if isinstance(event, ScalarEvent):
            self.doc.values[path] = _span(event, event)
            return self._scalar(event, path), index + 1
        self._collection_tag(event)
        self.open.add(index)
        if isinstance(event, MappingStartEvent):
            value, end = self._mapping(index, path)
        else:
            value, end = self._sequence(index, path)
        self.open.discard(index)
        self.doc.values[path] = _span(event, self.events[end])
        return value, end + 1

    def _target(self, alias: AliasEvent) -> int | None:
        """Where an alias's anchor starts, or None (a problem) when it cannot be used."""
        target = self.anchors.get(alias.anchor)
        if target is None:
            self._problem(
                alias,
                f"YAML syntax error: found undefined alias {alias.anchor!r}",
                f"define &{alias.anchor} before the first *{alias.anchor}",
                "yaml_syntax",
            )
        elif target in self.open:
            self._problem(
                alias,
                f"alias *{alias.anchor} is inside the node it names (a structure that "
                "contains itself)",
                "write the values out; bundlectl files cannot be recursive",
                "yaml_limit",
            )
            return None
        return target

    def _scalar(self, event: ScalarEvent, path: YamlPath) -> Any:
        text, tag, plain = event.value, event.tag, not event.style
        if tag is None or tag == "!":
            tag = self._resolve(text) if plain and event.implicit[0] else _STR_TAG
        value: Any = text
        if tag != _STR_TAG:
            value = self._construct(event, tag)
        if plain and (tag != _STR_TAG or _YAML11_AMBIGUOUS.match(text)):
            self.doc.plain_scalars[path] = PlainScalar(text, tag)
        return value

    def _resolve(self, text: str) -> str:
        for tag, pattern in self.resolvers.get(text[:1], []):
            if pattern.match(text):
                return tag
        return _STR_TAG

    def _construct(self, event: ScalarEvent, tag: str) -> Any:
        """A non-string scalar (int, bool, null, float, timestamp, binary) by ruamel's rules."""
        if not tag.startswith(_YAML_TAGS):
            self._unknown_tag(event, tag)
            return event.value
        if self._constructor is None:
            self._constructor = YAML(typ="safe", pure=True).constructor
        node = ScalarNode(tag, event.value, event.start_mark, event.end_mark, event.style)
        try:
            return self._constructor.construct_object(node, deep=True)
        except (YAMLError, ValueError, TypeError, OverflowError, binascii.Error):
            short = tag.removeprefix(_YAML_TAGS)
            self._problem(
                event,
                f"{event.value!r} cannot be read as !!{short}",
                f"fix the value, or remove the !!{short} tag",
                "yaml_syntax",
            )
            return event.value

    def _collection_tag(self, event: CollectionStartEvent) -> None:
        tag = event.tag
        if tag is not None and tag != "!" and tag not in _COLLECTION_TAGS:
            self._unknown_tag(event, tag)

    def _unknown_tag(self, event: Event, tag: str) -> None:
        shown = "!!" + tag.removeprefix(_YAML_TAGS) if tag.startswith(_YAML_TAGS) else tag
        self._problem(
            event,
            f"unknown YAML tag {shown}",
            "bundlectl files hold plain values: remove the tag",
            "yaml_syntax",
        )

    def _sequence(self, index: int, path: YamlPath) -> tuple[list[Any], int]:
        items: list[Any] = []
        events, at = self.events, index + 1
        while not isinstance(events[at], SequenceEndEvent):
            item, at = self.node(at, (*path, len(items)))
            items.append(item)
        return items, at

    def _mapping(self, index: int, path: YamlPath) -> tuple[dict[Any, Any], int]:
        result: dict[Any, Any] = {}
        first_seen: dict[str, Span] = {}
        events, at = self.events, index + 1
        while not isinstance(events[at], MappingEndEvent):
            written = events[at]
            key_event: Event | None = written
            if isinstance(written, AliasEvent):
                target = self._target(written)
                key_event = events[target] if target is not None else None
            if not isinstance(key_event, ScalarEvent):
                if key_event is not None:
                    self._problem(
                        written,
                        "mapping keys must be plain scalars",
                        "write the key as a plain string",
                        path=path,
                    )
                at = self._skip(self._skip(at))  # the key and its value
                continue
            if written is key_event and key_event.anchor is not None and not self.replaying:
                self.anchors[key_event.anchor] = at
            if self._is_merge(key_event):
                if not self.replaying:
                    self.doc.merges.append((path, _span(key_event, key_event)))
                at = self._merge(at + 1, path, result)
                continue
            key = key_event.value
            if key in first_seen:
                self._problem(
                    written,
                    f"duplicate key {key!r} (first defined at line {first_seen[key].line})",
                    "remove one of the two entries; YAML would silently keep only one",
                    "duplicate_key",
                    path=(*path, key),
                )
                at = self._skip(at + 1)
                continue
            first_seen[key] = self.doc.keys[(*path, key)] = _span(key_event, key_event)
            result[key], at = self.node(at + 1, (*path, key))
        return result, at

    def _is_merge(self, key: ScalarEvent) -> bool:
        if key.tag == _MERGE_TAG:
            return True
        return key.value == "<<" and not key.style and self._resolve("<<") == _MERGE_TAG

    def _merge(self, index: int, path: YamlPath, result: dict[Any, Any]) -> int:
        """`<<: *base` or `<<: [*a, *b]`: keys not written in the mapping itself come from the
        named mappings (the first that has one wins). Returns the index after the value."""
        events = self.events
        written = events[index]
        sources = [index]
        if isinstance(written, SequenceStartEvent):
            sources, at = [], index + 1
            while not isinstance(events[at], SequenceEndEvent):
                sources.append(at)
                at = self._skip(at)
        for written_at in sources:
            start, source = events[written_at], written_at
            replay = isinstance(start, AliasEvent)
            if isinstance(start, AliasEvent):
                target = self._target(start)
                if target is None:
                    continue
                source = target
            if isinstance(events[source], MappingStartEvent):
                self.replaying += replay
                merged, _ = self._mapping(source, path)
                self.replaying -= replay
                for key, value in merged.items():
                    result.setdefault(key, value)
        return self._skip(index)

    def _skip(self, index: int) -> int:
        """The index just after the node that starts at `index`."""
        events, depth = self.events, 0
        while True:
            event = events[index]
            index += 1
            if isinstance(event, CollectionStartEvent):
                depth += 1
            elif isinstance(event, CollectionEndEvent):
                depth -= 1
            if depth == 0:
                return index

    def _problem(
        self,
        event: Event,
        message: str,
        hint: str | None = None,
        code: str = "",
        *,
        path: YamlPath = (),
    ) -> None:
        mark = event.start_mark
        self.doc.problems.append(
            Problem(
                self.doc.file,
                mark.line + 1,
                mark.column + 1,
                message,
                format_path(path),
                hint,
                code,
            )
        )


def _tab_near(text: str, line: int) -> tuple[int, int] | None:
    """The first tab on the line of a syntax error or the line before it (1-based line and
    column), where YAML found what it could not read; None: no tab there."""
    lines = text.split("\n")
    for number in (line, line - 1):
        if 1 <= number <= len(lines) and "\t" in lines[number - 1]:
            return number, lines[number - 1].index("\t") + 1
    return None


def parse_yaml(text: str, file: str) -> YamlDoc:
    """Parse `text`; syntax errors and duplicate keys land in `doc.problems` (never raised)."""
    doc = YamlDoc(file=file, text=text)
    try:
        events = bounded_events(text, file)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        message = " ".join(str(exc.problem or exc.context or "invalid YAML").split())
        if exc.context and exc.problem:
            message = f"{' '.join(str(exc.context).split())}: {message}"
        hint = "fix the YAML syntax at this position (indentation, quotes, colons)"
        tab = _tab_near(text, line)
        if tab is not None:  # the usual cause, which YAML's own words do not name
            line, col = tab
            message += "; this line holds a tab, and YAML indents with spaces only"
            hint = "replace the tab with spaces"
        doc.problems.append(
            Problem(file, line, col, f"YAML syntax error: {message}", "", hint, "yaml_syntax")
        )
        return doc
    except YAMLError as exc:
        doc.problems.append(Problem(file, 1, 1, f"YAML error: {exc}", "", code="yaml_syntax"))
        return doc
    if isinstance(events, Problem):
        doc.problems.append(events)
        return doc
    doc.data = _Builder(doc, events).document()
    return doc


def read_yaml(path: Path, display: str | None = None) -> YamlDoc:
    """Read and parse a file; an unreadable file is an input error (exit 2)."""
    shown = display or str(path)
    try:
        raw = read_bounded(path)
    except FileNotFoundError:
        raise InputFileError(
            [Problem(shown, 1, 1, "file not found")], hint="check the path"
        ) from None
    except OSError as exc:
        raise InputFileError([Problem(shown, 1, 1, f"cannot read file: {exc.strerror}")]) from None
    return parse_bytes(raw, shown)


def read_text(path: Path, display: str | None = None) -> str:
    """A text file as `str` (a client's config, a file to import); one that is not UTF-8 or
    cannot be read is an input error with a position (exit 2), never a traceback."""
    shown = display or str(path)
    try:
        raw = read_bounded(path)
    except OSError as exc:
        raise InputFileError([Problem(shown, 1, 1, f"cannot read file: {exc.strerror}")]) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        problem = _not_utf8(raw, exc, shown)
        raise InputFileError([problem], hint=problem.hint) from None


def parse_bytes(raw: bytes, file: str) -> YamlDoc:
    """`parse_yaml` of a file's bytes; bytes that are not UTF-8 are a positioned problem."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return YamlDoc(file=file, text="", problems=[_not_utf8(raw, exc, file)])
    return parse_yaml(text, file)


def _not_utf8(raw: bytes, exc: UnicodeDecodeError, file: str) -> Problem:
    """The undecodable byte's line and column (counted in characters of the valid text)."""
    before = raw[: exc.start].decode("utf-8", errors="replace")
    line = before.count("\n") + 1
    column = len(before) - (before.rfind("\n") + 1) + 1
    return Problem(
        file,
        line,
        column,
        f"not UTF-8: byte 0x{raw[exc.start]:02x} cannot start or continue a character",
        "",
        "save the file as UTF-8",
        "yaml_syntax",
    )
