"""`bundlectl export CLIENT` and `bundlectl import FORMAT FILE` (SPEC 8): every client's file
written and read, merged in place, secrets kept as references, exactness enforced, and the round
trip import(export(project)) giving the same policy matrix."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bundlectl.clients import NAMES, jsonc
from tests.conftest import TEST_SERVERS, Run, load_yaml, write

SECRET = "ghp_" + "S3cr3tV4lue" * 3  # a value that must never reach a written file


@pytest.fixture
def exported(project: Path, run: Run, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GITHUB_TOKEN", SECRET)
    write(
        project / "bundlectl.yaml",
        """
        version: 1
        bundles: [basic, github]
        agents:
          reader:  # asks before writing; no GitHub writes
            allow: [files.read_file, files.list_directory, "github.*"]
            ask: [files.write_file]
            deny: [github.create_issue, github.push_files]
          whole:
            allow: ["files.*"]
          gh:
            allow: ["github.*"]
        policy: {default: deny}
        """,
    )
    # The lock is made by `bundlectl lock` once a process and copied into each later project:
    # it depends on the file and the registry alone (~0.25 s a test, some 40 tests).
    lock = project / "bundlectl.lock"
    if _LOCKED:
        lock.write_bytes(_LOCKED[0])
    else:
        assert run("lock").code == 0
        _LOCKED.append(lock.read_bytes())
    return project


_LOCKED: list[bytes] = []


def read_json(path: Path) -> Any:
    return jsonc.parse(path.read_text(), str(path)).value


def written_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and "home" not in p.parts]


@pytest.mark.parametrize("client", [c for c in NAMES if c != "claude-desktop"])
def test_every_client_gets_the_gateway_entry_and_no_secret(
    exported: Path, run: Run, client: str
) -> None:
    result = run("export", client, "--agent", "reader", "--via", "gateway")
    assert result.code == 0, result.err
    assert "gateway: bundlectl serve --agent reader" in result.err
    for path in written_files(exported):
        assert SECRET not in path.read_text()
    again = run("export", client, "--agent", "reader", "--via", "gateway", "--check")
    assert again.code == 0 and "is up to date" in again.err


def test_claude_code_direct_maps_allow_ask_deny_exactly(exported: Path, run: Run) -> None:
    result = run("export", "claude-code", "--agent", "reader", "--via", "direct")
    assert result.code == 0, result.err
    servers = read_json(exported / ".mcp.json")["mcpServers"]
    assert set(servers) == {"files", "github"}
    assert servers["github"]["env"] == {"GITHUB_PERSONAL_ACCESS_TOKEN": "${GITHUB_TOKEN}"}
    perms = read_json(exported / ".claude" / "settings.json")["permissions"]
    assert "mcp__files__read_file" in perms["allow"] and "mcp__github__get_me" in perms["allow"]
    assert perms["ask"] == ["mcp__files__write_file"]
    assert "mcp__github__create_issue" in perms["deny"]
    assert not any(SECRET in p.read_text() for p in written_files(exported))
    # Copilot CLI reads .mcp.json too, and not Claude Code's settings: its own allowlist
    assert servers["files"]["tools"] == ["read_file", "list_directory", "write_file"]
    assert "get_me" in servers["github"]["tools"]
    assert "create_issue" not in servers["github"]["tools"]


def test_qwen_opencode_and_copilot_are_written_and_read_back(exported: Path, run: Run) -> None:
    """Qwen Code in Gemini's format under .qwen/, opencode in Kilo's (whole servers only),
    Copilot CLI with its `tools` allowlist; each file imported back gives the same rules."""
    assert run("export", "qwen", "--agent", "whole", "--via", "direct").code == 0
    qwen = read_json(exported / ".qwen" / "settings.json")["mcpServers"]["files"]
    assert qwen["trust"] is True and qwen["command"] == "bundlectl"
    assert run("export", "opencode", "--agent", "whole", "--via", "direct").code == 0
    assert read_json(exported / "opencode.json")["mcp"] == {
        "files": {"type": "local", "command": ["bundlectl", "server", "files"], "enabled": True}
    }
    narrow = run("export", "opencode", "--agent", "reader", "--via", "direct")
    assert narrow.code == 1 and "opencode is given whole servers only" in narrow.err

    copilot = run("export", "copilot", "--agent", "reader", "--via", "direct")
    assert copilot.code == 0, copilot.err
    assert "note: Copilot CLI reads .mcp.json" not in copilot.err  # no .mcp.json here
    entries = read_json(exported / ".github" / "mcp.json")["mcpServers"]
    assert entries["files"] == {
        "type": "local",
        "command": "bundlectl",
        "args": ["server", "files"],
        "tools": ["read_file", "list_directory", "write_file"],
    }
    assert "create_issue" not in entries["github"]["tools"]
    assert run("export", "claude-code", "--agent", "reader", "--via", "direct").code == 0
    again = run("export", "copilot", "--agent", "whole", "--via", "direct")
    assert "note: Copilot CLI reads .mcp.json instead of .github/mcp.json" in again.err

    back = exported / "back"
    for client, source, rules in [
        ("qwen", ".qwen/settings.json", {"allow": ["files.*"]}),
        ("opencode", "opencode.json", {}),  # asked about: no catalog here, a note says so
        ("copilot", ".github/mcp.json", {"ask": ["files.*"]}),
    ]:
        config = back / client / "bundlectl.yaml"
        config.parent.mkdir(parents=True)
        done = run("import", client, str(exported / source), "-c", str(config))
        assert done.code == 0, done.err
        assert load_yaml(config)["agents"][client] == rules, client


def test_a_rule_the_client_cannot_express_fails_direct_and_auto_takes_the_gateway(
    exported: Path, run: Run
) -> None:
    direct = run("export", "cursor", "--agent", "reader", "--via", "direct")
    assert direct.code == 1
    assert "Cursor cannot express the policy of agent 'reader' exactly" in direct.err
    assert "files.write_file: agents.reader.ask: files.write_file (bundlectl.yaml:" in direct.err
    assert "hint: bundlectl export cursor --agent reader --via gateway" in direct.err
    assert not (exported / ".cursor").exists()
    auto = run("export", "cursor", "--agent", "reader")
    assert auto.code == 0
    said = auto.err_lines  # why, one reason a line, each naming the rule
    assert said[:2] == [
        "wrote .cursor/mcp.json (gateway: bundlectl serve --agent reader)",
        "direct would not be exact:",
    ]
    assert said[2].startswith("  files.write_file: agents.reader.ask: files.write_file (")
    entry = read_json(exported / ".cursor" / "mcp.json")["mcpServers"]["bundlectl"]
    assert entry == {"command": "bundlectl", "args": ["serve", "--agent", "reader"]}


def test_a_whole_server_exports_directly_where_the_client_has_no_filter(
    exported: Path, run: Run
) -> None:
    result = run("export", "cursor", "--agent", "whole")
    assert result.code == 0 and "direct: 1 server(s)" in result.err
    assert list(read_json(exported / ".cursor" / "mcp.json")["mcpServers"]) == ["files"]
    gh = run("export", "vscode", "--agent", "gh", "--via", "direct")
    assert gh.code == 0, gh.err
    data = read_json(exported / ".vscode" / "mcp.json")
    env = data["servers"]["github"]["env"]
    assert env == {"GITHUB_PERSONAL_ACCESS_TOKEN": "${input:GITHUB_TOKEN}"}  # a secret: asked
    assert data["inputs"] == [
        {
            "type": "promptString",
            "id": "GITHUB_TOKEN",
            "description": "GITHUB_TOKEN",
            "password": True,
        }
    ]
    assert data["servers"]["github"]["type"] == "stdio"


def test_roo_kilo_codex_gemini_filters(exported: Path, run: Run) -> None:
    assert run("export", "roo", "--agent", "reader", "--via", "direct").code == 0
    files = read_json(exported / ".roo" / "mcp.json")["mcpServers"]["files"]
    assert files["alwaysAllow"] == ["read_file", "list_directory"]
    assert "disabledTools" not in files  # write_file: asked (in neither list)
    github = read_json(exported / ".roo" / "mcp.json")["mcpServers"]["github"]
    assert "create_issue" in github["disabledTools"]
    assert github["env"] == {"GITHUB_PERSONAL_ACCESS_TOKEN": "${env:GITHUB_TOKEN}"}
    # Kilo CLI ignores the legacy .kilocode/mcp.json filters (#22 item 1): whole servers only,
    # in its own kilo.json; anything narrower goes through the gateway.
    kilo = run("export", "kilo", "--agent", "reader", "--via", "direct")
    assert kilo.code == 1 and "files: files.write_file: agents.reader.ask" in kilo.err, kilo.err
    assert not (exported / "kilo.json").exists() and not (exported / ".kilocode").exists()
    assert run("export", "kilo", "--agent", "reader").code == 0
    assert read_json(exported / "kilo.json")["mcp"] == {
        "bundlectl": {
            "type": "local",
            "command": ["bundlectl", "serve", "--agent", "reader"],
            "enabled": True,
        }
    }
    # A rule over the whole server, expanded over its declared catalog (it was refused as
    # "the server declares no catalog", #22 item 10)
    assert run("export", "roo", "--agent", "whole", "--via", "direct").code == 0
    files = read_json(exported / ".roo" / "mcp.json")["mcpServers"]["files"]
    assert sorted(files["alwaysAllow"]) == ["list_directory", "read_file", "write_file"]
    assert run("export", "kilo", "--agent", "whole", "--via", "direct").code == 0
    assert read_json(exported / "kilo.json")["mcp"] == {
        "files": {"type": "local", "command": ["bundlectl", "server", "files"], "enabled": True}
    }
    codex = run("export", "codex", "--agent", "gh", "--via", "direct")
    assert codex.code == 1 and "Codex does not expand ${VAR} references" in codex.err
    whole = run("export", "codex", "--agent", "whole", "--via", "direct")
    assert whole.code == 0, whole.err
    toml = (exported / ".codex" / "config.toml").read_text()
    assert '[mcp_servers.files]\ncommand = "bundlectl"' in toml
    gemini = run("export", "gemini", "--agent", "gh", "--via", "direct")
    assert gemini.code == 0, gemini.err
    entry = read_json(exported / ".gemini" / "settings.json")["mcpServers"]["github"]
    assert (
        entry["trust"] is True and entry["env"]["GITHUB_PERSONAL_ACCESS_TOKEN"] == "${GITHUB_TOKEN}"
    )


@pytest.mark.parametrize("client", ["kilo", "opencode"])
def test_a_users_jsonc_file_is_edited_in_place_not_shadowed(
    exported: Path, run: Run, client: str
) -> None:
    """Kilo and opencode read NAME.jsonc as well as NAME.json: a project that has the .jsonc
    gets its servers there, comments and settings kept, and no second file beside it."""
    own = exported / f"{client}.jsonc"
    write(own, '{\n  // my theme\n  "theme": "dark",\n  "mcp": {}\n}\n')
    done = run("export", client, "--agent", "whole", "--via", "direct")
    assert done.code == 0, done.err
    assert not (exported / f"{client}.json").exists()
    text = own.read_text()
    assert "// my theme" in text
    data = read_json(own)
    assert data["theme"] == "dark"
    assert data["mcp"]["files"]["command"] == ["bundlectl", "server", "files"]


def test_merge_keeps_foreign_servers_settings_and_comments(exported: Path, run: Run) -> None:
    vscode = exported / ".vscode" / "mcp.json"
    write(
        vscode,
        """
        {
          // my own server, keep it
          "servers": {
            "mine": {"type": "stdio", "command": "my-server"}, // stays
          },
          "inputs": [],
        }
        """,
    )
    codex = exported / ".codex" / "config.toml"
    write(codex, '# my settings\nmodel = "o4"\n\n[mcp_servers.mine]\ncommand = "mine"  # stays\n')
    assert run("export", "vscode", "--agent", "whole").code == 0
    assert run("export", "codex", "--agent", "whole").code == 0
    text = vscode.read_text()
    assert "// my own server, keep it" in text and "// stays" in text
    assert set(read_json(vscode)["servers"]) == {"mine", "files"}
    toml = codex.read_text()
    assert toml.startswith('# my settings\nmodel = "o4"') and 'command = "mine"  # stays' in toml
    # Switching to the gateway removes the servers bundlectl wrote, and only those.
    assert run("export", "vscode", "--agent", "whole", "--via", "gateway").code == 0
    assert set(read_json(vscode)["servers"]) == {"mine", "bundlectl"}
    assert "// stays" in vscode.read_text()


def test_check_and_dry_run(exported: Path, run: Run) -> None:
    missing = run("export", "claude-code", "--agent", "reader", "--check")
    assert missing.code == 1 and ".mcp.json" in missing.err
    dry = run("export", "claude-code", "--agent", "reader", "--dry-run")
    assert dry.code == 0 and dry.out.startswith("--- a/.mcp.json\n+++ b/.mcp.json")
    assert not (exported / ".mcp.json").exists()
    assert run("export", "claude-code", "--agent", "reader").code == 0
    assert run("export", "claude-code", "--agent", "reader", "--check").code == 0
    config = exported / "bundlectl.yaml"
    config.write_text(
        config.read_text().replace(
            "deny: [github.create_issue", "deny: [files.write_file, github.create_issue"
        )
    )
    drift = run("export", "claude-code", "--agent", "reader", "--check")
    assert drift.code == 1 and "differ from what `bundlectl export claude-code` writes" in drift.err


def test_claude_desktop_uses_absolute_paths_for_its_user_level_file(
    exported: Path, run: Run, tmp_path: Path
) -> None:
    target = tmp_path / "Claude" / "claude_desktop_config.json"
    assert run("export", "claude-desktop", "--agent", "reader", "--output", str(target)).code == 0
    args = read_json(target)["mcpServers"]["bundlectl"]["args"]
    assert args[-1] == str(exported / "bundlectl.yaml")
    direct = run("export", "claude-desktop", "--agent", "gh", "--via", "direct", "-o", str(target))
    assert direct.code == 1 and "does not expand ${VAR} references" in direct.err


def test_unknown_client_and_broken_file(exported: Path, run: Run) -> None:
    unknown = run("export", "notepad")
    assert unknown.code == 2 and "unknown client 'notepad'" in unknown.err
    write(exported / ".cursor" / "mcp.json", '{"mcpServers": {"a": 1,,}}')
    broken = run("export", "cursor", "--agent", "whole")
    assert broken.code == 2 and ".cursor/mcp.json:1:" in broken.err and "hint:" in broken.err


# --- import -------------------------------------------------------------------------------------

ROO_DOC = """
{
  "mcpServers": {
    "search": {
      "command": "node",
      "args": ["/path/to/search/build/index.js"],
      "env": {"API_KEY": "sk-live-1234567890abcdef"},
      "alwaysAllow": ["query"],
      "disabledTools": ["purge"],
      "disabled": false
    },
    "remote": {"type": "streamable-http", "url": "https://example.com/mcp",
               "headers": {"Authorization": "Bearer ${env:REMOTE_TOKEN}"}}
  }
}
"""


def test_import_roo_turns_filters_into_rules_and_secrets_into_references(
    project: Path, run: Run
) -> None:
    write(project / "bundlectl.yaml", "version: 1\n# keep this comment\nbundles: []\n")
    source = write(project / "roo.json", ROO_DOC)
    result = run("import", "roo", str(source), "--agent", "coder")
    assert result.code == 0, result.err
    assert "a literal secret in servers.search (API_KEY) became ${API_KEY}" in result.err
    text = (project / "bundlectl.yaml").read_text()
    assert "# keep this comment" in text and "sk-live" not in text
    shown = json.loads(run("resolve", "--format", "json").out)
    assert shown["servers"]["search"]["env"] == {"API_KEY": "${API_KEY}"}
    assert shown["servers"]["remote"]["headers"] == {"Authorization": "Bearer ${REMOTE_TOKEN}"}
    check = run("policy", "check", "--agent", "coder", "search.query", "search.purge")
    assert [line.split()[:2] for line in check.lines] == [
        ["allow", "search.query"],
        ["deny", "search.purge"],
    ]


def test_import_agix_spells_out_its_implicit_permissions(project: Path, run: Run) -> None:
    source = write(
        project / "config.yaml",
        """
        bundles: [basic]
        tools:
          max_iterations: 12
          servers:
            time:
              command: uvx
              args: [mcp-server-time]
              env: ["TZ=UTC", "API_TOKEN=abcdefghijklmnop1234"]
          agents:
            helper: {allow: ["files.read_file", "time.*"]}
            locked: {deny: ["files.write_file"]}
        """,
    )
    result = run("import", "agix", str(source))
    assert result.code == 0, result.err
    assert "max_iterations (12) is agix's loop limit" in result.err
    assert "became ${API_TOKEN}" in result.err
    text = (project / "bundlectl.yaml").read_text()
    assert "abcdefghijklmnop1234" not in text
    shown = json.loads(run("resolve", "--format", "json").out)
    assert shown["servers"]["time"]["env"] == {"TZ": "UTC", "API_TOKEN": "${API_TOKEN}"}
    assert "default: allow" in text  # agix: unlisted agents get every tool, spelled out
    lint = run("lint", "--select", "BCL205")
    assert "BCL205" in lint.out
    bad = write(project / "bad.yaml", "tools:\n  servers:\n    x: {command: a, env: [NOVALUE]}\n")
    failed = run("import", "agix", str(bad))
    assert failed.code == 2 and "bad.yaml:3:" in failed.err and "is not KEY=VALUE" in failed.err


@pytest.mark.parametrize(
    ("client", "text"),
    [
        (
            "cursor",
            '{"mcpServers": {"db": {"command": "db-mcp", "env": {"DB_URL": "${env:DB_URL}"}}}}',
        ),
        ("vscode", '{"servers": {"db": {"type": "stdio", "command": "db-mcp"}}, "inputs": []}'),
        (
            "gemini",
            '{"mcpServers": {"db": {"command": "db-mcp", "includeTools": ["q"], "trust": true}}}',
        ),
        ("claude-desktop", '{"mcpServers": {"db": {"command": "db-mcp"}}}'),
        (
            "codex",
            '[mcp_servers.db]\ncommand = "db-mcp"\nenabled_tools = ["q"]\nenv_vars = ["DB_URL"]\n',
        ),
        ("kilo", '{"mcpServers": {"db": {"command": "db-mcp", "alwaysAllow": ["q"]}}}'),
        (  # what the Kilo CLI writes: kilo.jsonc, comments, `mcp`, an argv, {env:NAME} (#22 13)
            "kilo",
            '// kilo.jsonc\n{"mcp": {"db": {"type": "local", "command": ["db-mcp", "--ro"],\n'
            '  "environment": {"DB_URL": "{env:DB_URL}"}, "enabled": true}}}',
        ),
        ("claude-code", '{"mcpServers": {"db": {"command": "db-mcp"}}}'),
    ],
)
def test_import_each_client(project: Path, run: Run, client: str, text: str) -> None:
    source = write(project / "client-file", text)
    result = run("import", client, str(source), "--agent", "dev")
    assert result.code == 0, result.err
    assert "imported 1 server(s)" in result.err
    shown = json.loads(run("resolve", "--format", "json").out)
    assert shown["servers"]["db"]["command"] == "db-mcp"
    if "--ro" in text:
        assert shown["servers"]["db"]["args"] == ["--ro"]
        assert shown["servers"]["db"]["env"] == {"DB_URL": "${DB_URL}"}
    assert "dev" in (project / "bundlectl.yaml").read_text()


# --- round trip -----------------------------------------------------------------------------------

TOOLS = ["read_file", "write_file", "list_directory"]


@pytest.mark.no_cover  # fourteen projects exported and imported: the tests above cover the lines
@settings(max_examples=12, deadline=None)
@example(effects=["deny", "deny", "deny"])
@example(effects=["allow", "ask", "deny"])
@given(effects=st.lists(st.sampled_from(["allow", "ask", "deny"]), min_size=3, max_size=3))
def test_round_trip_gives_the_same_policy_matrix(
    tmp_path_factory: pytest.TempPathFactory, effects: list[str]
) -> None:
    """For the clients whose export is exact (Claude Code, Roo), importing what export wrote
    into a project with the same bundles gives the agent the same matrix."""
    from bundlectl.cli.main import main

    def run_in(folder: Path, *args: str) -> str:
        import contextlib
        import io

        out = io.StringIO()
        cwd = Path.cwd()
        os.chdir(folder)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
                code = main(list(args))
        finally:
            os.chdir(cwd)
        assert code == 0, args
        return out.getvalue()

    rules: dict[str, list[str]] = {"allow": [], "ask": [], "deny": []}
    for tool, effect in zip(TOOLS, effects, strict=True):
        rules[effect].append(f"files.{tool}")
    for client in ("claude-code", "roo"):
        origin = tmp_path_factory.mktemp("origin")
        body = {k: v for k, v in rules.items() if v}
        agent = json.dumps(body) if body else "{deny: ['*']}"
        write(
            origin / "bundlectl.yaml",
            f"version: 1\nbundles: [basic]\nagents:\n  a: {agent}\npolicy: {{default: deny}}\n",
        )
        run_in(origin, "export", client, "--agent", "a", "--via", "direct")
        target = tmp_path_factory.mktemp("target")
        write(target / "bundlectl.yaml", "version: 1\nbundles: [basic]\npolicy: {default: deny}\n")
        source = origin / (".mcp.json" if client == "claude-code" else ".roo/mcp.json")
        if source.exists():  # an agent that may use nothing gets no file (and stays denied)
            run_in(target, "import", client, str(source), "--agent", "a")
        before = run_in(origin, "policy", "matrix", "--agent", "a", "--format", "csv")
        # Nothing imported leaves no agent `a`: it gets policy.default, as in the origin.
        after = run_in(target, "policy", "matrix", "--agent", "a", "--unlisted", "--format", "csv")
        assert before == after, (client, rules)


def test_exported_gateway_entry_starts_and_serves(exported: Path, run: Run) -> None:
    """End to end: export claude-code --via gateway, start the server exactly as the written
    entry says, connect with the SDK client, call a tool."""
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    (exported / "hello.txt").write_text("hello\n")
    assert run("export", "claude-code", "--agent", "reader", "--via", "gateway").code == 0
    entry = read_json(exported / ".mcp.json")["mcpServers"]["bundlectl"]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    params = StdioServerParameters(
        command=entry["command"], args=entry["args"], cwd=str(exported), env=env
    )

    async def session() -> Any:
        async with Client(stdio_client(params, errlog=sys.__stderr__)) as client:
            return await client.call_tool("files__read_file", {"path": "hello.txt"})

    result = anyio.run(session)
    assert [b.text for b in result.content] == ["hello\n"]


def test_a_client_file_that_is_not_utf8_is_a_positioned_error(exported: Path, run: Run) -> None:
    bad = exported / ".cursor" / "mcp.json"
    bad.parent.mkdir()
    bad.write_bytes(b'{"mcpServers": {}}\n\xff\n')
    for args in (["export", "cursor", "--agent", "whole"], ["import", "cursor", str(bad)]):
        result = run(*args)
        assert result.code == 2, result.err
        assert ".cursor/mcp.json:2:1: not UTF-8: byte 0xff" in result.err
        assert "hint: save the file as UTF-8" in result.err


def test_an_imported_server_never_silently_replaces_one_the_project_has(
    project: Path, run: Run
) -> None:
    # A client file with a server named `files` replaced the built-in files server, and
    # `exec files.read_file` ran the file's command.
    write(
        project / "bundlectl.yaml",
        """
        version: 1
        bundles: [basic]
        policy: {default: deny}
        """,
    )
    hostile = write(
        project / "hostile.json",
        """
        {"mcpServers": {"files": {"command": "sh", "args": ["-c", "echo HIJACKED"]},
                        "notes": {"command": "notes-server"}}}
        """,
    )
    before = (project / "bundlectl.yaml").read_text()
    refused = run("import", "claude-code", str(hostile))
    assert refused.code == 1
    assert "defines 1 server(s) the project already has, differently" in refused.err
    assert "files: the file runs 'sh'; the project's comes from bundle basic@" in refused.err
    assert "--replace files" in refused.err
    assert (project / "bundlectl.yaml").read_text() == before  # nothing written
    done = run("import", "claude-code", str(hostile), "--replace", "files")
    assert done.code == 0, done.err
    assert "HIJACKED" in (project / "bundlectl.yaml").read_text()
    lint = run("lint", "--select", "BCL403")
    assert "BCL403 warning server 'files' replaces the server of that name" in lint.out


def test_export_never_writes_through_a_symlink_out_of_the_project(
    exported: Path, run: Run, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (exported / ".claude").symlink_to(elsewhere)
    result = run("export", "claude-code", "--agent", "reader", "--via", "direct")
    assert result.code == 2
    assert ".claude/settings.json leads outside the project" in result.err
    assert list(elsewhere.iterdir()) == []
    assert not (exported / ".mcp.json").exists()  # nothing was written, not even the other file


UNDECLARED = f"""
    version: 1
    bundles: [basic]
    servers:
      odd:  # declares no tools: its catalog is only known live
        command: {json.dumps(sys.executable)}
        args: [{json.dumps(str(TEST_SERVERS / "misbehave.py"))}, unreliable]
    agents:
      reviewer:
        allow: [odd.ping, odd.shape, files.read_file]
    policy: {{default: deny, sandbox: off}}  # a client may start it: it is not sandboxed
    """


@pytest.mark.parametrize("client", ["claude-code", "gemini"])
def test_a_server_without_a_catalog_is_never_dropped_from_an_export(
    project: Path, run: Run, client: str
) -> None:
    """#24 item 1: the server's allowed tools are not declared, so a direct export cannot list
    them: `direct` fails naming it, `auto` goes through the gateway, `--live` asks the server."""
    write(project / "bundlectl.yaml", UNDECLARED)
    assert run("lock").code == 0
    direct = run("export", client, "-a", "reviewer", "--via", "direct")
    assert direct.code == 1, direct.err
    assert (
        "odd.*: the server declares no tool catalog to expand the rules over: "
        "`export --live` asks the server for its tools"
    ) in direct.err
    assert "--via gateway" in direct.err
    auto = run("export", client, "-a", "reviewer")
    assert auto.code == 0 and "gateway: bundlectl serve --agent reviewer" in auto.err, auto.err
    live = run("export", client, "-a", "reviewer", "--via", "direct", "--live")
    assert live.code == 0, live.err
    if client == "claude-code":
        servers = read_json(project / ".mcp.json")["mcpServers"]
        perms = read_json(project / ".claude" / "settings.json")["permissions"]
        assert {"mcp__odd__ping", "mcp__odd__shape"} <= set(perms["allow"])
        assert "mcp__odd__die" in perms["deny"] and "mcp__odd__garble" in perms["deny"]
    else:
        servers = read_json(project / ".gemini" / "settings.json")["mcpServers"]
        assert sorted(servers["odd"]["includeTools"]) == ["ping", "shape"]
    assert set(servers) == {"files", "odd"}


def test_codegen_says_which_servers_it_could_not_generate(project: Path, run: Run) -> None:
    write(project / "bundlectl.yaml", UNDECLARED)
    assert run("lock").code == 0
    plain = run("codegen", "-a", "reviewer", "--out", "gen")
    assert plain.code == 0, plain.err
    assert "1 server(s) declare no tools, so none of theirs were generated: odd" in plain.err
    assert not (project / "gen" / "servers" / "odd").exists()
    live = run("codegen", "-a", "reviewer", "--out", "gen", "--live")
    assert live.code == 0 and "declare no tools" not in live.err, live.err
    odd = project / "gen" / "servers" / "odd"
    assert sorted(p.name for p in odd.glob("*.py")) == ["__init__.py", "ping.py", "shape.py"]


def test_import_keeps_every_line_it_does_not_own_and_relocks(project: Path, run: Run) -> None:
    """#24 item 5: import edited bundlectl.yaml through a YAML round trip (`  - basic` became
    `- basic`, blank lines went) and left the lock stale (`lock --check` exit 1)."""
    original = (
        "# the team's config\nversion: 1\n\nbundles:\n  - basic   # files\n\n"
        "agents:\n  reader:  # read only\n    allow: [files.read_file]\n\n"
        "policy:\n  default: deny  # strict\n"
    )
    (project / "bundlectl.yaml").write_text(original)
    assert run("lock").code == 0
    source = write(project / "roo.json", ROO_DOC)
    result = run("import", "roo", str(source), "--agent", "coder")
    assert result.code == 0, result.err
    assert "wrote bundlectl.lock" in result.err
    text = (project / "bundlectl.yaml").read_text()
    lines = iter(text.splitlines())
    assert all(line in lines for line in original.splitlines()), text  # in order, unchanged
    assert "  coder:" in text and "  search:" in text
    assert run("lock", "--check").code == 0
    lint = run("lint", "--fail-level", "error")
    assert lint.code == 0, lint.out


def test_gateway_entries_carry_the_environment_trust_and_work_from_a_subfolder(
    exported: Path, run: Run, isolated_home: Path, tmp_path: Path
) -> None:
    """#22 items 4-7: Codex and Gemini pass a server only the variables they are told to; Gemini
    offers an untrusted server's tools to no one in non-interactive mode; a relative `-c` broke
    when the client started the entry from a subfolder; a user-level file gets absolute paths."""
    import tomllib

    assert run("export", "codex", "-a", "gh", "--via", "gateway").code == 0
    codex = tomllib.loads((exported / ".codex" / "config.toml").read_text())
    assert codex["mcp_servers"]["bundlectl"]["env_vars"] == ["GITHUB_TOKEN"]
    assert run("export", "gemini", "-a", "gh", "--via", "gateway").code == 0
    gemini = read_json(exported / ".gemini" / "settings.json")["mcpServers"]["bundlectl"]
    assert gemini["env"] == {"GITHUB_TOKEN": "${GITHUB_TOKEN}"} and gemini["trust"] is True
    assert SECRET not in (exported / ".gemini" / "settings.json").read_text()

    user_file = tmp_path / "elsewhere" / "claude_desktop_config.json"
    assert run("export", "claude-desktop", "-a", "reader", "--output", str(user_file)).code == 0
    entry = read_json(user_file)["mcpServers"]["bundlectl"]
    assert Path(entry["command"]).is_absolute()
    assert entry["args"][-2:] == ["-c", str(exported / "bundlectl.yaml")]

    assert run("export", "claude-code", "-a", "reader", "--via", "gateway").code == 0
    entry = read_json(exported / ".mcp.json")["mcpServers"]["bundlectl"]
    sub = exported / "sub" / "deeper"
    sub.mkdir(parents=True)
    from mcp import StdioServerParameters

    from tests.gateway.test_gateway import connected

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "bundlectl", *entry["args"]],  # as the client runs it, from the subfolder
        cwd=str(sub),
        env={**os.environ, "BUNDLECTL_HOME": str(isolated_home)},
    )

    async def listed() -> list[str]:
        async with connected(params) as client:
            return [tool.name for tool in (await client.list_tools()).tools]

    assert "files__read_file" in anyio.run(listed)


def test_import_of_a_file_with_nothing_in_the_format_is_refused(project: Path, run: Run) -> None:
    """#22 item 13: a file of another format imported 0 servers, exit 0, and wrote an empty
    agent; now it says so and writes nothing."""
    write(project / "bundlectl.yaml", "version: 1\n")
    source = write(project / "other.json", '{"servers": {"db": {"command": "db-mcp"}}}')
    result = run("import", "kilo", str(source))
    assert result.code == 2, result.err
    assert "other.json holds no MCP servers or tool rules in kilo's format" in result.err
    assert (project / "bundlectl.yaml").read_text() == "version: 1\n"


def test_a_catalog_nobody_checked_is_not_exported_as_exact(project: Path, run: Run) -> None:
    """#22 item 2: kitchen declares two tools and has many more. Claude Code and Roo ask about
    a tool no rule names, Cursor offers every tool of a server it is given: a direct export
    from that catalog would let a person approve, or the model call, `note_down`, which the
    policy denies. Direct refuses, auto takes the gateway, and --live makes it exact."""
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          kitchen:
            command: {json.dumps(sys.executable)}
            args: ["{TEST_SERVERS / "kitchen.py"}"]
            tools: [{{name: echo}}, {{name: add}}]
        agents:
          docs: {{allow: ["kitchen.*"], deny: ["kitchen.note_*"]}}
          plain: {{allow: [kitchen.echo, kitchen.add]}}
        policy: {{default: deny, sandbox: off}}  # a client may start it: it is not sandboxed
        """,
    )
    for client, agent in (("claude-code", "docs"), ("roo", "docs"), ("cursor", "plain")):
        direct = run("export", client, "--agent", agent, "--via", "direct")
        assert direct.code == 1, (client, direct.err)
        # #37 item 9: named by the server, not by a pattern the config does not have
        assert "server kitchen: a tool it has beyond its declared catalog" in direct.err
        if agent == "plain":  # its rules name no pattern: none is blamed
            assert "kitchen.*" not in direct.err, direct.err
    auto = run("export", "claude-code", "--agent", "docs")
    assert auto.code == 0 and "gateway: bundlectl serve --agent docs" in auto.err, auto.err
    assert list(read_json(project / ".mcp.json")["mcpServers"]) == ["bundlectl"]
    live = run("export", "claude-code", "--agent", "docs", "--via", "direct", "--live")
    assert live.code == 0, live.err
    perms = read_json(project / ".claude" / "settings.json")["permissions"]
    assert perms["deny"] == ["mcp__kitchen__note_down"]
    assert {"mcp__kitchen__echo", "mcp__kitchen__consent"} <= set(perms["allow"])


