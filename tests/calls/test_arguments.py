"""Tool arguments from the command line: KEY=VALUE typed by the input schema, `--args` JSON,
and validation against the schema — every mistake a usage or tool-call error with a hint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bundlectl.calls.arguments import (
    NotJsonNumber,
    build_arguments,
    load_json_args,
    loads_message,
    split_pairs,
    typed_value,
    validate,
)
from bundlectl.errors import ToolCallError, UsageError

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


AGREEMENT: list[tuple[dict[str, Any], Any]] = [
    (SCHEMA, {"path": "a", "count": 2, "tags": ["x"], "limit": None}),
    (SCHEMA, {"path": "a", "count": 0}),
    (SCHEMA, {"path": 1}),
    (SCHEMA, {"path": "a", "count": 2**70}),  # beyond 64 bits
    ({"type": "object", "properties": {"n": {"maximum": 2**64}}}, {"n": 2**65}),
    ({"properties": {"d": {"type": "string", "format": "date"}}}, {"d": "not a date"}),
    (
        {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "properties": {"d": {"format": "email"}},
        },
        {"d": "nobody"},
    ),
    ({"properties": {"n": {"pattern": "^\\d+$"}}}, {"n": "٣٤"}),  # Unicode digits
    ({"type": "object", "required": "path"}, {"path": 1}),  # sloppy: used as far as it goes
    ({"$defs": {"p": {"type": "integer"}}, "properties": {"a": {"$ref": "#/$defs/p"}}}, {"a": "x"}),
    ({"type": "object", "additionalProperties": False}, {"extra": True}),
]


@pytest.mark.parametrize(("schema", "instance"), AGREEMENT)
def test_the_fast_check_never_overrules_jsonschema(schema: dict[str, Any], instance: Any) -> None:
    """Arguments jsonschema finds valid pass; those it refuses are refused with its words."""
    from jsonschema import Draft202012Validator
    from jsonschema.validators import validator_for

    expected = sorted(
        e.message for e in validator_for(schema, Draft202012Validator)(schema).iter_errors(instance)
    )
    try:
        validate(instance, schema, "s.t")
        refused: list[str] = []
    except ToolCallError as exc:
        refused = sorted(line.split(": ", 1)[1] for line in exc.message.splitlines()[1:])
    assert refused == expected


def test_a_schema_never_makes_bundlectl_fetch_a_reference() -> None:
    """A server's schema that points `$ref` at a URL or a file is unusable, not fetched."""
    import http.server
    import threading

    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"type": "integer"}')

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/int.json"
        for ref in (url, "file:///etc/hostname"):
            with pytest.raises(ToolCallError, match="declares an input schema that cannot be used"):
                validate({"a": 1}, {"properties": {"a": {"$ref": ref}}}, "s.t")
    finally:
        server.shutdown()
        server.server_close()
    assert hits == []


def test_without_the_fast_validator_jsonschema_checks_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """jsonschema-rs is a CPython-only dependency: where it is missing, nothing changes."""
    import sys

    monkeypatch.setitem(sys.modules, "jsonschema_rs", None)  # import raises ImportError
    schema = {**SCHEMA}  # a new object: a checker made now, without the fast validator
    validate({"path": "a"}, schema, "files.x")
    with pytest.raises(ToolCallError, match="'path' is a required property"):
        validate({}, schema, "files.x")
    from bundlectl.calls.arguments import checker

    assert checker(schema).fast is None


@pytest.mark.parametrize(
    "raw",
    [
        b'{"id": 1, "params": {"x": [1.5, "\\u2028", null]}}',
        '{"a": "\u00e9"}'.encode("utf-16"),  # a BOM: decoded as json.loads decodes it
        '{"a": "\u00e9"}'.encode("utf-8-sig"),
        '{"a": 1e308}',
        bytearray(b"[]"),
    ],
)
def test_a_message_is_read_as_json_loads_reads_it(raw: bytes | str) -> None:
    import json

    assert loads_message(raw) == json.loads(raw)


@pytest.mark.parametrize("raw", [b'{"a": NaN}', '{"a": -Infinity}', b"[Infinity]"])
def test_a_message_with_a_number_json_has_not_is_refused(raw: bytes | str) -> None:
    with pytest.raises(NotJsonNumber):
        loads_message(raw)


def test_a_message_that_is_no_json_fails_as_json_loads_fails() -> None:
    import json

    def failure(read: Any, raw: bytes | str) -> tuple[type[BaseException], str]:
        try:
            read(raw)
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            return type(exc), str(exc)
        raise AssertionError(f"{raw!r} was read")

    for raw in (b"{", "\ufeff{}", b"\xff\xfe{", b"\x80"):
        assert failure(loads_message, raw) == failure(json.loads, raw)
