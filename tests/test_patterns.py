"""Tool-name patterns: one module splits and matches for the engine, the catalog and lint."""

from __future__ import annotations

import pytest

from bundlectl.errors import UsageError
from bundlectl.patterns import matches, parse_tool_name, part_matches, split_rule


def test_rules_split_at_the_first_dot_and_bare_rules_mean_every_server() -> None:
    assert split_rule("github.create_issue") == ("github", "create_issue")
    assert split_rule("fs.read.file/v2") == ("fs", "read.file/v2")
    assert split_rule("read_file") == ("*", "read_file")


@pytest.mark.parametrize(
    ("pattern", "server", "tool", "expected"),
    [
        ("*", "any", "thing", True),
        ("files.*", "files", "read_file", True),
        ("files.*", "files2", "read_file", False),
        ("f*.read_file", "fs", "read_file", True),
        ("*.read_?ile", "x", "read_file", True),
        ("*.read_?ile", "x", "read_fiile", False),
        ("a*", "a", "x", False),  # bare: the tool part is 'a*'
        ("a*", "x", "abc", True),
        ("fil*.x", "files.more", "x", True),  # server parts hold no '.', but '*' is per part
        ("files.READ_FILE", "files", "read_file", False),  # case-sensitive
        ("files.read.*", "files", "read.file", True),
        ("files.*", "files", "line\nbreak", True),
    ],
)
def test_matching(pattern: str, server: str, tool: str, expected: bool) -> None:
    assert matches(pattern, server, tool) is expected


def test_casefold_matching_is_only_on_request() -> None:
    assert part_matches("Read_File", "read_file", casefold=True)
    assert not part_matches("Read_File", "read_file")


def test_concrete_names_need_both_parts() -> None:
    assert parse_tool_name("files.read.file") == ("files", "read.file")
    for bad in ("nodot", ".tool", "server."):
        with pytest.raises(UsageError):
            parse_tool_name(bad)
