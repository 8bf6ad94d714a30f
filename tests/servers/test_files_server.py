"""The built-in files server: confined to its root even under symlink races, and unable to write
the files that hold the agents' policy."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

import pytest

from bundlectl.servers import toolbox
from bundlectl.servers._tooling import Blob, ToolFailure
from tests.conftest import Run, write


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "bundles" / "mine").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / "bundlectl.yaml").write_text("version: 1\nregistries: [./bundles]\n")
    (root / "bundlectl.lock").write_text("format_version: 1\n")
    (root / "docs").mkdir()
    (root / "docs" / "a.txt").write_text("inside")
    (tmp_path / "secret.txt").write_text("OUTSIDE")
    return root


def tools(root: Path, *unprotected: str) -> dict[str, object]:
    return {name: tool.fn for name, tool in toolbox("files", root, unprotected).tools.items()}


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("bundlectl.yaml", "bundlectl.yaml holds the agents' policy"),
        ("bundlectl.lock", "bundlectl.lock holds the agents' policy"),
        ("bundlectl.local.yaml", "bundlectl.local.yaml holds the agents' policy"),
        ("./docs/../bundlectl.yaml", "bundlectl.yaml holds the agents' policy"),
        ("sub/project/bundlectl.yaml", "bundlectl.yaml holds the agents' policy"),
        (".git/config", "inside a .git folder"),
        (".git/hooks/pre-commit", "inside a .git folder"),
        ("bundles/mine/1.0.0.yaml", "bundles is a project registry"),
        ("bundles/new/1.0.0.yaml", "bundles is a project registry"),
    ],
)
def test_policy_files_cannot_be_written(project: Path, path: str, why: str) -> None:
    before = (project / "bundlectl.yaml").read_text()
    with pytest.raises(ToolFailure) as refused:
        tools(project)["write_file"](path=path, content="agents: {w: {allow: ['*']}}")  # type: ignore[operator]
    assert why in str(refused.value)
    assert "--unprotect" in str(refused.value)
    assert (project / "bundlectl.yaml").read_text() == before
    assert not (project / ".git" / "config").exists()
    assert not (project / "bundles" / "new").exists()  # no folder made for a refused write


@pytest.mark.parametrize(
    "path",
    [
        ".mcp.json",
        ".MCP.json",  # case-insensitive file systems
        ".claude/settings.json",
        ".claude/settings.local.json",
        ".claude/commands/x.md",
        ".codex/config.toml",
        ".gemini/settings.json",
        ".qwen/settings.json",
        ".roo/mcp.json",
        ".cursor/mcp.json",
        ".vscode/mcp.json",
        ".vscode/settings.json",
        ".github/mcp.json",
        "kilo.json",
        "kilo.jsonc",
        ".kilocode/mcp.json",
        "opencode.jsonc",
        "sub/project/.mcp.json",
        "docs/../.cursor/mcp.json",
    ],
)
def test_client_configs_that_bind_agents_cannot_be_written(project: Path, path: str) -> None:
    """An agent with files.write_file rewrote `.mcp.json` to start the gateway as another
    agent; every file a client reads its servers or permissions from is protected."""
    with pytest.raises(ToolFailure, match="MCP client's configuration"):
        tools(project)["write_file"](path=path, content='{"mcpServers": {}}')  # type: ignore[operator]
    assert not (project / path).exists()
    (project / "docs" / "link").symlink_to("../.vscode", target_is_directory=True)
    with pytest.raises(ToolFailure, match="MCP client's configuration"):
        tools(project)["write_file"](path="docs/link/mcp.json", content="{}")  # type: ignore[operator]


def test_every_file_export_writes_is_one_the_files_server_protects(project: Path) -> None:
    from bundlectl.clients import every
    from bundlectl.clients.claude_code import SETTINGS
    from bundlectl.policy.governing import governs

    written = [c.project_file for c in every() if c.project_file] + [str(SETTINGS)]
    assert len(written) >= 11
    for path in written:
        assert governs(tuple(path.split("/"))) is not None, path
    assert governs(("docs", "guide.md")) is None and governs(("github", "mcp.json")) is None


def test_a_symlink_to_a_policy_file_is_refused_too(project: Path) -> None:
    (project / "docs" / "notes.md").symlink_to("../bundlectl.yaml")
    (project / "docs" / "abs.md").symlink_to(project / "bundlectl.lock")
    write = tools(project)["write_file"]
    with pytest.raises(ToolFailure, match=r"bundlectl\.yaml holds the agents' policy"):
        write(path="docs/notes.md", content="x")  # type: ignore[operator]
    with pytest.raises(ToolFailure, match=r"bundlectl\.lock holds the agents' policy"):
        write(path="docs/abs.md", content="x")  # type: ignore[operator]
    assert (project / "bundlectl.yaml").read_text().startswith("version: 1")


def test_unprotect_lifts_the_guard_for_that_path_only(project: Path) -> None:
    write = tools(project, "bundlectl.lock")["write_file"]
    assert write(path="bundlectl.lock", content="new") == "wrote 3 bytes to bundlectl.lock"  # type: ignore[operator]
    with pytest.raises(ToolFailure, match="holds the agents' policy"):
        write(path="bundlectl.yaml", content="x")  # type: ignore[operator]


def test_symlinks_inside_the_root_are_followed_and_outside_ones_refused(project: Path) -> None:
    (project / "link-in").symlink_to("docs")
    (project / "abs-in").symlink_to(project / "docs" / "a.txt")
    (project / "link-out").symlink_to("../secret.txt")
    (project / "abs-out").symlink_to(project.parent / "secret.txt")
    box = tools(project)
    assert box["read_file"](path="link-in/a.txt") == "inside"  # type: ignore[operator]
    assert box["read_file"](path="abs-in") == "inside"  # type: ignore[operator]
    assert "[FILE] a.txt" in box["list_directory"](path="link-in")  # type: ignore[operator]
    for path in ("link-out", "abs-out", "../secret.txt", "docs/../../secret.txt"):
        with pytest.raises(ToolFailure, match="outside the root"):
            box["read_file"](path=path)  # type: ignore[operator]
        with pytest.raises(ToolFailure, match="outside the root"):
            box["write_file"](path=path, content="pwned")  # type: ignore[operator]
    assert (project.parent / "secret.txt").read_text() == "OUTSIDE"


def test_binary_files_come_back_as_blobs_with_their_real_uri(project: Path) -> None:
    (project / "docs" / "data.bin").write_bytes(b"\x00\x01\x02")
    blob = tools(project)["read_file"](path="docs/./data.bin")  # type: ignore[operator]
    assert isinstance(blob, Blob)
    assert blob.uri == (project / "docs" / "data.bin").resolve().as_uri()


def _swapper(stop: threading.Event, swap: list[tuple[Path, Path]]) -> None:
    """Exchange each pair again and again (rename is atomic: the name is always one of them)."""
    while not stop.is_set():
        for a, b in swap:
            tmp = a.with_name(a.name + ".swap")
            # A write may make the folder again in the instant it is away: then skip a round.
            with contextlib.suppress(OSError):
                os.rename(a, tmp)
                os.rename(b, a)
                os.rename(tmp, b)


def test_reads_never_escape_while_a_file_is_swapped_for_a_symlink(project: Path) -> None:
    # `docs/race.txt` is a regular file half the time and a symlink to the outside file the
    # other half; a check-then-open server read the outside file 166 times in 3,000.
    (project / "docs" / "race.txt").write_text("inside")
    (project / "docs" / "evil").symlink_to(project.parent / "secret.txt")
    stop = threading.Event()
    pair = [(project / "docs" / "race.txt", project / "docs" / "evil")]
    thread = threading.Thread(target=_swapper, args=(stop, pair), daemon=True)
    read = tools(project)["read_file"]
    seen: set[str] = set()
    thread.start()
    try:
        for _ in range(3000):
            try:
                seen.add(read(path="docs/race.txt"))  # type: ignore[operator, arg-type]
            except ToolFailure as exc:
                seen.add(f"refused: {str(exc).split(':')[0]}")
    finally:
        stop.set()
        thread.join()
    assert "OUTSIDE" not in seen
    assert "inside" in seen


@pytest.mark.no_cover  # 1,500 writes against a racing thread: the tests above cover the lines
def test_writes_never_land_outside_while_a_folder_is_swapped_for_a_symlink(
    project: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (project / "out").mkdir()
    (project / "evil").symlink_to(outside)
    stop = threading.Event()
    thread = threading.Thread(
        target=_swapper, args=(stop, [(project / "out", project / "evil")]), daemon=True
    )
    write = tools(project)["write_file"]
    thread.start()
    try:
        for n in range(1500):
            with contextlib.suppress(ToolFailure, OSError):
                write(path=f"out/f{n}.txt", content="x")  # type: ignore[operator]
    finally:
        stop.set()
        thread.join()
    assert list(outside.iterdir()) == []  # neither a file nor a stray temp file


def test_an_agent_allowed_to_write_files_cannot_rewrite_its_policy(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The attack: an agent allowed only files.write_file writes itself `allow: ["*"]`.
    root = tmp_path / "p"
    root.mkdir()
    monkeypatch.chdir(root)
    config = write(
        root / "bundlectl.yaml",
        """
        version: 1
        bundles: [basic]
        agents:
          w: {allow: [files.write_file]}
        policy: {default: deny}
        """,
    )
    before = config.read_text()
    attack = 'content=agents: {w: {allow: ["*"]}}\npolicy: {default: allow}\n'
    refused = run("exec", "-a", "w", "files.write_file", "path=bundlectl.yaml", attack)
    assert refused.code == 1
    assert "'bundlectl.yaml' is protected: bundlectl.yaml holds the agents' policy" in refused.err
    assert config.read_text() == before
    done = run("exec", "-a", "w", "files.write_file", "path=notes.txt", "content=fine")
    assert done.code == 0, done.err
    assert (root / "notes.txt").read_text() == "fine"


def test_an_error_of_the_system_is_said_not_hidden(project: Path) -> None:
    # A name longer than the file system allows once came back as "Error executing tool".
    with pytest.raises(ToolFailure, match="File name too long"):
        tools(project)["read_file"](path="a" * 300)  # type: ignore[operator]


def test_a_port_the_server_cannot_listen_on_is_exit_2_with_a_hint(
    project: Path, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`server files --port 99999` was an OverflowError traceback (exit 70), a busy port
    uvicorn's exit 3 (the code of "denied")."""
    import socket

    monkeypatch.chdir(project)
    out_of_range = run("server", "files", "--transport", "sse", "--port", "99999")
    assert out_of_range.code == 2
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        taken = run("server", "files", "--transport", "streamable-http", "--port", str(port))
    assert taken.code == 2
    assert f"cannot listen on 127.0.0.1:{port}" in taken.err
    assert "hint: choose another --port" in taken.err


