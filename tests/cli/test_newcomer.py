"""What a new user trips on (issue 37): each edge as a user meets it, through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import Run, write

CONFIG = """
version: 1
bundles: [basic]
agents:
  reader: {allow: [files.read_file]}
  docs:
    allow:
      - {tool: files.write_file, args: {path: {path: "docs/**"}}}
policy: {default: deny}
"""


def test_serve_refuses_an_agent_that_is_not_listed_unless_asked(project: Path, run: Run) -> None:
    """`serve --agent docbot` (a typo) served no tools, said only on stderr that clients hide."""
    write(project / "bundlectl.yaml", CONFIG)
    typo = run("serve", "--agent", "redaer")
    assert typo.code == 2
    assert "agent 'redaer' is not listed under agents; did you mean 'reader'?" in typo.err
    assert "--unlisted" in typo.err


def test_a_wrong_name_gets_one_behaviour_and_a_did_you_mean(project: Path, run: Run) -> None:
    write(project / "bundlectl.yaml", CONFIG)
    for args, said in (
        (["show", "bsic"], "no bundle named 'bsic' in any registry"),
        (["install", "githb"], "no bundle named 'githb' in any registry"),
        (["export", "claud"], "unknown client 'claud'; did you mean 'claude-code'?"),
        (["import", "claud-code", "x.json"], "unknown format 'claud-code'; did you mean"),
    ):
        result = run(*args)
        assert (result.code, said in result.err) == (2, True), (args, result.err)


def test_install_says_what_is_installed_already_and_which_agents_a_bundle_brings(
    project: Path, run: Run
) -> None:
    write(project / "bundlectl.yaml", CONFIG)
    before = (project / "bundlectl.yaml").read_text()
    again = run("install", "basic")
    assert again.code == 0 and again.lines == ["basic 1.1.0 is already installed"]
    assert (project / "bundlectl.yaml").read_text() == before
    added = run("install", "github")
    assert added.code == 0, added.err
    assert "bundle github brings agent(s) github-reader" in added.err


def test_init_inside_a_project_refuses_a_nested_one_without_force(
    project: Path, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(project / "bundlectl.yaml", CONFIG)
    sub = project / "src" / "pkg"
    sub.mkdir(parents=True)
    monkeypatch.chdir(sub)
    refused = run("init")
    assert refused.code == 2
    assert f"inside the project of {project / 'bundlectl.yaml'}" in refused.err
    assert not (sub / "bundlectl.yaml").exists()
    assert run("init", "--force").code == 0 and (sub / "bundlectl.yaml").exists()


def test_a_missing_file_is_said_with_the_root_it_was_looked_for_in(
    project: Path, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Paths are the project root's even when the command runs in a subfolder."""
    write(project / "bundlectl.yaml", CONFIG)
    (project / "sub").mkdir()
    (project / "sub" / "guide.md").write_text("g")
    monkeypatch.chdir(project / "sub")
    missing = run("exec", "-a", "reader", "files.read_file", "path=guide.md")
    assert missing.code == 1
    assert f"'guide.md' does not exist under the root folder {project.resolve()}" in missing.err


def test_policy_check_of_a_tool_allowed_for_some_arguments_needs_them(
    project: Path, run: Run
) -> None:
    """It exited 0 ("allow") without --args: a CI script took every call for allowed."""
    write(project / "bundlectl.yaml", CONFIG)
    (project / "docs").mkdir()
    bare = run("policy", "check", "--agent", "docs", "files.write_file")
    assert bare.code == 2 and "only for some arguments (path)" in bare.err
    inside = '{"path": "docs/a.md", "content": "x"}'
    assert run("policy", "check", "-a", "docs", "files.write_file", "--args", inside).code == 0
    (project / "docs" / "src").symlink_to("../src", target_is_directory=True)
    linked = '{"path": "docs/src/a.py", "content": "x"}'  # decided as the server resolves it
    assert run("policy", "check", "-a", "docs", "files.write_file", "--args", linked).code == 3


def test_a_typo_is_answered_with_the_tools_the_agent_may_call_first(
    project: Path, run: Run
) -> None:
    """exec's did-you-mean offered files.write_file to an agent that may only read."""
    write(project / "bundlectl.yaml", CONFIG)
    typo = run("exec", "-a", "reader", "files.writ_file", "path=x")
    assert typo.code == 3
    assert (
        "hint: files.writ_file is not a declared tool; did you mean files.read_file? "
        "(files.write_file is close too, but agent 'reader' may not call it)"
    ) in typo.err


def test_import_of_a_file_bundlectl_exported_imports_nothing_and_says_why(
    project: Path, run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It imported `cc: {allow: [bundlectl.*]}` (a rule for a server that does not exist, which
    lint then rejects) from Claude Code's file, and said "holds no MCP servers" for Gemini's."""
    write(project / "bundlectl.yaml", CONFIG)
    (project / "docs").mkdir()
    for client, written in (("claude-code", ".mcp.json"), ("gemini", ".gemini/settings.json")):
        assert run("export", client, "--agent", "docs", "--via", "gateway").code == 0
        other = tmp_path / f"other-{client}"
        other.mkdir()
        monkeypatch.chdir(other)
        imported = run("import", client, str(project / written))
        assert imported.code == 0, imported.err
        assert "is bundlectl's own gateway entry (`bundlectl serve --agent docs`)" in imported.err
        assert imported.err_lines[-1].startswith("nothing to import from")
        assert not (other / "bundlectl.yaml").exists()
        monkeypatch.chdir(project)


def test_export_warns_when_the_client_cannot_find_bundlectl(
    project: Path, run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A portable gateway entry runs `bundlectl` from PATH; with none there the client failed
    to start the gateway and nothing said so."""
    write(project / "bundlectl.yaml", CONFIG)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    portable = run("export", "claude-code", "--agent", "docs", "--via", "gateway")
    assert portable.code == 0
    assert "warning: no `bundlectl` is on PATH" in portable.err and "--absolute" in portable.err
    pinned = run("export", "claude-code", "--agent", "docs", "--via", "gateway", "--absolute")
    assert pinned.code == 0 and "warning" not in pinned.err
    entry = json.loads((project / ".mcp.json").read_text())["mcpServers"]["bundlectl"]
    assert Path(entry["command"]).is_absolute() or entry["args"][:2] == ["-m", "bundlectl"]


def test_install_of_a_version_that_does_not_exist_blames_the_argument(
    project: Path, run: Run
) -> None:
    """`install 'github>=5'` said the constraint was required by bundlectl.yaml (exit 1)."""
    write(project / "bundlectl.yaml", CONFIG)
    before = (project / "bundlectl.yaml").read_text()
    refused = run("install", "github>=5")
    assert refused.code == 2
    assert "no version of 'github' satisfies 'github>=5' (from the command line)" in refused.err
    assert (project / "bundlectl.yaml").read_text() == before


def test_export_reports_in_json_too(project: Path, run: Run) -> None:
    """`--format json` on every command that prints a result: export had none."""
    write(project / "bundlectl.yaml", CONFIG)
    wrote = run("export", "claude-code", "--agent", "docs", "--format", "json")
    assert wrote.code == 0, wrote.err
    data = json.loads(wrote.out)
    assert (data["client"], data["agent"], data["via"]) == ("claude-code", "docs", "gateway")
    assert data["files"] == [".mcp.json", ".claude/settings.json"]
    assert data["not_exact"][0]["why"] == "no client file can express a rule's argument conditions"
    checked = run("export", "claude-code", "--agent", "docs", "--check", "--format", "json")
    assert json.loads(checked.out)["up_to_date"] is True
