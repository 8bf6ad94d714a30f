"""The catalog: tools with their definitions, match masks, destructiveness, search."""

from __future__ import annotations

from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from bundlectl.config.models import ToolSpec
from bundlectl.policy.catalog import Catalog, ToolRef, is_destructive, search
from bundlectl.policy.patterns import part_matches, split_rule
from tests.conftest import Run, write


def spec(name: str, description: str = "", **annotations: bool) -> ToolSpec:
    return ToolSpec(name=name, description=description, annotations=annotations)


def test_destructive_by_annotation_first_then_by_name() -> None:
    assert is_destructive(spec("delete_file"))
    assert is_destructive(spec("cleanup", destructiveHint=True))
    assert not is_destructive(spec("delete_file", readOnlyHint=True))
    assert not is_destructive(spec("write_file", destructiveHint=False))
    assert not is_destructive(spec("read_file"))
    assert not is_destructive(spec("rewrite_notes"))  # 'write' must be a word of the name


def test_masks_members_and_the_destructive_mask() -> None:
    tools = [
        ToolRef("fs", "read_file", spec("read_file", "Read a file")),
        ToolRef("fs", "write_file", spec("write_file", "Write a file")),
        ToolRef("gh", "create_issue", spec("create_issue", "Open an issue")),
        ToolRef("fs", "read_file", spec("read_file", "duplicate is dropped")),
    ]
    catalog = Catalog(tools)
    assert [t.qualified for t in catalog.tools] == [
        "fs.read_file",
        "fs.write_file",
        "gh.create_issue",
    ]
    assert [t.qualified for t in catalog.members(catalog.mask("fs.*"))] == [
        "fs.read_file",
        "fs.write_file",
    ]
    assert [t.qualified for t in catalog.members(catalog.destructive)] == [
        "fs.write_file",
        "gh.create_issue",
    ]
    assert len(catalog.members(catalog.full, limit=2)) == 2
    assert catalog.mask_casefold("FS.READ_*") == catalog.mask("fs.read_*") == 1
    assert [ref.qualified for _, ref in search(catalog.tools, "issue")] == ["gh.create_issue"]


def test_tools_flags_destructive_exactly_where_lint_warns(project: Path, run: Run) -> None:
    write(
        project / "bundlectl.yaml",
        """
        version: 1
        servers:
          api:
            command: ./api
            tools:
              - {name: update_record, description: Change a record}
              - {name: get_record, description: Read a record, annotations: {readOnlyHint: true}}
        agents:
          agent: {allow: ["api.*"]}
        policy: {default: deny}
        """,
    )
    assert run("lock").code == 0
    assert run("tools", "--server", "api").lines == [
        "api.get_record  Read a record  [read-only]",
        "api.update_record  Change a record  [destructive]",
    ]
    lint = run("lint", "--select", "BCL204")
    assert "allows destructive tools without asking: api.update_record" in lint.out


def test_members_and_names_of_any_mask() -> None:
    """Every set bit, in order, for masks of thousands of tools (the bits are read in C)."""
    import random

    catalog = Catalog(ToolRef(f"s{i // 100}", f"t{i:04d}") for i in range(2500))
    chooser = random.Random(3)
    for mask in (0, 1, catalog.full, 1 << 2499, *(chooser.getrandbits(2500) for _ in range(20))):
        wanted = [catalog.tools[i] for i in range(2500) if mask >> i & 1]
        assert catalog.members(mask) == wanted
        assert catalog.members(mask, limit=3) == wanted[:3]
        assert catalog.names(mask) == [t.qualified for t in wanted]


NAME_CHARS = "ab.*?/_-\n\x00É"  # wildcards, regex and separator characters, a newline, a NUL


@settings(max_examples=200, deadline=None)
@example([("s", "a"), ("s", "b")], ["s.a\x00b", "*\x00*", "s.?\x00?"])  # across two names
@given(
    st.lists(
        st.tuples(st.sampled_from(["s", "t", "s.x"]), st.text(NAME_CHARS, max_size=4)),
        max_size=12,
    ),
    st.lists(st.text(NAME_CHARS, max_size=5), min_size=1, max_size=6),
)
def test_a_patterns_mask_is_the_tools_it_matches_one_by_one(
    tools: list[tuple[str, str]], patterns: list[str]
) -> None:
    """Masks are found by one regular expression search over a server's joined names; each is
    what matching the pattern against every tool alone gives, case-folded or not."""
    catalog = Catalog(ToolRef(server, tool) for server, tool in tools)
    for pattern in patterns:
        for casefold in (False, True):
            alone = 0
            for i, ref in enumerate(catalog.tools):
                server_part, tool_part = split_rule(pattern)
                if part_matches(server_part, ref.server, casefold=casefold) and part_matches(
                    tool_part, ref.tool, casefold=casefold
                ):
                    alone |= 1 << i
            found = catalog.mask_casefold(pattern) if casefold else catalog.mask(pattern)
            assert found == alone, (pattern, casefold, catalog.tools)
