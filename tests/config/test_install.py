"""install / remove / lock through the CLI, against the built-in registry."""

from pathlib import Path

import pytest

from bundlectl.config.edits import edit_bundles, set_entries
from tests.conftest import Run, load_yaml, write

CONFIG = """\
# team config — keep this comment
version: 1   # format version
bundles:
    - basic      # files for everyone
# trailing comment before servers
servers:
    local: {command: ./run.sh, args: ["--token", "${API_TOKEN}"]}  # our own
agents:
    reader: {allow: [files.read_file]}   # flow style stays
"""


@pytest.fixture
def configured(project: Path, run: Run) -> Path:
    write(project / "bundlectl.yaml", CONFIG)
    assert run("lock").code == 0
    return project


def test_install_keeps_every_comment_and_the_formatting(configured: Path, run: Run) -> None:
    result = run("install", "docs-writer", "github>=1,<2")
    assert result.code == 0, result.err
    assert result.lines == [
        "+ docs-writer 1.1.0",
        "+ github 1.1.0",
        "wrote bundlectl.yaml and bundlectl.lock",
    ]
    assert (configured / "bundlectl.yaml").read_text() == CONFIG.replace(
        "    - basic      # files for everyone\n",
        "    - basic      # files for everyone\n    - docs-writer\n    - github>=1,<2\n",
    )
    lock = load_yaml(configured / "bundlectl.lock")
    assert {n: b["version"] for n, b in lock["bundles"].items()} == {
        "basic": "1.1.0",
        "docs-writer": "1.1.0",
        "github": "1.1.0",
    }


def test_install_replaces_an_entry_in_place_and_upgrades(configured: Path, run: Run) -> None:
    run("install", "docs-writer", "github<2")
    result = run("install", "github>=2")
    assert result.lines == ["~ github 1.1.0 -> 2.1.0", "wrote bundlectl.yaml and bundlectl.lock"]
    assert "    - github>=2\n" in (configured / "bundlectl.yaml").read_text()
    assert "github<2" not in (configured / "bundlectl.yaml").read_text()


def test_dry_run_writes_nothing(configured: Path, run: Run) -> None:
    before = {p.name: p.read_bytes() for p in configured.iterdir()}
    result = run("install", "code-review", "--dry-run")
    assert result.code == 0
    assert result.lines[-1] == "would write bundlectl.yaml and bundlectl.lock"
    assert "+ code-review 1.1.0" in result.lines
    assert {p.name: p.read_bytes() for p in configured.iterdir()} == before
    assert (
        run("remove", "basic", "--dry-run").lines[-1]
        == "would write bundlectl.yaml and bundlectl.lock"
    )
    assert {p.name: p.read_bytes() for p in configured.iterdir()} == before


def test_remove_refuses_while_required_and_names_the_dependent(configured: Path, run: Run) -> None:
    run("install", "docs-writer")
    result = run("remove", "github")
    assert result.code == 1
    assert result.err_lines == [
        "error: cannot remove github: required by docs-writer@1.1.0",
        "hint: remove docs-writer as well, or keep github",
    ]
    both = run("remove", "docs-writer", "github")
    assert both.code == 0, both.err
    assert both.lines[:2] == ["- docs-writer 1.1.0", "- github 2.1.0"]
    assert "docs-writer" not in (configured / "bundlectl.yaml").read_text()
    assert "# trailing comment before servers" in (configured / "bundlectl.yaml").read_text()


def test_remove_unknown_and_install_invalid(configured: Path, run: Run) -> None:
    result = run("remove", "devops")
    assert (result.code, result.err_lines[0]) == (2, "error: not installed: devops")
    bad = run("install", "GitHub")
    assert bad.code == 2
    assert bad.err_lines[0].startswith("error: bundle name 'GitHub' in 'GitHub' must be")
    conflict = run("install", "docs-writer", "github<1.1")  # 1.0.0 exists; docs-writer: >=1.1
    assert conflict.code == 1
    assert conflict.err_lines[:3] == [
        "error: no version of 'github' satisfies every constraint:",
        "  github<1.1 (required by bundlectl.yaml)",
        "  github>=1.1,<3 (required by docs-writer@1.1.0)",
    ]
    assert "github<1.1" not in (configured / "bundlectl.yaml").read_text()
    # A name no registry has is about the argument, not a place in bundlectl.yaml.
    typo = run("install", "githb>=1")
    assert (typo.code, typo.err_lines) == (
        2,
        ["error: no bundle named 'githb' in any registry", "hint: did you mean 'github'?"],
    )
    assert "githb" not in (configured / "bundlectl.yaml").read_text()


