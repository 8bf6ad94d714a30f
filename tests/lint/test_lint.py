"""bundlectl lint: formats, exit codes, fingerprints, the project's own examples, pre-commit."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bundlectl.errors import Problem
from bundlectl.lint.formats import github
from bundlectl.lint.rules import RULES, Finding
from tests.conftest import REPO, Run, write

SARIF_SCHEMA = Path(__file__).parents[1] / "data" / "sarif-2.1.0-rtm.5.json"

CONFIG = """\
version: 1
bundles: [basic]
agents:
  risky: {allow: ["files.*"]}
  typo: {allow: [files.raed_file]}
policy: {default: deny, deny: ["*.delete_*"]}
"""


@pytest.fixture
def linted(project: Path, run: Run) -> Path:
    write(project / "bundlectl.yaml", CONFIG)
    assert run("lock").code == 0
    return project


def test_every_rule_is_documented() -> None:
    assert len(RULES) >= 26
    for rule in RULES.values():
        assert rule.id.startswith("BCL") and len(rule.id) == 6
        assert rule.name == rule.name.lower() and " " not in rule.name
        assert rule.rationale and rule.hint and rule.severity in ("error", "warning", "info")


def test_text_is_sorted_with_a_summary(linted: Path, run: Run) -> None:
    result = run("lint")
    assert result.code == 0  # warnings and info only; default fail level is error
    assert result.lines == [
        "bundlectl.yaml:4:19: BCL204 warning wildcard 'files.*' allows destructive tools "
        "without asking: files.write_file (agents.risky.allow[0])",
        "  hint: Allow the destructive tools explicitly, or list them under ask or deny.",
        "bundlectl.yaml:4:19: BCL207 info 'files.*' will also grant tools its servers add later "
        "(agents.risky.allow[0])",
        result.lines[3],  # BCL207's hint
        "bundlectl.yaml:5:3: BCL203 warning agent 'typo' can call no tool (agents.typo)",
        "  hint: Add allow rules, or remove the agent.",
        "bundlectl.yaml:5:18: BCL105 warning rule 'files.raed_file' matches no known tool "
        "(agents.typo.allow[0])",
        "  hint: did you mean files.read_file?",  # the text output shows each finding's hint
        "0 errors, 3 warnings, 1 info in 1 file",
    ]
    assert result.lines[3].startswith("  hint: ")


def test_fail_level_exit_zero_select_ignore(linted: Path, run: Run) -> None:
    assert run("lint", "--fail-level", "warning").code == 1
    assert run("lint", "--fail-level", "info", "--exit-zero").code == 0
    only = run("lint", "--select", "BCL105", "--ignore", "BCL1")
    assert only.lines == ["no problems found"]
    selected = run("lint", "--select", "BCL2").lines[:-1]
    assert [line.split()[1] for line in selected if not line.startswith("  hint:")] == [
        "BCL204",
        "BCL207",
        "BCL203",
    ]


def test_lint_usage_errors_exit_2(linted: Path, run: Run, tmp_path: Path) -> None:
    assert run("lint", "--format", "xml").code == 2
    assert run("lint", "--fail-level", "fatal").code == 2
    bad = run("lint", "--select", "XYZ1")
    assert (bad.code, bad.err_lines[0]) == (2, "error: no lint rule matches 'XYZ1'")
    missing = run("lint", str(tmp_path / "nope.yaml"))
    assert missing.code == 2
    assert missing.err_lines[0] == f"error: {tmp_path / 'nope.yaml'}: no such file or folder"


def test_json_format(linted: Path, run: Run) -> None:
    data = json.loads(run("lint", "--format", "json").out)
    assert data["version"] == 1
    assert data["summary"] == {"warning": 3, "info": 1}
    first = data["findings"][0]
    assert {
        k: first[k]
        for k in (
            "rule",
            "name",
            "severity",
            "file",
            "line",
            "column",
            "end_line",
            "end_column",
            "yaml_path",
        )
    } == {
        "rule": "BCL204",
        "name": "broad-destructive-allow",
        "severity": "warning",
        "file": "bundlectl.yaml",
        "line": 4,
        "column": 19,
        "end_line": 4,
        "end_column": 28,
        "yaml_path": "agents.risky.allow[0]",
    }
    assert len(first["fingerprint"]) == 32 and first["hint"]


def test_sarif_is_valid_2_1_0(linted: Path, run: Run, tmp_path: Path) -> None:
    from jsonschema import Draft7Validator

    out = tmp_path / "lint.sarif"
    assert run("lint", "--format", "sarif", "--output", str(out)).code == 0
    log = json.loads(out.read_text())
    schema = json.loads(SARIF_SCHEMA.read_text())
    errors = list(Draft7Validator(schema).iter_errors(log))
    assert errors == []
    run_ = log["runs"][0]
    rules = {r["id"]: r for r in run_["tool"]["driver"]["rules"]}
    assert rules["BCL204"]["properties"]["security-severity"] == "7.0"
    assert "security-severity" not in rules["BCL207"]["properties"]
    result = run_["results"][0]
    assert result["ruleId"] == "BCL204" and result["level"] == "warning"
    assert result["locations"][0]["physicalLocation"]["region"] == {
        "startLine": 4,
        "startColumn": 19,
        "endLine": 4,
        "endColumn": 28,
    }
    assert set(result["partialFingerprints"]) == {"bundlectlFingerprint/v1"}


def test_fingerprints_survive_unrelated_line_moves(linted: Path, run: Run) -> None:
    before = {
        f["rule"]: f["fingerprint"]
        for f in json.loads(run("lint", "--format", "json").out)["findings"]
    }
    text = (linted / "bundlectl.yaml").read_text()
    (linted / "bundlectl.yaml").write_text("# a new comment\n\n" + text)
    after = json.loads(run("lint", "--format", "json").out)["findings"]
    assert {f["rule"]: f["fingerprint"] for f in after} == before
    assert after[0]["line"] == 6


def test_github_annotations_escape_properly() -> None:
    where = Problem("dir,a/b:c.yaml", 3, 4, "50% done,\nnext: line", "x", end_line=3, end_column=9)
    finding = Finding("BCL301", where, "error")
    assert github([finding]) == (
        "::error file=dir%2Ca/b%3Ac.yaml,line=3,col=4,endLine=3,endColumn=9,"
        "title=BCL301 plaintext-secret::50%25 done,%0Anext: line\n"
    )


def test_github_format_through_the_cli(linted: Path, run: Run) -> None:
    lines = run("lint", "--format", "github").lines
    assert lines[0] == (
        "::warning file=bundlectl.yaml,line=4,col=19,endLine=4,endColumn=28,"
        "title=BCL204 broad-destructive-allow::wildcard 'files.*' allows "
        "destructive tools without asking: files.write_file"
    )
    assert lines[1].startswith("::notice file=bundlectl.yaml,line=4,col=19,")


def test_manifests_and_registry_folders(project: Path, run: Run) -> None:
    write(
        project / "reg" / "mine" / "1.0.0.yaml",
        """
        name: mine
        version: 1.0.0
        requires: [nothere]
        servers:
          s:
            command: npx
            args: [-y, unpinned-server]
            env: {TOKEN: ghp_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5}
    """,
    )
    result = run("lint", str(project / "reg"))
    rules = [line.split()[1] for line in result.lines[:-1] if not line.startswith("  hint:")]
    assert rules == ["BCL401", "BCL301"]
    assert result.code == 1
    assert "ghp_" not in result.out
    single = run("lint", str(project / "reg" / "mine" / "1.0.0.yaml"), "--format", "json")
    assert len(json.loads(single.out)["findings"]) == 2


@pytest.mark.parametrize("example", ["minimal", "team"])
def test_the_projects_own_examples_lint_clean(example: str, project: Path, run: Run) -> None:
    for name in ("bundlectl.yaml", "bundlectl.lock"):
        shutil.copy(REPO / "examples" / example / name, project / name)
    assert run("lock", "--check").code == 0  # the committed lock is what bundlectl writes
    result = run("lint", "--fail-level", "info")
    assert (result.code, result.lines) == (0, ["no problems found"])


def test_builtin_manifests_lint_without_errors(run: Run) -> None:
    result = run("lint", str(REPO / "registry"))
    assert " error " not in result.out, result.out