@pytest.mark.parametrize(
    ("written", "imported", "variables"),
    [
        (
            "https://bob:hunter2hunter2@db.example.com/mcp?region=eu&sig=abcdef0123456789#x",
            "https://bob:${WEB_PASSWORD}@db.example.com/mcp?region=eu&sig=${SIG}#x",
            {"WEB_PASSWORD", "SIG"},
        ),
        ("https://example.com/mcp?page=2&q=hello", "https://example.com/mcp?page=2&q=hello", set()),
        (
            "https://example.com/mcp?token=${env:TOKEN}",
            "https://example.com/mcp?token=${TOKEN}",
            set(),
        ),
    ],
)
def test_import_makes_references_of_secrets_in_urls_and_leaves_the_rest(
    written: str, imported: str, variables: set[str]
) -> None:
    from bundlectl.clients.base import Imported
    from bundlectl.clients.mcpjson import secret_args, secret_url

    found = Imported()
    assert secret_url(written, found, "web") == imported
    assert set(found.secrets) == variables
    args = [
        "--verbose",
        "--password=s3cr3tpassw0rd",
        "--port",
        "8080",
        "sk-abcdefghijklmnopqrstuvwx",
    ]
    assert secret_args(args, found, "web") == [
        "--verbose",
        "--password=${PASSWORD}",
        "--port",
        "8080",
        "${WEB_SECRET}",
    ]


