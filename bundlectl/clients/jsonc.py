"""Editing JSON and JSONC (VS Code's JSON with comments and trailing commas) in place.

Client config files are the user's: an export changes only the members it owns and leaves every
other byte — other servers, settings, key order, comments, indentation — as it was. `parse`
records where each member's key and value are in the text; `set_member` replaces one value or
inserts one member; `remove_member` takes one out with its comma.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from bundlectl.errors import InputFileError, Problem


@dataclass
class Node:
    """A JSON value and where it is: [start, end) in the text; for an object its members."""

    value: Any
    start: int
    end: int
    members: dict[str, tuple[int, Node]] = field(default_factory=dict)  # key → (key start, value)


class _Parser:
    def __init__(self, text: str, file: str) -> None:
        self.text, self.file, self.pos = text, file, 0

    def fail(self, message: str) -> InputFileError:
        line = self.text.count("\n", 0, self.pos) + 1
        column = self.pos - (self.text.rfind("\n", 0, self.pos) + 1) + 1
        hint = "fix the JSON (comments and trailing commas are fine), then run the command again"
        return InputFileError([Problem(self.file, line, column, message)], hint=hint)

    def skip(self) -> None:
        text = self.text
        while self.pos < len(text):
            char = text[self.pos]
            if char in " \t\r\n\ufeff":
                self.pos += 1
            elif text.startswith("//", self.pos):
                end = text.find("\n", self.pos)
                self.pos = len(text) if end < 0 else end + 1
            elif text.startswith("/*", self.pos):
                end = text.find("*/", self.pos + 2)
                if end < 0:
                    raise self.fail("unterminated /* comment")
                self.pos = end + 2
            else:
                return

    def value(self) -> Node:
        self.skip()
        if self.pos >= len(self.text):
            raise self.fail("unexpected end of file: a value is missing")
        char = self.text[self.pos]
        if char == "{":
            return self.obj()
        if char == "[":
            return self.array()
        if char == '"':
            start = self.pos
            return Node(self.string(), start, self.pos)
        match = _SCALAR.match(self.text, self.pos)
        if not match:
            raise self.fail(f"unexpected {char!r}: expected a JSON value")
        start, self.pos = self.pos, match.end()
        try:
            return Node(json.loads(match.group()), start, self.pos)
        except json.JSONDecodeError:
            self.pos = start
            raise self.fail(f"not a JSON value: {match.group()!r}") from None

    def string(self) -> str:
        match = _STRING.match(self.text, self.pos)
        if not match:
            raise self.fail("unterminated string")
        self.pos = match.end()
        return str(json.loads(match.group()))

    def obj(self) -> Node:
        start = self.pos
        self.pos += 1
        node = Node({}, start, start)
        while True:
            self.skip()
            if self.text.startswith("}", self.pos):
                self.pos += 1
                node.end = self.pos
                return node
            if not self.text.startswith('"', self.pos):
                raise self.fail('expected a "key" or }')
            key_start = self.pos
            key = self.string()
            self.skip()
            if not self.text.startswith(":", self.pos):
                raise self.fail(f"expected : after {key!r}")
            self.pos += 1
            child = self.value()
            if key in node.members:
                self.pos = key_start
                raise self.fail(f"key {key!r} appears twice")
            node.members[key] = (key_start, child)
            node.value[key] = child.value
            self.skip()
            if self.text.startswith(",", self.pos):
                self.pos += 1
            elif not self.text.startswith("}", self.pos):
                raise self.fail("expected , or }")

    def array(self) -> Node:
        start = self.pos
        self.pos += 1
        items: list[Any] = []
        while True:
            self.skip()
            if self.text.startswith("]", self.pos):
                self.pos += 1
                return Node(items, start, self.pos)
            items.append(self.value().value)
            self.skip()
            if self.text.startswith(",", self.pos):
                self.pos += 1
            elif not self.text.startswith("]", self.pos):
                raise self.fail("expected , or ]")


_STRING = re.compile(r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"')
_SCALAR = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null")


def parse(text: str, file: str) -> Node:
    """The document's root (an object: every client file is one); an empty file is `{}`."""
    if not text.strip():
        return Node({}, 0, 0)
    parser = _Parser(text, file)
    root = parser.value()
    parser.skip()
    if parser.pos != len(text):
        raise parser.fail("unexpected text after the end of the document")
    if not isinstance(root.value, dict):
        parser.pos = root.start
        raise parser.fail("the file must hold a JSON object")
    return root


