"""The YAML parser's events for a file, bounded before anything is built from them: nesting
depth and the nodes aliases add once expanded are measured on the stream, so a hostile file
stops the parser at the event that breaks a limit with a positioned problem."""

from __future__ import annotations

from collections.abc import Iterator

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError
from ruamel.yaml.events import (
    AliasEvent,
    CollectionEndEvent,
    CollectionStartEvent,
    Event,
    ScalarEvent,
)

from bundlectl.errors import Problem

# Bounds on what a file may make us build. Real configs and manifests nest about 15 deep and use
# a handful of aliases; a hostile file (an alias "billion laughs", 10,000 nested `[`) must end in
# a positioned error in milliseconds, never in gigabytes, minutes or a RecursionError.
MAX_DEPTH = 100
MAX_ALIAS_NODES = 100_000  # nodes that aliases may add to the document once expanded


def bounded_events(text: str, file: str) -> list[Event] | Problem:
    """The parser's events, or the first limit they break (`_scan`, checked as they arrive).

    libyaml is used when it is installed (4-5x faster than pure Python); it rejects a few plain
    scalars that YAML 1.2 allows in flow sequences (`[gh?.x]`), so a syntax error from it is
    checked again with the pure parser, which is the reference.
    """
    try:
        events: list[Event] = []
        return _scan(YAML(typ="safe").parse(text), file, events) or events
    except MarkedYAMLError:
        events = []
        return _scan(YAML(typ="safe", pure=True).parse(text), file, events) or events


def _scan(events: Iterator[Event], file: str, kept: list[Event]) -> Problem | None:
    """Depth and alias expansion, measured on the event stream (kept in `kept`) before
    anything recursive runs: the builder recurses per level and expands every alias, so both
    are bounded first, and a hostile file stops the parser at the event that breaks a limit.
    """
    depth = 0
    expanded: dict[str, int] = {}  # anchor → nodes it stands for once expanded
    open_sizes: list[tuple[str | None, int]] = []  # per open collection: anchor, nodes so far
    added = 0
    for event in events:
        kept.append(event)
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
