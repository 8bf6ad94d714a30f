"""Argument conditions on rules (SPEC 10) through the front doors: exec, serve, export, lock."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bundlectl.policy.conditions import MISSING, ConditionError, compile_matcher, normalised
from tests.conftest import Run, audit_records, write

DOCS_ONLY = """
version: 1
bundles: [basic]
agents:
  docs:
    allow:
      - files.read_file
      - {tool: files.write_file, args: {path: {path: "docs/**"}}}
policy: {default: deny}
"""


@pytest.fixture
def docs_project(project: Path, run: Run) -> Path:
    write(project / "bundlectl.yaml", DOCS_ONLY)
    (project / "docs").mkdir()
    assert run("lock").code == 0
    return project


def test_exec_decides_on_the_arguments(docs_project: Path, run: Run) -> None:
    inside = run("exec", "-a", "docs", "files.write_file", "path=docs/a.md", "content=hi")
    assert inside.code == 0, inside.err
    assert (docs_project / "docs" / "a.md").read_text() == "hi"
    escape = run(
        "exec", "-a", "docs", "files.write_file", "path=docs/../.github/ci.yml", "content=x"
    )
    assert escape.code == 3
    assert 'agents.docs.allow: files.write_file (bundlectl.yaml:7:9): path {"path": "docs/**"}' in (
        escape.err
    )
    assert not (docs_project / ".github").exists()


def test_serve_decides_on_the_arguments(docs_project: Path) -> None:
    from tests.gateway.test_gateway_inprocess import serve_in_process, texts

    async def script(client: Any) -> list[Any]:
        return [
            await client.call_tool("files__write_file", {"path": "docs/b.md", "content": "ok"}),
            await client.call_tool("files__write_file", {"path": "/etc/x", "content": "no"}),
        ]

    inside, outside = serve_in_process(docs_project, "docs", script)
    assert not inside.is_error and (docs_project / "docs" / "b.md").read_text() == "ok"
    # the tool is listed: the model is told its arguments were refused and what its rule
    # allows (it said "unknown tool"), never the rule's file or the value it sent
    assert outside.is_error and texts(outside) == [
        "files__write_file: these arguments are refused by the policy, which allows this tool "
        'only with: path {"path": "docs/**"}; the call was not made'
    ]

    async def search(client: Any) -> Any:
        found = await client.call_tool("search_tools", {"query": "write", "detail": "summary"})
        return json.loads(texts(found)[0])["tools"]

    (found,) = [
        t
        for t in serve_in_process(docs_project, "docs", search, "search")
        if t["name"] == "files.write_file"
    ]
    assert found["conditions"] == ['allow if path {"path": "docs/**"}']  # the model is told


def test_export_refuses_a_conditional_rule_and_auto_takes_the_gateway(
    docs_project: Path, run: Run
) -> None:
    direct = run("export", "claude-code", "-a", "docs", "--via", "direct")
    assert direct.code == 1
    assert "no client file can express a rule's argument conditions" in direct.err
    auto = run("export", "claude-code", "-a", "docs")
    assert auto.code == 0 and "gateway: bundlectl serve --agent docs" in auto.err


def test_the_policy_digest_covers_conditions(docs_project: Path, run: Run) -> None:
    assert run("lock", "--check").code == 0
    config = docs_project / "bundlectl.yaml"
    config.write_text(config.read_text().replace('"docs/**"', '"**"'))
    stale = run("lock", "--check")
    assert stale.code == 1 and "policy changed: agents docs" in stale.err


def test_a_bad_condition_is_a_load_error_with_its_position(project: Path, run: Run) -> None:
    write(
        project / "bundlectl.yaml",
        """
        version: 1
        bundles: [basic]
        agents:
          a:
            allow:
              - {tool: files.write_file, args: {path: {re: "docs/(["}}}
              - {tool: files.read_file, when: 'args.path.startsWith('}
        """,
    )
    result = run("resolve")
    assert result.code == 2
    assert "bundlectl.yaml:6:9: agents.a.allow[0]: args.path: the regular expression" in result.err
    assert "bundlectl.yaml:7:9: agents.a.allow[1]: when: " in result.err
    assert "Syntax error" in result.err and "valid string" not in result.err


@pytest.mark.parametrize(
    ("raw", "value", "strict", "holds"),
    [
        ("release/*", "release/1.2", False, True),
        (["main", "release/*"], "feat/x", False, False),
        ({"re": "v[0-9]+"}, "v12", False, True),
        ({"re": "v[0-9]+"}, "v12x", False, False),
        ({"min": 1, "max": 10}, 10, False, True),
        ({"min": 1, "max": 10}, True, False, False),  # a boolean is not a number
        ({"path": "docs/**"}, "/docs/a", True, True),  # an absolute path always matches a deny
        ({"not": "main"}, "dev", False, True),
        (True, 1, False, False),  # true is not 1
        (["main", {"present": False}], MISSING, True, True),  # a missing value, named as one
        (["main", "dev"], MISSING, True, False),
    ],
)
def test_matchers(raw: Any, value: Any, strict: bool, holds: bool) -> None:
    assert compile_matcher(raw).holds(value, strict) is holds, repr(raw)


def test_lint_flags_an_unknown_argument_and_a_deny_a_call_escapes_by_omitting_it(
    project: Path, run: Run
) -> None:
    """BCL211: `pth` is no argument of write_file (did you mean 'path'?); BCL212: a deny on an
    optional argument without a default lets a call that omits it through — and no longer
    once `{present: false}` is an alternative."""
    write(
        project / "bundlectl.yaml",
        """
        version: 1
        servers:
          git:
            command: git-mcp
            tools:
              - name: git_push
                input_schema:
                  type: object
                  properties: {branch: {type: string}, force: {type: boolean, default: false}}
        bundles: [basic]
        agents:
          dev:
            allow:
              - git.git_push
              - {tool: files.write_file, args: {pth: {path: "docs/**"}}}
            deny:
              - {tool: git.git_push, args: {branch: [main]}}
              - {tool: git.git_push, args: {force: true}}
              - {tool: git.git_push, args: {force: {min: 1}}}
        policy: {default: deny}
        """,
    )
    assert run("lock").code == 0
    found = run("lint", "--format", "json")
    findings = {(f["rule"], f["line"]): f["message"] for f in json.loads(found.out)["findings"]}
    assert "did you mean 'path'?" in findings[("BCL211", 15)]
    assert "a call that omits it is not denied" in findings[("BCL212", 17)]
    assert ("BCL212", 18) not in findings  # force has a default: an omitted one is false
    # a range cannot judge a boolean, so as a deny it holds for every call (SPEC 10) ...
    assert "as a deny it holds for every call" in findings[("BCL213", 19)]
    # ... which covers `force: true` (18); two denies with different conditions (branch, force)
    # do not cover each other (BCL202 said they did)
    assert [key for key in findings if key[0] in ("BCL201", "BCL202")] == [("BCL202", 18)]
    fixed = (
        (project / "bundlectl.yaml")
        .read_text()
        .replace("{branch: [main]}", "{branch: [main, {present: false}]}")
    )
    (project / "bundlectl.yaml").write_text(fixed)
    assert run("lock").code == 0
    again = json.loads(run("lint", "--format", "json").out)["findings"]
    assert not [f for f in again if f["rule"] == "BCL212"]
    blocked = run("policy", "check", "-a", "dev", "git.git_push", "--args", "{}")
    assert blocked.code == 3  # a push that names no branch is denied now


def test_lint_finds_what_a_conditional_rule_provably_adds_nothing_to(
    project: Path, run: Run
) -> None:
    """A rule with conditions is dead when a deny whose conditions follow from its own covers
    it, and covered when a rule of its effect has weaker conditions (an alternative list that
    holds for each of its values); a rule that is an agent's only grant says what removing it
    would open."""
    write(
        project / "bundlectl.yaml",
        """
        version: 1
        bundles: [basic]
        agents:
          dev:
            allow:
              - {tool: files.write_file, args: {path: "docs/a.md"}}
              - {tool: "files.*", args: {path: ["docs/a.md", "docs/b.md"]}}
              - {tool: files.read_file, args: {path: {path: "src/**"}}}
            deny:
              - {tool: "files.*_file", args: {path: {path: "src/**"}}}
          closed:
            ask: [files.write_file]
            deny: [files.write_file]
        policy: {default: deny}
        """,
    )
    assert run("lock").code == 0
    found = json.loads(run("lint", "--format", "json").out)["findings"]
    by_line = {(f["rule"], f["line"]): f for f in found if f["rule"] in ("BCL201", "BCL202")}
    assert "covered by 'files.*'" in by_line[("BCL202", 6)]["message"]
    assert "denied anyway" in by_line[("BCL201", 8)]["message"]
    sole = by_line[("BCL201", 12)]
    assert "the only allow/ask rule of 'closed'" in sole["message"]
    assert sole["hint"].startswith("keep it")
    assert len(by_line) == 3  # the deny and the wider allow are needed


def test_lint_tries_each_when_on_arguments_of_the_declared_types(project: Path, run: Run) -> None:
    write(
        project / "bundlectl.yaml",
        """
        version: 1
        servers:
          git:
            command: git-mcp
            tools:
              - name: git_push
                input_schema:
                  type: object
                  properties:
                    branch: {type: string}
                    force: {type: boolean, default: false}
                    n: {type: integer}
                    opts: {type: object}
        agents:
          dev:
            allow:
              - {tool: git.git_push, when: 'args.n > "3"'}
              - {tool: git.git_push, when: 'args.branch.startsWith(1)'}
              - {tool: git.git_push, when: 'args.brnch == "main"'}
              - {tool: git.git_push, when: 'args.branch.matches("(")'}
              - {tool: git.git_push, when: 'args.opts.k == 1 || int(args.branch) > 1'}
              - {tool: git.git_push, when: 'args.branch.startsWith("feat/") && !args.force'}
        policy: {default: deny}
        """,
    )
    found = run("lint", "--format", "json", "--select", "BCL214")
    findings = {f["line"]: f for f in json.loads(found.out)["findings"]}
    assert found.code == 1  # errors
    assert "No such overload" in findings[17]["message"]
    assert "'startsWith'" in findings[18]["message"]
    assert "args.brnch is not an argument of the tool" in findings[19]["message"]
    assert "not a valid regex" in findings[20]["message"]
    assert set(findings) == {17, 18, 19, 20}  # a nested key, a value's error: not types


def test_paths_are_normalised_lexically() -> None:
    assert normalised("./docs/sub/../a.md") == "docs/a.md"
    assert normalised("docs/../../x") is None and normalised("C:\\x") is None
    with pytest.raises(ConditionError, match="one key"):
        compile_matcher({"glob": "a", "re": "b"})


def test_policy_check_and_explain_decide_a_call_with_args(
    docs_project: Path, run: Run, tmp_path: Path
) -> None:
    """Without --args they say which arguments the decision depends on; with them, each
    rule's condition is checked (from a file too) and the exit code is the call's."""
    plain = run("policy", "check", "-a", "docs", "files.write_file")
    assert plain.code == 2  # "allow" would mislead: it depends on the arguments
    assert "only for some arguments (path)" in plain.err

    inside = run(
        "policy", "check", "-a", "docs", "files.write_file", "--args", '{"path": "docs/a.md"}'
    )
    assert (inside.code, inside.out.split()[0]) == (0, "allow")
    assert "depends on" not in inside.out
    call = tmp_path / "call.json"
    call.write_text('{"path": "docs/../.github/ci.yml", "content": "x"}')
    outside = run("policy", "check", "-a", "docs", "files.write_file", "--args", f"@{call}")
    assert (outside.code, outside.out.split()[0]) == (3, "deny")
    assert 'path {"path": "docs/**"} does not hold' in outside.out

    explained = run("policy", "explain", "-a", "docs", "files.write_file")
    assert "for a call whose arguments meet the conditions below" in explained.out
    assert "depends on the arguments: path (give --args" in explained.out
    held = run(
        "policy", "explain", "-a", "docs", "files.write_file", "--args", '{"path": "docs/x"}'
    )
    assert 'files.write_file if path {"path": "docs/**"}  (bundlectl.yaml:7:9): held' in held.out
    as_json = run(
        "policy",
        "explain",
        "-a",
        "docs",
        "files.write_file",
        "--args",
        '{"path": "/etc/passwd"}',
        "--format",
        "json",
    )
    (condition,) = json.loads(as_json.out)["conditions"]
    assert condition["held"] is False
    assert condition["failed"] == 'path {"path": "docs/**"}'
    assert "/etc/passwd" not in as_json.out  # a decision names the condition, never the value

    broken = run("policy", "check", "-a", "docs", "files.write_file", "--args", '{"path": ')
    assert broken.code == 2 and "--args:1:10: invalid JSON" in broken.err


def test_the_audit_record_names_the_condition_never_the_value(
    docs_project: Path, run: Run, isolated_home: Path
) -> None:
    assert run("exec", "-a", "docs", "files.write_file", "path=docs/a.md", "content=ok").code == 0
    refused = run("exec", "-a", "docs", "files.write_file", "path=secret-place.txt", "content=x")
    assert refused.code == 3
    log = (isolated_home / "state" / "audit.jsonl").read_text()
    allowed, denied = audit_records(isolated_home / "state" / "audit.jsonl")
    assert allowed["rule_condition"] == 'path {"path": "docs/**"}'
    assert "conditions_failed" not in allowed
    assert denied["decision"] == "deny"
    rule = "agents.docs.allow: files.write_file (bundlectl.yaml:7:9)"
    assert denied["conditions_failed"] == [f'{rule}: path {{"path": "docs/**"}} does not hold']
    assert "secret-place" not in log and "docs/a.md" not in log


def test_policy_tests_check_calls_with_arguments(docs_project: Path, run: Run) -> None:
    """`tests:` entries may be calls ({tool, args}): lint decides them with their arguments,
    and says which call broke the expectation."""
    config = docs_project / "bundlectl.yaml"
    config.write_text(
        config.read_text()
        + """tests:
  - agent: docs
    allow: [files.read_file, {tool: files.write_file, args: {path: docs/a.md}}]
    deny:
      - {tool: files.write_file, args: {path: docs/../.github/ci.yml}}
      - {tool: files.write_file, args: {path: src/main.py}}
