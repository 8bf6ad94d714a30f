"""Tool arguments from the command line: KEY=VALUE typed by the input schema, `--args` JSON,
and validation against the schema — every mistake a usage or tool-call error with a hint."""

from __future__ import annotations

from pathlib import Path

import pytest

from bundlectl.errors import ToolCallError, UsageError
from bundlectl.executor.arguments import (
    build_arguments,
    load_json_args,
    split_pairs,
    typed_value,
    validate,
)

SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "count": {"type": "integer", "minimum": 1},
        "ratio": {"type": "number"},
        "force": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "limit": {"type": ["integer", "null"]},
    },
    "required": ["path"],
}


def test_values_take_the_type_the_schema_declares() -> None:
    props = SCHEMA["properties"]
    assert typed_value("path", "10", props["path"]) == "10"  # a string stays a string
    assert typed_value("count", "10", props["count"]) == 10
    assert typed_value("ratio", "2.5", props["ratio"]) == 2.5
    assert typed_value("force", "true", props["force"]) is True
    assert typed_value("tags", '["a", "b"]', props["tags"]) == ["a", "b"]
    assert typed_value("limit", "null", props["limit"]) is None
    assert typed_value("free", '{"a": 1}', {}) == {"a": 1}  # undeclared: JSON when it parses
    assert typed_value("free", "plain text", {}) == "plain text"


def test_a_value_of_the_wrong_type_gets_the_hint_for_its_type() -> None:
    with pytest.raises(ToolCallError) as caught:
        typed_value("count", "ten", SCHEMA["properties"]["count"])
    assert "not a valid integer" in caught.value.message
    assert caught.value.hint == "an integer is written in digits: count=10"


def test_pairs_and_args_combine_and_pairs_win() -> None:
    pairs = split_pairs(["path=README.md", "count=3"])
    base = load_json_args('{"path": "other.md", "force": true}')
    assert build_arguments(pairs, base, SCHEMA) == {"path": "README.md", "force": True, "count": 3}


def test_malformed_pairs_and_json_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="is not KEY=VALUE"):
        split_pairs(["path"])
    with pytest.raises(UsageError, match="'path' is given twice"):
        split_pairs(["path=a", "path=b"])
    with pytest.raises(UsageError, match=r"--args:1:10: invalid JSON"):
        load_json_args('{"path": }')
    with pytest.raises(UsageError, match="key 'path' appears twice"):
        load_json_args('{"path": "a", "path": "b"}')
    with pytest.raises(UsageError, match="must be a JSON object, not list"):
        load_json_args("[1]")
    file = tmp_path / "args.json"
    file.write_text('{"path": "from-file"}')
    assert load_json_args(f"@{file}") == {"path": "from-file"}
    with pytest.raises(UsageError, match="cannot read"):
        load_json_args(f"@{tmp_path / 'missing.json'}")


def test_validation_lists_every_violation() -> None:
    validate({"path": "a", "count": 2}, SCHEMA, "files.x")
    with pytest.raises(ToolCallError) as caught:
        validate({"count": 0, "force": "yes"}, SCHEMA, "files.x")
    message = caught.value.message
    assert message.startswith("the arguments do not satisfy the input schema of files.x:")
    assert "'path' is a required property" in message
    assert "count" in message and "force" in message
    for broken in ({"type": "no-such-type"}, {"$ref": "#/$defs/missing"}):
        with pytest.raises(ToolCallError, match="declares an input schema that cannot be used"):
            validate({}, broken, "files.x")
