"""Tool-name patterns: one module splits and matches for the engine, the catalog and lint."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bundlectl.errors import UsageError
from bundlectl.policy.patterns import (
    gateway_name,
    matches,
    name_clashes,
    parse_tool_name,
    part_matches,
    split_rule,
)


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


_SERVER = st.from_regex(r"[a-z0-9][a-z0-9_-]{0,12}", fullmatch=True)
_TOOL = st.from_regex(r"[A-Za-z0-9_.-]{1,12}", fullmatch=True)


@pytest.mark.no_cover  # generated examples: the unit tests cover the lines
@given(st.lists(st.tuples(_SERVER, _TOOL), min_size=2, max_size=6, unique=True))
def test_gateway_names_of_distinct_tools_differ(pairs: list[tuple[str, str]]) -> None:
    names = [gateway_name(server, tool) for server, tool in pairs]
    assert len(set(names)) == len(names), list(zip(pairs, names, strict=True))
    assert gateway_name("a", "b__echo") != gateway_name("a__b", "echo")


@pytest.mark.no_cover  # as above
@given(st.lists(st.tuples(_SERVER, _TOOL), min_size=1, max_size=8, unique=True))
def test_name_clashes_are_exactly_the_names_shared(pairs: list[tuple[str, str]]) -> None:
    for naming in ("prefixed", "bare"):
        clashes = name_clashes(pairs, naming)
        named = [gateway_name(server, tool, naming) for server, tool in pairs]
        assert len(clashes) == len(named) - len(set(named))
        for name, first, second in clashes:
            assert gateway_name(*first, naming) == gateway_name(*second, naming) == name
            assert pairs.index(first) < pairs.index(second)
    assert name_clashes([("a", "echo"), ("b", "echo")], "bare") == [
        ("echo", ("a", "echo"), ("b", "echo"))
    ]
    assert name_clashes([("a", "echo"), ("b", "echo")]) == []