"""
    )
    assert run("lock").code == 0
    assert not [
        f
        for f in json.loads(run("lint", "--format", "json").out)["findings"]
        if f["rule"] == "BCL209"
    ]
    config.write_text(config.read_text().replace("path: src/main.py", "path: docs/main.py"))
    assert run("lock").code == 0
    (broken,) = [
        f
        for f in json.loads(run("lint", "--format", "json").out)["findings"]
        if f["rule"] == "BCL209"
    ]
    call = 'files.write_file with {"path": "docs/main.py"}'
    assert broken["message"].startswith(f"expected deny for agent 'docs' on {call}, got allow")
    assert broken["line"] == 14  # the entry that broke it


def test_the_matrix_marks_what_depends_on_the_arguments(docs_project: Path, run: Run) -> None:
    text = run("policy", "matrix", "--agent", "docs")
    rows = {line.split()[0]: line.split()[1:] for line in text.out.splitlines()[1:]}
    assert rows["files.write_file"] == ["allow?"] and rows["files.read_file"] == ["allow"]
    assert "?: the decision depends on the call's arguments" in text.out
    data = json.loads(run("policy", "matrix", "--agent", "docs", "--format", "json").out)
    assert data["conditional"] == {"docs": ["files.write_file"]}
    csv = run("policy", "matrix", "--agent", "docs", "--format", "csv").out
    assert "files.write_file,allow?" in csv


def test_tools_shows_the_conditions_of_an_agents_tools(docs_project: Path, run: Run) -> None:
    text = run("tools", "-a", "docs", "--detail", "name")
    assert text.out.splitlines() == [
        "files.read_file",
        'files.write_file  [allow if path {"path": "docs/**"}]',
    ]
    data = json.loads(run("tools", "-a", "docs", "--format", "json").out)
    (write_file,) = [t for t in data["tools"] if t["tool"] == "write_file"]
    assert write_file["conditions"] == [
        {"effect": "allow", "if": 'path {"path": "docs/**"}', "source": "bundlectl.yaml:7:9"}
    ]


def test_codegen_tells_the_code_which_calls_pass(docs_project: Path, run: Run) -> None:
    assert run("codegen", "-a", "docs", "--out", "gen").code == 0
    module = (docs_project / "gen" / "servers" / "files" / "write_file.py").read_text()
    said = " ".join(module.split())  # the docstring is wrapped
    assert """Policy of agent 'docs' on the arguments: allow if path {"path": "docs/**"}.""" in said
    read = (docs_project / "gen" / "servers" / "files" / "read_file.py").read_text()
    assert "Policy of agent" not in read  # no conditions, nothing said


def test_resolve_shows_conditional_rules_in_policy_deny_and_agents(
    project: Path, run: Run, isolated_home: Path
) -> None:
    """`resolve` died (exit 70, a TypeError) on a `policy.deny` rule with conditions."""
    write(
        project / "bundlectl.yaml",
        """
        version: 1
        bundles: [basic]
        agents:
          docs: {allow: [{tool: files.write_file, args: {path: {path: "docs/**"}}}]}
        policy:
          default: deny
          deny: [{tool: files.write_file, args: {path: {path: "secrets/**"}}}]
        """,
    )
    shown = run("resolve")
    assert shown.code == 0, shown.err
    assert 'deny files.write_file if {"args": {"path": {"path": "secrets/**"}}}' in shown.out
    assert 'allow  files.write_file if path {"path": "docs/**"}  (bundlectl.yaml:4:' in shown.out
    assert run("resolve", "--format", "json").code == 0
    write(
        isolated_home / "config" / "bundlectl.yaml",
        """
        version: 1
        policy: {deny: [{tool: files.read_file, args: {path: {path: ".env"}}}]}
        """,
    )
    with_user = run("resolve")
    assert with_user.code == 0, with_user.err
    assert 'files.read_file if {"args": {"path": {"path": ".env"}}}' in with_user.out
