"""policy check / explain / matrix and tools, through the CLI, whole lines asserted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import Run, write

CONFIG = """\
version: 1
bundles: [basic]
servers:
  gh:
    command: gh-server
    tools:
      - {name: get_issue, description: Get an issue by number, annotations: {readOnlyHint: true}}
      - {name: create_issue, description: Create a new issue in a repository}
      - {name: create_pull_request, description: Open a pull request from a branch}
      - {name: delete_repo, description: Delete a repository, annotations: {destructiveHint: true}}
agents:
  reader:
    allow: [files.read_file, files.list_directory, "gh.get_*"]
  writer:
    extends: [reader]
    allow: ["gh.*"]
    ask: [files.write_file, "gh.create_*"]
  cleaner: {deny: [gh.delete_repo]}
policy:
  default: deny
  deny: ["*.delete_*"]
"""


@pytest.fixture
def configured(project: Path, run: Run) -> Path:
    write(project / "bundlectl.yaml", CONFIG)
    return project


def test_check_lines_and_exit_codes(configured: Path, run: Run) -> None:
    result = run(
        "policy", "check", "--agent", "writer", "gh.get_issue", "gh.create_issue", "gh.delete_repo"
    )
    assert result.code == 3
    assert result.lines == [
        "allow  gh.get_issue     agents.writer.allow: gh.*           "
        "                             (bundlectl.yaml:16:13)",
        "deny   gh.create_issue  agents.writer.ask: gh.create_* (an a"
        "sk no one can confirm here)  (bundlectl.yaml:17:29)",
        "deny   gh.delete_repo   policy.deny: *.delete_*             "
        "                             (bundlectl.yaml:21:10)",
    ]
    assert "no one can confirm an ask rule here" in result.err
    ok = run("policy", "check", "-a", "writer", "gh.create_issue", "--interactive")
    assert (ok.code, ok.lines) == (
        0,
        ["ask  gh.create_issue  agents.writer.ask: gh.create_*  (bundlectl.yaml:17:29)"],
    )


def test_check_json_and_notes(configured: Path, run: Run) -> None:
    result = run(
        "policy", "check", "--agent", "nobody", "gh.get_issue", "--unlisted", "--format", "json"
    )
    assert result.code == 3
    assert json.loads(result.out)["decisions"] == [
        {
            "agent": "nobody",
            "tool": "gh.get_issue",
            "server": "gh",
            "decision": "deny",
            "rule": None,
            "source": None,
            "reason": "agent 'nobody' is not listed under agents; policy.default is deny "
            "(bundlectl.yaml:20:12)",
            "depends_on_arguments": False,
        }
    ]
    assert json.loads(result.out)["format_version"] == 1
    text = run("policy", "check", "--agent", "nobody", "gh.typo", "--unlisted")
    assert text.err_lines == [
        "note: agent 'nobody' is not listed under agents: policy.default (deny) applies",
        "note: gh.typo is not in the catalog of declared tools",
    ]
    # Without --unlisted a name that is not listed is refused: a review of a typo is no review.
    typo = run("policy", "check", "--agent", "writr", "gh.get_issue")
    assert typo.code == 2
    assert (
        typo.err_lines[0]
        == "error: agent 'writr' is not listed under agents; did you mean 'writer'?"
    )
    bad = run("policy", "check", "--agent", "reader", "no_dot")
    assert bad.code == 2
    assert bad.err_lines == [
        "error: 'no_dot' is not a qualified tool name",
        "hint: write SERVER.TOOL, for example files.read_file",
    ]
    # Beside names that are fine, a malformed one is reported with them, not instead (#56).
    mixed = run("policy", "check", "--agent", "reader", "gh.get_issue", "no_dot", "gh.typo")
    assert mixed.code == 2
    assert "gh.get_issue" in mixed.out and "gh.typo" in mixed.out
    assert "error: 'no_dot' is not a qualified tool name" in mixed.err_lines


def test_explain_names_winner_losers_chain_and_defaults(configured: Path, run: Run) -> None:
    result = run("policy", "explain", "--agent", "writer", "gh.delete_repo")
    assert result.code == 3
    assert result.lines == [
        "gh.delete_repo for agent writer: deny",
        "  server gh: bundlectl.yaml",
        "  sandbox: off ($BUNDLECTL_SANDBOX=off on this machine)",  # conftest.py; absent: on
        "  agent writer: bundlectl.yaml:15:5",
        "  decided by: policy.deny: *.delete_*  (bundlectl.yaml:21:10)",
        "  reason: denied by policy.deny: *.delete_*",
        "  other matching rules:",
        "    allow  agents.writer.allow: gh.*  (bundlectl.yaml:16:13): deny beats allow",
        "  extends: writer extends reader",
        "  policy.default: not used (the agent is listed)",
        "  policy.deny: matched *.delete_*",
        "  policy.pin_tools: off",
    ]
    ask = run("policy", "explain", "--agent", "writer", "gh.create_issue", "--interactive")
    assert ask.code == 0
    assert ask.lines[0] == "gh.create_issue for agent writer: ask"
    assert (
        "    allow  agents.writer.allow: gh.*  (bundlectl.yaml:16:13): ask beats allow" in ask.lines
    )
    data = json.loads(
        run(
            "policy", "explain", "-a", "stranger", "gh.get_issue", "--unlisted", "--format", "json"
        ).out
    )
    assert data["decision"] == "deny" and data["policy_default_used"] is True
    assert data["extends"] == [] and data["listed"] is False


def test_explain_bundle_rule_source(project: Path, run: Run) -> None:
    write(project / "bundlectl.yaml", "version: 1\nbundles: [basic]\n")
    result = run("policy", "explain", "--agent", "file-writer", "files.read_file")
    assert result.lines[1:3] == [
        "  server files: basic@1.1.0",
        "  agent file-writer: bundle basic@1.1.0",
    ]
    assert result.lines[3].startswith(
        "  decided by: agents.file-reader.allow: files.read_file  (bundle basic@1.1.0, "
    )
    assert result.lines[-4] == "  extends: file-writer extends file-reader"


def test_matrix_text_json_csv(configured: Path, run: Run) -> None:
    text = run("policy", "matrix", "-a", "reader", "-a", "writer", "-a", "cleaner")
    assert text.code == 0
    assert text.lines == [
        "TOOL                    reader  writer  cleaner",
        "files.list_directory    allow   allow   allow",
        "files.read_file         allow   allow   allow",
        "files.write_file        deny    ask     allow",
        "gh.create_issue         deny    ask     allow",
        "gh.create_pull_request  deny    ask     allow",
        "gh.delete_repo          deny    deny    deny",
        "gh.get_issue            allow   allow   allow",
    ]
    csv_out = run("policy", "matrix", "-a", "writer", "--format", "csv")
    assert csv_out.lines[:2] == ["tool,writer", "files.list_directory,allow"]
    data = json.loads(run("policy", "matrix", "--format", "json").out)
    assert data["agents"] == ["cleaner", "file-reader", "file-writer", "reader", "writer"]
    assert data["effects"]["writer"][data["tools"].index("gh.create_issue")] == "ask"
    assert run("policy", "matrix", "--format", "xml").code == 2


def test_tools_filtered_by_agent_and_detail(configured: Path, run: Run) -> None:
    assert run("tools", "--agent", "reader", "--detail", "name").lines == [
        "files.list_directory",
        "files.read_file",
        "gh.get_issue",
    ]
    summary = run("tools", "--agent", "writer", "--server", "gh")
    assert summary.lines == [
        # [destructive]: no annotation says otherwise and the name says create (as BCL204 judges)
        "gh.create_issue  [ask]  Create a new issue in a repository  [destructive]",
        "gh.create_pull_request  [ask]  Open a pull request from a branch  [destructive]",
        "gh.get_issue  Get an issue by number  [read-only]",
    ]
    full = run("tools", "--server", "gh", "--search", "get issue", "--detail", "full")
    assert full.lines[:4] == [
        "gh.get_issue  Get an issue by number  [read-only]",
        '    annotations: {"readOnlyHint": true}',
        "    input schema:",
        "      {",
    ]
    data = json.loads(run("tools", "-a", "writer", "--format", "json", "--detail", "name").out)
    assert [t["name"] for t in data["tools"]] == [
        "files.list_directory",
        "files.read_file",
        "files.write_file",
        "gh.create_issue",
        "gh.create_pull_request",
        "gh.get_issue",
    ]
    assert data["tools"][2]["decision"] == "ask"
    assert run("tools", "--server", "nope").code == 2
    assert run("tools", "--detail", "everything").code == 2


def test_search_ranks_by_relevance(configured: Path, run: Run) -> None:
    result = run("tools", "--search", "create pull request", "--detail", "name")
    assert result.lines[0] == "gh.create_pull_request"
    assert result.lines[1] == "gh.create_issue"
    assert run("tools", "--search", "zzz").lines == ["(no tools)"]


TYPO = "error: agent 'writr' is not listed under agents; did you mean 'writer'?"


@pytest.mark.parametrize(
    "args",
    [
        ["tools", "-a", "writr"],
        ["policy", "explain", "-a", "writr", "gh.get_issue"],
        ["policy", "matrix", "-a", "writer", "-a", "writr"],
        ["codegen", "-a", "writr", "--out", "gen"],
        ["export", "claude-code", "-a", "writr"],
        ["export", "gemini", "-a", "writr"],
    ],
    ids=lambda args: " ".join(args[:2]),
)
def test_a_name_not_under_agents_makes_no_artifact_and_no_review(
    configured: Path, run: Run, args: list[str]
) -> None:
    """A typo meant "no tools" (exit 0) and `export` removed the servers bundlectl manages."""
    mcp = configured / ".mcp.json"
    before = '{"mcpServers": {"keep": {"command": "x"}}}\n'
    mcp.write_text(before)
    result = run(*args)
    assert result.code == 2
    assert result.err_lines[0] == TYPO
    assert "--unlisted" in result.err_lines[1]
    assert mcp.read_text() == before
    assert not (configured / "gen").exists()
    assert not (configured / ".gemini").exists()


def test_unlisted_asks_for_what_policy_default_gives(configured: Path, run: Run) -> None:
    assert run("tools", "-a", "writr", "--unlisted").lines == ["(no tools)"]  # default: deny
    write(configured / "bundlectl.yaml", CONFIG.replace("default: deny", "default: allow"))
    listed = run("tools", "-a", "writr", "--unlisted", "--detail", "name").lines
    assert "gh.get_issue" in listed and "gh.delete_repo" not in listed  # policy.deny holds


def test_export_without_an_agent_needs_a_default_agent(configured: Path, run: Run) -> None:
    result = run("export", "claude-code")
    assert result.code == 2
    assert result.err_lines[0] == "error: agent 'default' is not listed under agents"
    assert result.err_lines[1].startswith("hint: pass --agent NAME: cleaner, file-reader")


def test_exec_says_the_agent_is_not_listed_and_keeps_spec_3(configured: Path, run: Run) -> None:
    result = run("exec", "-a", "writr", "files.read_file", "path=x")
    assert result.code == 3  # SPEC 3: an unlisted agent gets policy.default (deny here)
    assert result.err_lines[0] == (
        "note: agent 'writr' is not listed under agents: policy.default (deny) applies; "
        "did you mean 'writer'?"
    )


def test_listings_name_the_servers_whose_tools_they_cannot_list(project: Path, run: Run) -> None:
    """A server without a declared catalog has no row in the matrix and no line in `tools`:
    both say so instead of leaving it out in silence, and `tools --server` takes its name."""
    write(
        project / "bundlectl.yaml",
        CONFIG.replace("servers:\n", "servers:\n  clock: {command: clock-server}\n", 1),
    )
    said = (
        "note: server clock declares no tool catalog, so no tool of it is listed; "
        "`bundlectl tools --live --record` records what it offers"
    )
    matrix = run("policy", "matrix", "-a", "reader")
    assert matrix.code == 0 and matrix.err_lines == [said]
    assert not any(line.startswith("clock") for line in matrix.lines)
    assert run("tools").err_lines == [said]
    assert run("tools", "--agent", "reader").err_lines == []  # it may use nothing of clock
    only = run("tools", "--server", "clock")
    assert (only.code, only.lines, only.err_lines) == (0, ["(no tools)"], [said])
    typo = run("tools", "--server", "clok")
    assert typo.code == 2
    assert typo.err_lines[0] == (
        "error: no server 'clok' in the resolved configuration; did you mean 'clock'?"
    )


def test_explain_says_which_agent_a_token_stands_for_and_why(
    project: Path, run: Run, tmp_path: Path
) -> None:
    """#54 item 3: `policy explain --claims JSON` (or `--token FILE`) tries every agent's
    match: as the gateway does, says why each does or does not fit, and goes on to the tool's
    decision for the agent it maps to."""
    import base64

    write(
        project / "bundlectl.yaml",
        """
        version: 1
        bundles: [basic]
        agents:
          ci: {match: {client_id: ci-bot}, allow: [files.list_directory]}
          staff: {match: {email: "*@acme.example"}, allow: [files.read_file]}
        gateway:
          auth: {issuers: [{issuer: "https://id.acme.example", audience: [gw]}]}
        policy: {default: deny}
        """,
    )
    claims = {"sub": "ana", "email": "ana@acme.example", "email_verified": True}
    mapped = run("policy", "explain", "--claims", json.dumps(claims), "files.read_file")
    assert mapped.code == 0, mapped.err
    assert "  ci: does not fit: the token has no 'client_id' claim" in mapped.lines
    assert "  staff: fits its match: (bundlectl.yaml:5:10)" in mapped.lines
    assert "maps to agent 'staff'" in mapped.lines
    assert "files.read_file for agent staff: allow" in mapped.out
    body = base64.urlsafe_b64encode(json.dumps({**claims, "email_verified": False}).encode())
    token = tmp_path / "token.jwt"
    token.write_text("eyJhbGciOiJSUzI1NiJ9." + body.decode().rstrip("=") + ".c2ln")
    unverified = run("policy", "explain", "--token", str(token))
    assert unverified.code == 3
    assert "  staff: does not fit: its 'email' is not verified (email_verified is not true)" in (
        unverified.lines
    )
    assert "the gateway refuses it (403; gateway.auth.unmatched: refuse)" in unverified.out
    token.write_text("not-a-jwt")
    assert run("policy", "explain", "--token", str(token)).code == 2
    both = run("policy", "explain", "--agent", "ci", "--claims", "{}", "files.read_file")
    assert both.code == 2 and "the token says which agent calls" in both.err
    assert run("policy", "explain", "files.read_file").code == 2


def test_explain_says_why_a_deny_held_for_a_path_it_does_not_name(project: Path, run: Run) -> None:
    """#56: explain said a `secrets/**` deny "held" for `../x`, which it does not name: a deny
    holds for every path without a single reading, and explain says so."""
    write(
        project / "bundlectl.yaml",
        """
        version: 1
        bundles: [basic]
        agents:
          writer:
            allow: [{tool: files.write_file, args: {path: {path: "docs/**"}}}]
            deny: [{tool: files.write_file, args: {path: {path: "secrets/**"}}}]
        policy: {default: deny}
        """,
    )
    out_of_root = run("policy", "explain", "-a", "writer", "files.write_file", "--args",
                      '{"path": "../x", "content": "a"}')  # fmt: skip
    assert out_of_root.code == 3
    assert (
        "held (path '../x' climbs out of the root or has more than one meaning, and a deny "
        "holds for every such path)"
    ) in out_of_root.out
    named = run("policy", "explain", "-a", "writer", "files.write_file", "--args",
                '{"path": "secrets/k", "content": "a"}')  # fmt: skip
    assert named.out.count(": held\n") == 1 and "climbs out" not in named.out
