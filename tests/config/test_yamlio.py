import pytest

from bundlectl.config.yamlio import format_path, parse_yaml


def test_positions_of_keys_and_values_are_one_based() -> None:
    doc = parse_yaml("a: 1\nb:\n  - x\n  - {c: d}\n", "f.yaml")
    assert doc.data == {"a": 1, "b": ["x", {"c": "d"}]}
    assert (doc.keys[("b",)].line, doc.keys[("b",)].column) == (2, 1)
    assert (doc.values[("b", 1, "c")].line, doc.values[("b", 1, "c")].column) == (4, 9)
    assert doc.problems == []


def test_every_duplicate_key_is_reported_at_the_duplicate() -> None:
    doc = parse_yaml("a: 1\nb: 2\na: 3\nc:\n  x: 1\n  x: 2\n", "f.yaml")
    assert [(p.line, p.column, p.yaml_path) for p in doc.problems] == [(3, 1, "a"), (6, 3, "c.x")]
    assert "first defined at line 1" in doc.problems[0].message
    assert doc.data["a"] == 1  # the first one is kept, never silently the last


def test_syntax_error_has_position_and_hint() -> None:
    doc = parse_yaml("a: [1, 2\nb: 3\n", "f.yaml")
    [problem] = doc.problems
    assert (problem.file, problem.line) == ("f.yaml", 2)
    assert problem.message.startswith("YAML syntax error:")
    assert problem.hint


def test_plain_scalars_that_are_not_strings_are_recorded() -> None:
    doc = parse_yaml("version: 1.10\nname: x\nquoted: '1.10'\n", "f.yaml")
    assert doc.plain_scalars[("version",)].text == "1.10"
    assert ("name",) not in doc.plain_scalars
    assert ("quoted",) not in doc.plain_scalars


def test_merge_keys_and_empty_documents() -> None:
    doc = parse_yaml("base: &b {x: 1}\nchild:\n  <<: *b\n  y: 2\n", "f.yaml")
    assert doc.data["child"] == {"x": 1, "y": 2}
    assert parse_yaml("", "f.yaml").data is None


def test_format_path() -> None:
    assert format_path(("agents", "a", "allow", 0)) == "agents.a.allow[0]"
    assert format_path(()) == ""


def test_flow_scalars_libyaml_rejects_are_still_read() -> None:
    doc = parse_yaml("allow: [gh?.get_issue, files.read_fil?]\n", "f.yaml")
    assert doc.problems == []
    assert doc.data == {"allow": ["gh?.get_issue", "files.read_fil?"]}


