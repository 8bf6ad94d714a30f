"""Every malformed config ends in positioned errors, all at once, exit 2 — through the CLI."""

import json
from pathlib import Path

import pytest

from tests.conftest import Run, write


def test_all_problems_of_a_config_in_one_run(project: Path, run: Run) -> None:
    write(
        project / "bundlectl.yaml",
        """
        version: 1
        bundles: [basic, 'Git>=1', 'github>=x']
        servers:
          Bad: {command: x}
          ok: {comand: x}
          web: {transport: sse}
          slow: {command: x, timeout: 0}
        agents:
          a: {allow: ['read_[ab]ile', 'x.'], extends: [b]}
        polcy: {}
    """,
    )
    result = run("resolve")
    assert result.code == 2
    errors = [line for line in result.err_lines if line.startswith("error:")]
    assert errors == [
        "error: bundlectl.yaml:2:18: bundles[1]: bundle name 'Git' in 'Git>=1' must be lowercase "
        "letters, digits, '-' and '_', starting with a letter or digit, at most 63 characters",
        "error: bundlectl.yaml:2:28: bundles[2]: invalid version specifier '>=x' in 'github>=x': "
        "use PEP 440 specifiers such as ==1.2.0, >=1,<2 or ~=1.1 (no extras, markers or URLs)",
        "error: bundlectl.yaml:4:3: servers.Bad: 'Bad' is not a valid name: use lowercase "
        "letters, digits, '-' and '_', starting with a letter or digit (at most 63 characters)",
        "error: bundlectl.yaml:5:8: servers.ok.comand: unknown key 'comand'; did you mean "
        "'command'?",
        "error: bundlectl.yaml:6:3: servers.web: a sse server needs a 'url'",
        "error: bundlectl.yaml:7:31: servers.slow.timeout: Input should be greater than or "
        "equal to 1 (got 0)",
        "error: bundlectl.yaml:9:15: agents.a.allow[0]: unsupported pattern 'read_[ab]ile': '[' "
        "is not allowed; only '*' and '?' are wildcards",
        "error: bundlectl.yaml:9:31: agents.a.allow[1]: rule 'x.' has an empty server or tool part",
        "error: bundlectl.yaml:10:1: polcy: unknown key 'polcy'; did you mean 'policy'?",
    ]
    assert (
        "  hint: allowed keys here: agents, bundles, gateway, limits, lint, policy, privacy, "
        "registries, servers, state, tests, version" in result.err_lines
    )
    assert "Traceback" not in result.err


def test_duplicate_keys_are_errors_not_last_one_wins(project: Path, run: Run) -> None:
    write(
        project / "bundlectl.yaml",
        """
        version: 1
        bundles: [basic]
        agents:
          a: {allow: [read_file]}
          a: {allow: ["*"]}
    """,
    )
    result = run("resolve")
    assert result.code == 2
    assert result.err_lines[0] == (
        "error: bundlectl.yaml:5:3: agents.a: duplicate key 'a' (first defined at line 4)"
    )


def test_yaml_syntax_error(project: Path, run: Run) -> None:
    write(project / "bundlectl.yaml", "version: 1\nbundles: [basic\nagents: {}\n")
    result = run("resolve")
    assert result.code == 2
    assert result.err_lines[0].startswith("error: bundlectl.yaml:3:7: YAML syntax error:")


def test_wrong_types_and_missing_version(project: Path, run: Run) -> None:
    write(project / "bundlectl.yaml", "bundles: basic\nagents: []\n")
    result = run("resolve")
    assert result.code == 2
    errors = [line for line in result.err_lines if line.startswith("error:")]
    assert errors == [
        "error: bundlectl.yaml:1:1: version: required key is missing",
        "error: bundlectl.yaml:1:10: bundles: Input should be a valid list (got 'basic')",
        "error: bundlectl.yaml:2:9: agents: Input should be a valid dictionary",
    ]


def test_not_a_mapping_and_unreadable(project: Path, run: Run) -> None:
    write(project / "bundlectl.yaml", "- just\n- a list\n")
    result = run("resolve")
    assert (result.code, result.err_lines[0]) == (
        2,
        "error: bundlectl.yaml:1:1: a config must be a mapping of keys to values",
    )
    (project / "bundlectl.yaml").write_bytes(b"version: 1\n\xff\xfe")
    result = run("resolve")
    assert result.code == 2
    assert result.err_lines[:2] == [
        "error: bundlectl.yaml:2:1: not UTF-8: byte 0xff cannot start or continue a character",
        "  hint: save the file as UTF-8",
    ]