def test_lock_check_detects_drift_and_upgrade_moves_pins(configured: Path, run: Run) -> None:
    assert run("lock", "--check").lines == ["bundlectl.lock is up to date"]
    text = (configured / "bundlectl.yaml").read_text()
    (configured / "bundlectl.yaml").write_text(text.replace("./run.sh", "./other.sh"))
    stale = run("lock", "--check")
    assert stale.code == 1
    assert stale.err_lines == [
        "error: bundlectl.lock is stale:",
        "  bundlectl.yaml changed since the lock was written (bundles, registries or servers)",
        "  server local: configuration or tools differ from the lock",
        "hint: run `bundlectl lock` and commit the result",
    ]
    assert run("lock").code == 0
    assert run("lock", "--check").code == 0
    # An older pin is kept until --upgrade.
    run("install", "github==1.0.0")
    run("install", "github")
    assert load_yaml(configured / "bundlectl.lock")["bundles"]["github"]["version"] == "1.0.0"
    assert run("lock", "--upgrade", "github").lines[0] == "~ github 1.0.0 -> 2.1.0"
    assert run("lock", "github").code == 2


def test_lock_check_without_lock_and_json(project: Path, run: Run) -> None:
    write(project / "bundlectl.yaml", "version: 1\nbundles: [basic]\n")
    result = run("lock", "--check", "--format", "json")
    assert result.code == 1
    assert '"reasons": [\n    "there is no lock file"\n  ]' in result.out


