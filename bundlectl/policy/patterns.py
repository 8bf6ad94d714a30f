"""Tool names and the patterns that match them (SPEC 3). Pure; the only glob code there is.

A rule names `server.tool`, split at the first '.' (tool names may contain '.' and '/', server
names may not); a rule without '.' is a bare tool pattern, the same as `*.tool`. `*` and `?` are
the only wildcards, matched case-sensitively and separately on each part, so a `*` never crosses
the '.'. A concrete name from the command line must have both parts.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterable

from bundlectl.errors import UsageError


def split_rule(pattern: str) -> tuple[str, str]:
    """`server.tool` split at the first '.'; a bare pattern has server part '*'."""
    server, dot, tool = pattern.partition(".")
    return (server, tool) if dot else ("*", pattern)


def parse_tool_name(qualified: str) -> tuple[str, str]:
    """A concrete `server.tool` (from the command line, a batch line, a gateway call)."""
    server, dot, tool = qualified.partition(".")
    if not dot or not server or not tool:
        raise UsageError(
            f"{qualified!r} is not a qualified tool name",
            hint="write SERVER.TOOL, for example files.read_file",
        )
    return server, tool


def has_wildcard(part: str) -> bool:
    return "*" in part or "?" in part


def regex_source(part: str) -> str:
    """The regular expression (for `re.fullmatch` with DOTALL) of one part of a pattern."""
    return "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in part)


@functools.lru_cache(maxsize=8192)
def compiled(part: str, *, casefold: bool = False) -> re.Pattern[str]:
    """One part of a pattern, compiled (cached: rules repeat across agents)."""
    return re.compile(regex_source(part), re.DOTALL | (re.IGNORECASE if casefold else 0))


# Between (and around) the names of a list joined for `in_joined`: a character no name holds.
SEPARATOR = "\x00"


@functools.lru_cache(maxsize=8192)
def in_joined(part: str, *, casefold: bool = False) -> re.Pattern[str]:
    """One part of a pattern as a search over names joined by SEPARATOR (one before each and
    one at the end): every match is a whole name that `part` matches, and one `finditer` finds
    them all in C instead of a `fullmatch` per name."""
    source = "".join(
        "[^\x00]*" if c == "*" else "[^\x00]" if c == "?" else re.escape(c) for c in part
    )
    return re.compile(f"(?<=\x00){source}(?=\x00)", re.IGNORECASE if casefold else 0)


def part_matches(part: str, text: str, *, casefold: bool = False) -> bool:
    """Whether one part of a pattern (the server or the tool part) matches `text`."""
    if not casefold and not has_wildcard(part):
        return part == text
    return compiled(part, casefold=casefold).fullmatch(text) is not None


def matches(pattern: str, server: str, tool: str) -> bool:
    """Whether a rule pattern matches the tool (server, tool)."""
    server_part, tool_part = split_rule(pattern)
    return part_matches(server_part, server) and part_matches(tool_part, tool)


_CLIENT_SAFE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_UNSAFE_CHAR = re.compile(r"[^A-Za-z0-9_-]")


# How `serve` names tools and prompts in direct mode (`gateway.names`, `serve --names`).
NAMINGS = ("prefixed", "bare")


def gateway_name(server: str, tool: str, names: str = "prefixed") -> str:
    """The name `bundlectl serve` gives a tool (or a prompt): with `names="bare"` the server's
    own name, else `server__tool`, made client-safe
    (`^[A-Za-z0-9_-]{1,64}$`); a name that had to change or is too long gets a stable hash
    suffix, so the mapping never changes between runs.

    The plain form is kept only for a server name without `__` that does not end in `_`: then
    the first `__` of the name is the separator, and two (server, tool) pairs can never give
    one plain name (servers `a` with tool `b__echo` and `a__b` with tool `echo` both gave
    `a__b__echo`). A hashed name could still equal a plain one a server chose on purpose; the
    gateway withholds a name that two tools claim (`Hub.learn`)."""
    if names == "bare":
        return tool
    plain = f"{server}__{tool}"
    if "__" not in server and not server.endswith("_") and _CLIENT_SAFE.match(plain):
        return plain
    suffix = hashlib.sha256(plain.encode()).hexdigest()[:8]
    return f"{_UNSAFE_CHAR.sub('_', plain)[:55]}_{suffix}"


def name_clashes(
    pairs: Iterable[tuple[str, str]], names: str = "prefixed"
) -> list[tuple[str, tuple[str, str], tuple[str, str]]]:
    """Gateway names that two (server, name) pairs would share: (name, first, second) for each
    pair after the first that claims a name, in the order given."""
    seen: dict[str, tuple[str, str]] = {}
    clashes = []
    for pair in pairs:
        name = gateway_name(*pair, names)
        first = seen.setdefault(name, pair)
        if first != pair:
            clashes.append((name, first, pair))
    return clashes