def _alias_bomb(levels: int) -> str:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for level in range(1, levels + 1):
        prev = "a" if level == 1 else f"b{level - 1}"
        lines.append(f"b{level}: &b{level} [" + ", ".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_a_positioned_problem_not_gigabytes() -> None:
    doc = parse_yaml(_alias_bomb(9), "f.yaml")  # 9**10 nodes once expanded
    [problem] = doc.problems
    assert problem.message == "alias *b4 expands the document past 100,000 nodes"
    assert (problem.line, problem.column) == (6, 10)  # b5: the second *b4 crossed the bound
    assert doc.data is None


def test_a_few_aliases_are_fine() -> None:
    doc = parse_yaml(_alias_bomb(3), "f.yaml")  # 9**4 = 6,561 nodes
    assert doc.problems == []
    assert len(doc.data["b3"]) == 9 and doc.data["b3"][0][0][0][0] == "x"


def test_deep_nesting_is_a_positioned_problem_in_flow_and_block_style() -> None:
    flow = parse_yaml("x: " + "[" * 200_000 + "]" * 200_000 + "\n", "f.yaml")
    assert [(p.line, p.column, p.message) for p in flow.problems] == [
        (1, 103, "the document nests deeper than 100 levels")
    ]
    block = "".join("  " * depth + "k:\n" for depth in range(150))
    [problem] = parse_yaml(block, "f.yaml").problems
    assert (problem.line, problem.message) == (101, "the document nests deeper than 100 levels")
    fine = parse_yaml("x: " + "[" * 99 + "]" * 99 + "\n", "f.yaml")
    assert fine.problems == []


def test_tags_aliases_and_merge_keys_are_read() -> None:
    import warnings

    text = (
        "a: !!int 5\nb: !!str 5\nc: !!binary aGVsbG8=\nd: 2026-11-23\n"
        "base: &base {x: 1, y: 2}\n"
        "m1: {<<: *base, y: 3}\n"
        "m2: {<<: [*base, {z: 4}], x: 0}\n"
        "first: &v 1\nagain: &v 2\nlast: *v\n"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a reused anchor is YAML, not a warning on stderr
        doc = parse_yaml(text, "f.yaml")
    assert doc.problems == []
    assert doc.data["a"] == 5 and doc.data["b"] == "5" and doc.data["c"] == b"hello"
    assert str(doc.data["d"]) == "2026-11-23"
    assert doc.data["m1"] == {"x": 1, "y": 3}
    assert doc.data["m2"] == {"x": 0, "y": 2, "z": 4}
    assert doc.data["last"] == 2
    assert doc.span(("m1", "x"))[:2] == (5, 17)  # a merged value is where it was written
    assert doc.plain_scalars[("a",)].tag == "tag:yaml.org,2002:int"


def test_tags_and_aliases_that_cannot_be_read_are_positioned_problems() -> None:
    cases = {
        "a: !foo bar\n": (1, 4, "unknown YAML tag !foo"),
        "a: !!python/object:os.system {x: 1}\n": (
            1,
            4,
            "unknown YAML tag !!python/object:os.system",
        ),
        "a: !!int x\n": (1, 4, "'x' cannot be read as !!int"),
        "a: !!float one\n": (1, 4, "'one' cannot be read as !!float"),
        "a: *nowhere\n": (1, 4, "YAML syntax error: found undefined alias 'nowhere'"),
        "a: &x [1, *x]\n": (
            1,
            11,
            "alias *x is inside the node it names (a structure that contains itself)",
        ),
        "? &k a\n: 1\n*k : 2\n": (3, 1, "duplicate key 'a' (first defined at line 1)"),
        "? [a]\n: 1\n": (1, 3, "mapping keys must be plain scalars"),
    }
    for text, wanted in cases.items():
        doc = parse_yaml(text, "f.yaml")
        assert [(p.line, p.column, p.message) for p in doc.problems] == [wanted], text


@pytest.mark.no_cover  # many documents read twice: the tests above cover the lines
def test_documents_read_as_ruamel_reads_them() -> None:
    """Whatever a YAML emitter writes (block and flow style, quoting, numbers, booleans, nulls,
    strings that look like them), the event builder reads the same data as ruamel's loader."""
    import io

    from hypothesis import given, settings
    from hypothesis import strategies as st
    from ruamel.yaml import YAML

    tricky = st.sampled_from(["yes", "no", "on", "null", "~", "1e3", "0x1F", "017", "1_000", ""])
    scalars = (
        st.none()
        | st.booleans()
        | st.integers(-(2**70), 2**70)
        | st.floats(allow_nan=False, allow_infinity=True)
        | st.text(max_size=12)
        | tricky
    )
    keys = st.text(min_size=1, max_size=8) | tricky.filter(bool)
    trees = st.recursive(
        scalars,
        lambda c: st.lists(c, max_size=4) | st.dictionaries(keys, c, max_size=4),
        max_leaves=20,
    )

    @settings(max_examples=120, deadline=None)  # 300 took 5 s of the suite's 4 minutes
    @given(trees, st.sampled_from([None, True, False]))
    def check(value: object, flow: bool | None) -> None:
        emitter = YAML(typ="safe", pure=True)
        emitter.default_flow_style = flow
        stream = io.StringIO()
        emitter.dump({"root": value}, stream)
        text = stream.getvalue()
        doc = parse_yaml(text, "f.yaml")
        assert doc.problems == [], text
        assert doc.data == YAML(typ="safe", pure=True).load(text), text

    check()