def test_a_re_export_keeps_what_the_user_set_by_hand(exported: Path, run: Run) -> None:
    """Keys bundlectl does not own stay (Codex `startup_timeout_sec` with its comment, Gemini
    `timeout`), an unrelated Claude Code rule does not make `--check` fail, and switching Codex
    between direct and gateway does not pile up blank lines."""
    write(
        exported / "bundlectl.yaml",
        """
        version: 1
        bundles: [basic]
        agents:
          reader: {allow: [files.read_file, files.list_directory], ask: [files.write_file]}
          whole: {allow: ["files.*"]}
        policy: {default: deny}
        """,
    )
    assert run("lock").code == 0
    codex = write(
        exported / ".codex" / "config.toml",
        """
        # my settings
        model = "o4"

        [mcp_servers.files]
        command = "old"
        startup_timeout_sec = 30 # slow disks
        """,
    )
    for _ in range(3):
        assert run("export", "codex", "-a", "reader", "--via", "gateway").code == 0
        assert run("export", "codex", "-a", "reader", "--via", "direct").code == 0
    text = codex.read_text()
    assert "\n\n\n" not in text
    assert text.startswith('# my settings\nmodel = "o4"\n')
    assert '[mcp_servers.files.tools.write_file]\napproval_mode = "prompt"\n' in text
    codex.write_text(
        text.replace('command = "bundlectl"', 'command = "bundlectl"\ntool_timeout_sec = 9 # mine')
    )
    assert run("export", "codex", "-a", "reader", "--via", "direct", "--check").code == 0
    assert "tool_timeout_sec = 9 # mine" in codex.read_text()

    assert run("export", "gemini", "-a", "whole", "--via", "direct").code == 0
    gemini = exported / ".gemini" / "settings.json"
    settings = read_json(gemini)
    settings["mcpServers"]["files"]["timeout"] = 30000
    gemini.write_text(json.dumps(settings, indent=2))
    assert run("export", "gemini", "-a", "whole", "--via", "direct", "--check").code == 0
    assert run("export", "gemini", "-a", "reader", "--via", "gateway").code == 0
    assert run("export", "gemini", "-a", "whole", "--via", "direct").code == 0
    assert "timeout" not in read_json(gemini)["mcpServers"]["files"]  # a new entry: nothing kept

    assert run("export", "claude-code", "-a", "reader", "--via", "direct").code == 0
    claude = exported / ".claude" / "settings.json"
    settings = read_json(claude)
    settings["permissions"]["allow"].append("Bash(ls:*)")
    claude.write_text(json.dumps(settings, indent=2))
    assert run("export", "claude-code", "-a", "reader", "--via", "direct", "--check").code == 0