def test_no_config_anywhere(project: Path, run: Run) -> None:
    result = run("resolve")
    assert result.code == 2
    assert result.err_lines[0].startswith("error: no bundlectl.yaml in ")
    assert result.err_lines[1] == (
        "hint: run `bundlectl init` to create one, or pass --config PATH"
    )
    assert run("resolve", "--config", "nope.yaml").code == 2


def test_malformed_references_and_tool_schemas_fail_resolve_at_their_scalars(
    project: Path, run: Run
) -> None:
    write(
        project / "bundlectl.yaml",
        """
        version: 1
        servers:
          api:
            command: ./api
            args: ["--token=${UNTERMINATED", "${HOME}", "${PORT:-80}", "$PATH"]
            tools:
              - {name: t, input_schema: {type: 5}}
              - {name: u, input_schema: {type: object, required: [x]}}
        """,
    )
    for command in ("resolve", "lock"):
        result = run(command)
        assert result.code == 2
        assert [line for line in result.err_lines if line.startswith("error:")] == [
            "error: bundlectl.yaml:5:12: servers.api.args[0]: '${UNTERMINATED' has no closing '}' "
            "(got '--token=${UNTERMINATED')",
        ]
    text = (project / "bundlectl.yaml").read_text().replace("${UNTERMINATED", "${TOKEN}")
    (project / "bundlectl.yaml").write_text(text)
    result = run("lock")
    assert result.code == 2
    assert result.err_lines[:2] == [
        "error: bundlectl.yaml:7:40: servers.api.tools[0].input_schema.type: input_schema of tool "
        "'t' is not a valid JSON Schema: 5 is not valid under any of the given schemas",
        "  hint: copy the schema exactly as the server lists it "
        "(`bundlectl tools --live` shows it)",
    ]
    assert not (project / "bundlectl.lock").exists()


def test_a_duration_that_is_not_one_says_what_one_looks_like(project: Path, run: Run) -> None:
    """#56: "String should match pattern '^[1-9][0-9]{0,6}[smhd]$' (got '1 hour')"."""
    write(
        project / "bundlectl.yaml",
        "version: 1\npolicy: {default: deny, approvals: {ttl: 1 hour}}\n",
    )
    refused = run("resolve")
    assert refused.code == 2
    assert (
        "policy.approvals.ttl: '1 hour' is not a duration: write a whole number and a unit, s, "
        "m, h or d, such as 15m, 1h or 7d"
    ) in refused.err
    assert "should match pattern" not in refused.err


SCHEMAS = [
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    {"type": 5},
    {"items": [{"type": "string"}]},  # draft-07's tuple form: valid where no dialect is named
    {"$schema": "https://json-schema.org/draft/2020-12/schema", "items": [{"type": "string"}]},
    {"$schema": "https://json-schema.org/draft/2020-12/schema", "prefixItems": [{}]},
    {"dependencies": {"a": 5}},
    {"additionalItems": 5},  # draft-07 refuses it; 2020-12 no longer knows the keyword
    {"definitions": {"x": {"type": "nope"}}},
    {"properties": {"a": {"type": "strin"}}},
    {"required": []},
    {"exclusiveMinimum": True},
    {"$schema": "http://json-schema.org/draft-04/schema#", "exclusiveMinimum": True},
    {"$schema": "https://example.com/unknown", "type": "object"},
    {"minLength": -1},
    {"enum": []},
]


@pytest.mark.parametrize("schema", SCHEMAS, ids=[json.dumps(s) for s in SCHEMAS])
def test_a_declared_schema_is_judged_as_jsonschema_judges_it(schema: dict[str, object]) -> None:
    """The Rust validator answers "valid" first where it is installed; its yes must be
    jsonschema's (against draft-07 where the schema names no dialect)."""
    import jsonschema
    from jsonschema.validators import validator_for

    from bundlectl.config.toolschemas import _first_error

    meta = validator_for(schema, default=jsonschema.Draft7Validator)
    reference = validator_for(meta.META_SCHEMA)(meta.META_SCHEMA).is_valid(schema)
    assert (_first_error(json.dumps(schema, sort_keys=True)) is None) == reference
