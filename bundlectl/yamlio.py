"""YAML in: plain data plus the position of every node, duplicate keys reported, never lost.

We compose the node graph ourselves instead of using a constructor so that every key and value
keeps its 1-based line/column, every duplicate key is a problem (not last-one-wins), and lint can
see how each scalar was written (BCL004).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import (
    AliasEvent,
    CollectionEndEvent,
    CollectionStartEvent,
    Event,
    ScalarEvent,
)
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from bundlectl.errors import InputFileError, Problem

YamlPath = tuple[str | int, ...]
# Bounds on what a file may make us build. Real configs and manifests nest about 15 deep and use
# a handful of aliases; a hostile file (an alias "billion laughs", 10,000 nested `[`) must end in
# a positioned error in milliseconds, never in gigabytes, minutes or a RecursionError.
MAX_DEPTH = 100
MAX_ALIAS_NODES = 100_000  # nodes that aliases may add to the document once expanded
_MERGE_TAG = "tag:yaml.org,2002:merge"
_STR_TAG = "tag:yaml.org,2002:str"
# Plain strings that YAML 1.1 readers (PyYAML, many tools) take for booleans or numbers.
_YAML11_AMBIGUOUS = re.compile(
    r"^(y|Y|yes|Yes|YES|n|N|no|No|NO|on|On|ON|off|Off|OFF|0[0-7]+|[0-9]+(:[0-5]?[0-9])+)$"
)


@dataclass(frozen=True)
class Span:
    """Where a node starts and ends, 1-based."""

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


def _span(node: Node) -> Span:
    start, end = node.start_mark, node.end_mark
    return Span(start.line + 1, start.column + 1, end.line + 1, end.column + 1)


class _Builder:
    def __init__(self, doc: YamlDoc) -> None:
        self.doc = doc
        self.constructor = YAML(typ="safe", pure=True).constructor

    def build(self, node: Node, path: YamlPath) -> Any:
        self.doc.values[path] = _span(node)
        if isinstance(node, MappingNode):
            return self._mapping(node, path)
        if isinstance(node, SequenceNode):
            return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
        value = self.constructor.construct_object(node, deep=True)
        plain = isinstance(node, ScalarNode) and not node.style  # unquoted
        if plain and (node.tag != _STR_TAG or _YAML11_AMBIGUOUS.match(str(node.value))):
            self.doc.plain_scalars[path] = PlainScalar(str(node.value), node.tag or "")
        return value

    def _mapping(self, node: MappingNode, path: YamlPath) -> dict[Any, Any]:
        result: dict[Any, Any] = {}
        first_seen: dict[Any, Span] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                self._merge(result, value_node, path)
                continue
            if not isinstance(key_node, ScalarNode):
                self.doc.problems.append(
                    Problem(
                        self.doc.file,
                        *_pos(key_node),
                        "mapping keys must be plain scalars",
                        _fmt(path),
                    )
                )
                continue
            key = self.constructor.construct_object(key_node, deep=True)
            if not isinstance(key, str):
                key = str(key_node.value)
            if key in first_seen:
                first = first_seen[key]
                self.doc.problems.append(
                    Problem(
                        self.doc.file,
                        *_pos(key_node),
                        f"duplicate key {key!r} (first defined at line {first.line})",
                        format_path((*path, key)),
                        "remove one of the two entries; YAML would silently keep only one",
                        "duplicate_key",
                    )
                )
                continue
            first_seen[key] = _span(key_node)
            self.doc.keys[(*path, key)] = first_seen[key]
            result[key] = self.build(value_node, (*path, key))
        return result

    def _merge(self, result: dict[Any, Any], value_node: Node, path: YamlPath) -> None:
        sources = value_node.value if isinstance(value_node, SequenceNode) else [value_node]
        for source in sources:
            if isinstance(source, MappingNode):
                for key, value in self._mapping(source, path).items():
                    result.setdefault(key, value)


def _pos(node: Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


def _fmt(path: YamlPath) -> str:
    return format_path(path)


def _compose(text: str) -> Node | None:
    """Compose with libyaml when it is installed (4-5x faster), else the pure parser.

    libyaml rejects a few plain scalars that YAML 1.2 allows in flow sequences (`[gh?.x]`), so a
    syntax error from it is checked again with the pure parser, which is the reference.
    """
    try:
        return YAML(typ="safe").compose(text)  # type: ignore[no-any-return]
    except MarkedYAMLError:
        return YAML(typ="safe", pure=True).compose(text)  # type: ignore[no-any-return]


def _too_big(text: str, file: str) -> Problem | None:
    """`_scan` with libyaml, or with the pure parser where libyaml gives up (as `_compose`)."""
    try:
        return _scan(YAML(typ="safe").parse(text), file)
    except MarkedYAMLError:
        return _scan(YAML(typ="safe", pure=True).parse(text), file)


def _scan(events: Iterator[Event], file: str) -> Problem | None:
    """Depth and alias expansion, measured on the event stream before anything recursive runs.

    The composers (and our builder) recurse per level and the builder expands every alias, so
    both are bounded here first: the parser's event stream is flat and costs about a third of a
    compose.
    """
    depth = 0
    expanded: dict[str, int] = {}  # anchor → nodes it stands for once expanded
    open_sizes: list[tuple[str | None, int]] = []  # per open collection: anchor, nodes so far
    added = 0
    for event in events:
        if isinstance(event, CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                return _limit(
                    file,
                    event,
                    f"the document nests deeper than {MAX_DEPTH} levels",
                    "flatten the structure; no bundlectl file needs this depth",
                )
            open_sizes.append((event.anchor, 1))
            continue
        if isinstance(event, CollectionEndEvent):
            depth -= 1
            anchor, size = open_sizes.pop()
            if anchor is not None:
                expanded[anchor] = size
            _add(open_sizes, size)
        elif isinstance(event, ScalarEvent):
            if event.anchor is not None:
                expanded[event.anchor] = 1
            _add(open_sizes, 1)
        elif isinstance(event, AliasEvent):
            size = expanded.get(event.anchor, 1)
            added += size
            if added > MAX_ALIAS_NODES:
                return _limit(
                    file,
                    event,
                    f"alias *{event.anchor} expands the document past {MAX_ALIAS_NODES:,} nodes",
                    "aliases that repeat aliases grow exponentially; write the values out",
                )
            _add(open_sizes, size)
    return None


def _add(open_sizes: list[tuple[str | None, int]], size: int) -> None:
    if open_sizes:
        anchor, total = open_sizes[-1]
        open_sizes[-1] = (anchor, total + size)


def _limit(file: str, event: Event, message: str, hint: str) -> Problem:
    mark = event.start_mark
    line, column = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
    return Problem(file, line, column, message, "", hint, "yaml_limit")


def parse_yaml(text: str, file: str) -> YamlDoc:
    """Parse `text`; syntax errors and duplicate keys land in `doc.problems` (never raised)."""
    doc = YamlDoc(file=file, text=text)
    try:
        limit = _too_big(text, file)
        if limit is not None:
            doc.problems.append(limit)
            return doc
        node = _compose(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        message = " ".join(str(exc.problem or exc.context or "invalid YAML").split())
        if exc.context and exc.problem:
            message = f"{' '.join(str(exc.context).split())}: {message}"
        doc.problems.append(
            Problem(
                file,
                line,
                col,
                f"YAML syntax error: {message}",
                "",
                "fix the YAML syntax at this position (indentation, quotes, colons)",
                "yaml_syntax",
            )
        )
        return doc
    except YAMLError as exc:
        doc.problems.append(Problem(file, 1, 1, f"YAML error: {exc}", "", code="yaml_syntax"))
        return doc
    if node is not None:
        doc.data = _Builder(doc).build(node, ())
    return doc


def read_yaml(path: Path, display: str | None = None) -> YamlDoc:
    """Read and parse a file; an unreadable file is an input error (exit 2)."""
    shown = display or str(path)
    try:
        raw = path.read_bytes()
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
        raw = path.read_bytes()
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