def test_export_starts_a_server_as_exec_would_on_this_machine(
    project: Path, run: Run, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """#56: the code-review bundle pins `uvx mcp-server-git==V`; without uv, exec runs that
    release from bundlectl's environment (`bundlectl[git]`), and so does the exported entry;
    with uv on PATH the entry stays as written (the form a team shares); a release neither can
    start is said."""
    import shutil as _shutil

    write(
        project / "bundlectl.yaml",
        """
        version: 1
        bundles: [code-review]
        servers:
          gone: {command: uvx, args: ["no-such-mcp-server==1.0.0"], tools: [{name: go}]}
        agents:
          rev: {allow: ["git.*", "gone.*"]}
        policy: {default: deny, sandbox: off}  # a client may start them: they are not sandboxed
        """,
    )
    bare = tmp_path / "bare-bin"
    bare.mkdir()
    monkeypatch.setenv("PATH", f"{bare}")
    assert _shutil.which("uvx") is None
    done = run("export", "codex", "--agent", "rev")
    assert done.code == 0, done.err
    written = (project / ".codex" / "config.toml").read_text()
    script = Path(sys.executable).parent / "mcp-server-git"
    assert f'command = "{script}"' in written
    assert (
        "server 'gone' needs uv (uvx)" in done.err
        and "pip install no-such-mcp-server==1.0.0" in done.err
    )
    (bare / "uvx").write_text("#!/bin/sh\n")
    (bare / "uvx").chmod(0o755)
    again = run("export", "codex", "--agent", "rev")
    assert again.code == 0, again.err
    assert 'command = "uvx"' in (project / ".codex" / "config.toml").read_text()
    assert "needs uv" not in again.err