def dumps(value: Any, indent: str, level: int) -> str:
    """`value` as JSON indented to sit at nesting `level` of a file indented by `indent`."""
    text = json.dumps(value, indent=len(indent) or 2, ensure_ascii=False)
    pad = indent * level
    return text.replace("\n", "\n" + pad)


def indent_of(text: str) -> str:
    """The file's indentation unit (two spaces when it cannot tell)."""
    match = re.search(r"\n([ \t]+)\S", text)
    return match.group(1) if match else "  "


def set_member(text: str, path: list[str], value: Any, file: str) -> str:
    """`text` with the member at `path` (object keys from the root) set to `value`: its value
    replaced where it exists, else the member (and any missing parents) added at the end of its
    object. Everything else stays byte for byte."""
    if not text.strip():
        text = "{}\n"
    root = parse(text, file)
    unit = indent_of(text) if "\n" in text.strip() else "  "
    node, depth = root, 0
    for index, key in enumerate(path):
        found = node.members.get(key)
        if found is None:
            rest: Any = value
            for inner in reversed(path[index + 1 :]):
                rest = {inner: rest}
            return _insert(text, node, key, rest, unit=unit, depth=depth)
        node = found[1]
        depth += 1
        if index < len(path) - 1 and not isinstance(node.value, dict):
            raise parse_error(
                text, node.start, file, f"{'.'.join(path[: index + 1])} is not an object"
            )
    return text[: node.start] + dumps(value, unit, depth) + text[node.end :]


def remove_member(text: str, path: list[str], file: str) -> str:
    """`text` without the member at `path` (unchanged when there is none), with its comma and,
    when it had its own line, that line."""
    root = parse(text, file)
    node = root
    for key in path[:-1]:
        found = node.members.get(key)
        if found is None:
            return text
        node = found[1]
    found = node.members.get(path[-1])
    if found is None:
        return text
    key_start, child = found
    line_start = text.rfind("\n", 0, key_start) + 1
    start = line_start if not text[line_start:key_start].strip() else key_start
    end = child.end
    comma = re.compile(r"[ \t]*,([ \t]*//[^\n]*)?").match(text, end)
    if comma:
        end = comma.end()
    else:  # the last member: the comma before it goes instead
        before = len(text[:start].rstrip())
        if before > node.start + 1 and text[before - 1] == ",":
            text, start, end = text[: before - 1] + text[before:], start - 1, end - 1
            line_start -= 1
    newline = re.compile(r"[ \t]*\n").match(text, end)
    if newline and start == line_start:
        end = newline.end()
    return text[:start] + text[end:]


def _insert(text: str, node: Node, key: str, value: Any, *, unit: str, depth: int) -> str:
    close = node.end - 1  # the object's "}"
    pad = unit * (depth + 1)
    member = f"{json.dumps(key)}: {dumps(value, unit, depth + 1)}"
    if not node.members:
        return f"{text[: node.start + 1]}\n{pad}{member}\n{unit * depth}{text[close:]}"
    # After the last member's value (and a trailing comma, if the file has one).
    last = max(child.end for _, child in node.members.values())
    comma = re.compile(r"\s*,").match(text, last)
    at = comma.end() if comma else last
    separator = "" if comma else ","
    return f"{text[:at]}{separator}\n{pad}{member}{text[at:]}"


def parse_error(text: str, pos: int, file: str, message: str) -> InputFileError:
    parser = _Parser(text, file)
    parser.pos = pos
    return parser.fail(message)