def test_lock_never_contains_expanded_secrets(
    configured: Path, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("API_TOKEN", "ghp_supersecretvalue1234567890abcdef")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_anothersecretvalue1234567890abcd")
    run("install", "github")
    for name in ("bundlectl.lock", "bundlectl.yaml"):
        assert "secretvalue" not in (configured / name).read_text()
    assert "secretvalue" not in run("resolve").out
    assert "secretvalue" not in run("resolve", "--format", "json").out
    assert "${API_TOKEN}" in run("resolve").out


def test_lock_is_deterministic(configured: Path, run: Run) -> None:
    run("install", "docs-writer", "code-review")
    first = (configured / "bundlectl.lock").read_bytes()
    (configured / "bundlectl.lock").unlink()
    run("lock")
    assert (configured / "bundlectl.lock").read_bytes() == first


def test_project_server_wins_with_a_note(project: Path, run: Run) -> None:
    write(
        project / "bundlectl.yaml",
        """
        version: 1
        bundles: [basic]
        servers:
          files: {command: my-files}
    """,
    )
    result = run("resolve")
    assert result.code == 0
    assert "  files  [bundlectl.yaml]  stdio: my-files" in result.lines
    assert (
        "note: server 'files' from bundlectl.yaml replaces the one from bundle basic@1.1.0"
        in result.err_lines
    )


def test_two_bundles_defining_one_server_differently(project: Path, run: Run) -> None:
    for name in ("one", "two"):
        write(
            project / "bundles" / name / "1.0.0.yaml",
            f"name: {name}\nversion: 1.0.0\nservers:\n  shared: {{command: {name}}}\n",
        )
    write(project / "bundlectl.yaml", "version: 1\nregistries: [bundles]\nbundles: [one, two]\n")
    result = run("lock")
    assert result.code == 1
    assert result.err_lines[0] == (
        "error: server 'shared' is defined differently by bundles one@1.0.0 and two@1.0.0"
    )


@pytest.mark.parametrize(
    ("text", "add", "remove", "expected"),
    [
        (
            "version: 1\nbundles: [basic]  # c\n",
            ["github>=1,<2"],
            [],
            "version: 1\nbundles: [basic, 'github>=1,<2']  # c\n",
        ),
        (
            "version: 1\nbundles: [basic, x]  # c\n",
            [],
            ["basic"],
            "version: 1\nbundles: [x]  # c\n",
        ),
        ("version: 1\nbundles: [basic, x]\n", [], ["x"], "version: 1\nbundles: [basic]\n"),
        ("version: 1\nbundles: []\n", ["basic"], [], "version: 1\nbundles: [basic]\n"),
        ("version: 1\n", ["basic"], [], "version: 1\nbundles:\n  - basic\n"),
        ("version: 1", ["basic"], [], "version: 1\nbundles:\n  - basic\n"),
        (
            "version: 1\nbundles:\nagents: {}\n",
            ["b"],
            [],
            "version: 1\nbundles:\n  - b\nagents: {}\n",
        ),
        ("bundles:\n- a\n- b\n", [], ["a", "b"], "bundles: []\n"),
        ("bundles:\n- a  # one\n- b\n", ["a==1"], [], "bundles:\n- a==1  # one\n- b\n"),
    ],
)
def test_edit_bundles_is_surgical(
    text: str, add: list[str], remove: list[str], expected: str
) -> None:
    assert edit_bundles(text, add=add, remove=remove) == expected


def test_resolve_json_is_stable(configured: Path, run: Run) -> None:
    import json

    data = json.loads(run("resolve", "--format", "json").out)
    assert data["format_version"] == 1
    assert data["bundles"] == [
        {"name": "basic", "version": "1.1.0", "source": "builtin", "user": False}
    ]
    assert data["servers"]["local"] == {
        "bundle": None,
        "source": "bundlectl.yaml",
        "file": "bundlectl.yaml",
        "endpoint": "stdio: ./run.sh --token '${API_TOKEN}'",
        "transport": "stdio",
        "command": "./run.sh",
        "args": ["--token", "${API_TOKEN}"],
        "tools": [],
        "sandbox": {"said": "off ($BUNDLECTL_SANDBOX=off on this machine)"},  # conftest.py
    }
    assert data["agents"]["reader"]["allow"] == ["files.read_file"]
    assert data["agents"]["reader"]["rules"] == [
        {
            "effect": "allow",
            "rule": "files.read_file",
            "source": "bundlectl.yaml:9:22",
            "from_agent": "reader",
        }
    ]
    only = json.loads(run("resolve", "--agent", "reader", "--format", "json").out)
    assert list(only["agents"]) == ["reader"]
    assert run("resolve", "--agent", "nobody").code == 2


def test_new_files_follow_the_umask_and_rewrites_keep_the_mode(project: Path, run: Run) -> None:
    import os

    old = os.umask(0o022)
    try:
        assert run("init").code == 0
        config, lock = project / "bundlectl.yaml", project / "bundlectl.lock"
        assert (config.stat().st_mode & 0o777, lock.stat().st_mode & 0o777) == (0o644, 0o644)
        config.chmod(0o664)
        lock.chmod(0o640)
        assert run("install", "github>=1,<2").code == 0
        assert (config.stat().st_mode & 0o777, lock.stat().st_mode & 0o777) == (0o664, 0o640)
    finally:
        os.umask(old)


def test_temp_files_left_by_a_killed_write_are_removed_by_the_next(
    configured: Path, run: Run
) -> None:
    stray = [configured / ".bundlectl.lock.abc123.tmp", configured / ".bundlectl.yaml.x9.tmp"]
    for path in stray:
        path.write_text("half a file")
    unrelated = configured / ".other.tmp"
    unrelated.write_text("not ours")
    assert run("install", "github>=1,<2").code == 0
    assert not any(path.exists() for path in stray)
    assert unrelated.exists()
    assert sorted(p.name for p in configured.iterdir() if p.name.startswith(".")) == [".other.tmp"]


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (  # a block mapping: the entry replaced where it is, comments around it kept
            "version: 1\nservers:\n  a:  # old\n    command: x\n  # about b\n  b: {command: y}\n",
            "version: 1\nservers:\n  a:\n    command: z\n  # about b\n  b: {command: y}\n",
        ),
        (  # a new entry goes after the last one, before a trailing comment and blank line
            "version: 1\nservers:\n  b: {command: y}\n\n# end\n",
            "version: 1\nservers:\n  b: {command: y}\n  a:\n    command: z\n\n# end\n",
        ),
        (  # `servers: {}` (as `init` writes it), its comment kept
            "version: 1\nservers: {}  # none yet\nagents: {}\n",
            "version: 1\nservers:  # none yet\n  a:\n    command: z\nagents: {}\n",
        ),
        (  # no section: added at the end, even without a final newline
            "version: 1\nbundles: [basic]",
            "version: 1\nbundles: [basic]\nservers:\n  a:\n    command: z\n",
        ),
        (  # an entry at the end of a file without a final newline
            "version: 1\nservers:\n  b:\n    command: y",
            "version: 1\nservers:\n  b:\n    command: y\n  a:\n    command: z\n",
        ),
    ],
)
def test_set_entries_changes_only_the_entry(before: str, after: str) -> None:
    assert set_entries(before, "servers", {"a": {"command": "z"}}) == after


def test_set_entries_writes_lists_of_names_as_init_does() -> None:
    text = set_entries("version: 1\n", "agents", {"dev": {"allow": ["a.b", "c.*"], "deny": []}})
    assert text == "version: 1\nagents:\n  dev:\n    allow: [a.b, c.*]\n    deny: []\n"