def test_a_tool_name_typo_gets_a_did_you_mean(
    project: Path, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project)
    write(
        project / "bundlectl.yaml",
        """
        version: 1
        bundles: [basic]
        agents:
          reader: {allow: [files.read_file]}
        policy: {default: deny}
        """,
    )
    (project / "bundlectl.lock").unlink()  # this fixture's is a stub
    assert run("lock").code == 0
    called = run("exec", "-a", "reader", "files.raed_file", "path=x")
    assert called.code == 3
    assert "files.raed_file is not a declared tool; did you mean files.read_file?" in called.err
    checked = run("policy", "check", "-a", "reader", "files.raed_file")
    assert "did you mean files.read_file" in checked.err


def test_server_c_serves_that_configs_folder(tmp_path: Path) -> None:
    """`-c` is the project, as for every command that reads one: `server files -c
    other/bundlectl.yaml` works in `other/` (it refused the option)."""
    import json
    import subprocess
    import sys

    from tests.conftest import INITIALIZE
    from tests.gateway.test_gateway import read_lines

    other = tmp_path / "other"
    other.mkdir()
    (other / "bundlectl.yaml").write_text("version: 1\n")
    (other / "mine.txt").write_text("x")
    proc = subprocess.Popen(
        [sys.executable, "-m", "bundlectl", "server", "files", "-c", str(other / "bundlectl.yaml")],
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    listing = {"name": "list_directory", "arguments": {"path": "."}}
    for message in (
        INITIALIZE,
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": listing},
    ):
        proc.stdin.write(json.dumps(message).encode() + b"\n")
    proc.stdin.flush()
    answer = json.loads(read_lines(proc.stdout, 2, timeout=30)[1])
    proc.communicate(timeout=10)
    assert "[FILE] mine.txt" in answer["result"]["content"][0]["text"]


@pytest.mark.parametrize(
    "path",
    [
        ".mcp.json/x",
        "bundlectl.local.yaml/x",
        "bundlectl.yaml/x/y",
        ".vscode/mcp.json/x",
        "kilo.json/x",
        "opencode.json/x",
        "docs/.mcp.json/x",
        ".CLAUDE",
        ".Git/config",
        # what macOS or Windows reads as a governed name: a long s, a dotless i, full width
        ".mcp.j\u017fon/x",
        "k\u0131lo.json",
        "docs/.\uff4dcp.json",
        ".g\u0131t/config",
    ],
)
def test_no_folder_or_file_stands_where_a_governed_file_belongs(project: Path, path: str) -> None:
    """#52 item 5: a governed name is governed at any position of a path; a folder made at
    `.mcp.json` would make `export claude-code` fail and stop "always allow" writing."""
    first = path.split("/", maxsplit=1)[0] if not path.startswith("docs/") else "docs/.mcp.json"
    with pytest.raises(ToolFailure, match=r"policy|configuration|\.git folder"):
        tools(project)["write_file"](path=path, content="{}")  # type: ignore[operator]
    assert not (project / first).exists() or first in ("bundlectl.yaml",)
    assert (project / "bundlectl.yaml").is_file()


@pytest.mark.parametrize(
    ("path", "said"),
    [
        *((p, "ending in a dot or a space") for p in (".. /x", "docs/...", "docs/a.txt.")),
        *((p, "ending in a dot or a space") for p in ("docs/a.txt ", "notes. /b")),
        ("docs/evil.exe:x.md", "a stream of another file"),  # a `*.md` rule would make evil.exe
        ("docs/notes.md:$DATA", "a stream of another file"),
        ("docs/con.md", "a device"),
        ("NUL", "a device"),
        ("docs/Com1.txt", "a device"),
        ("lpt\u00b9/x", "a device"),
    ],
)
def test_names_that_windows_reads_as_others_are_refused(
    project: Path, path: str, said: str
) -> None:
    """#52 item 13: Windows strips a name's trailing dots and spaces (`".. "` is `..`), reads
    `a:b` as a stream of `a` and `con.md` as the console: the server refuses such names, and a
    `{path: }` condition has no reading of them."""
    from bundlectl.policy.conditions import normalised

    for tool in ("write_file", "read_file"):
        arguments = {"path": path, "content": "x"} if tool == "write_file" else {"path": path}
        with pytest.raises(ToolFailure, match=said):
            tools(project)[tool](**arguments)  # type: ignore[operator]
    assert normalised(path) is None
    assert not any(
        p.name.startswith(("evil", "con", "NUL", "Com", "lpt")) for p in project.rglob("*")
    )
    assert normalised("docs/a.txt") == "docs/a.txt" and normalised("./docs/../x") == "x"
