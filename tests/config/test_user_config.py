"""The user-level `bundlectl.yaml` (SPEC 15): a user's own servers, bundles and agents merged
under every project's, the project winning on every name and its policy never loosened; never
part of the lock; `--no-user-config` for CI."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import TEST_SERVERS, Run, write

PY = sys.executable

PROJECT = """
version: 1
bundles: [basic]
agents:
  reader:   # the project's reader
    allow: [files.read_file]
policy:
  default: deny
  deny: [files.write_file]
"""


@pytest.fixture
def user_file(isolated_home: Path) -> Path:
    return isolated_home / "config" / "bundlectl.yaml"


@pytest.fixture
def layered(project: Path, user_file: Path) -> Path:
    write(project / "bundlectl.yaml", PROJECT)
    write(
        user_file,
        f"""
        version: 1
        bundles: [github, basic==1.0.0]
        servers:
          kitchen: {{command: {PY}, args: ["{TEST_SERVERS / "kitchen.py"}"]}}
          files: {{command: echo}}   # hidden by the basic bundle's files server
        agents:
          me:
            allow: ["kitchen.*", files.read_file, files.write_file]
          reader:
            allow: ["*"]            # hidden by the project's reader
        policy:
          default: allow            # cannot loosen the project's deny
          deny: [kitchen.fail]      # tightens it
        """,
    )
    return project


def test_the_users_entries_merge_under_the_project_which_wins_every_name(
    layered: Path, run: Run
) -> None:
    data = json.loads(run("resolve", "--format", "json").out)
    shown = {b["name"]: (b["version"], b["user"]) for b in data["bundles"]}
    # basic==1.0.0 of the user file does not move the project's basic (the newest, 1.1.0).
    assert shown == {"basic": ("1.1.0", False), "github": ("2.1.0", True)}
    servers = data["servers"]
    assert servers["files"]["source"] == "basic@1.1.0"
    assert servers["kitchen"]["source"].startswith("user: ")
    assert servers["kitchen"]["file"].endswith("config/bundlectl.yaml")
    assert servers["github"]["source"] == "github@2.1.0, user"
    assert data["agents"]["reader"]["allow"] == ["files.read_file"]
    assert data["agents"]["me"]["rules"][0]["source"].endswith("config/bundlectl.yaml:8:13")
    assert data["policy"] == {
        "default": "deny",
        "deny": ["files.write_file", "kitchen.fail"],
        "pin_tools": False,
        "sandbox": "on",  # absent: on (this machine's $BUNDLECTL_SANDBOX is not the project's)
    }
    notes = run("resolve").err
    assert "server 'files' of " in notes and "is hidden by the project's" in notes
    assert "agent 'reader' of " in notes

    text = run("resolve").out
    assert "kitchen  [user: " in text
    assert "github 2.1.0 (builtin, required by the user-level file)" in text


def test_the_lock_is_the_projects_alone(layered: Path, run: Run, user_file: Path) -> None:
    assert run("lock").code == 0
    lock = (layered / "bundlectl.lock").read_text()
    assert "basic" in lock and "kitchen" not in lock and "github" not in lock
    assert run("lock", "--check").code == 0
    user_file.unlink()  # a CI machine has no user file: the same lock is up to date
    assert run("lock", "--check").code == 0


def test_the_user_file_never_loosens_the_projects_policy(layered: Path, run: Run) -> None:
    # The project's deny holds for the user's agent; the user's deny is added.
    assert run("policy", "check", "-a", "me", "files.write_file").code == 3
    assert run("policy", "check", "-a", "me", "kitchen.fail").code == 3
    assert run("policy", "check", "-a", "me", "kitchen.echo").code == 0
    # An unlisted agent still gets the project's `default: deny`, not the user's allow.
    assert run("policy", "check", "-a", "me2", "--unlisted", "files.read_file").code == 3
    explained = run("policy", "explain", "-a", "me", "kitchen.fail")
    assert "decided by: policy.deny: kitchen.fail" in explained.out
    assert "config/bundlectl.yaml:13:10" in explained.out
    assert "  server kitchen: user: " in explained.out
    assert "  agent me: " in explained.out


def test_a_user_policy_default_of_deny_tightens_the_projects_allow(
    project: Path, user_file: Path, run: Run
) -> None:
    write(project / "bundlectl.yaml", "version: 1\nbundles: [basic]\n")
    assert run("policy", "check", "-a", "anyone", "--unlisted", "files.read_file").code == 0
    write(user_file, "version: 1\npolicy: {default: deny, pin_tools: true}\n")
    assert run("policy", "check", "-a", "anyone", "--unlisted", "files.read_file").code == 3
    explained = run("policy", "explain", "-a", "anyone", "--unlisted", "files.read_file")
    assert "policy.default: deny (used)" in explained.out
    assert "policy.pin_tools: on" in explained.out


def test_exec_calls_a_users_server_under_the_projects_policy(
    layered: Path, run: Run, isolated_home: Path
) -> None:
    called = run("exec", "-a", "me", "kitchen.echo", "text=hi")
    assert (called.code, called.out) == (0, "hi\n"), called.err
    assert run("exec", "-a", "me", "files.write_file", "path=x", "content=y").code == 3
    assert not (layered / "x").exists()
    # --no-user-config, before or after the command: the project alone (no such server).
    for argv in (
        ("--no-user-config", "exec", "-a", "me", "kitchen.echo", "text=hi"),
        ("exec", "-a", "me", "kitchen.echo", "text=hi", "--no-user-config"),
    ):
        alone = run(*argv)
        assert alone.code == 2 and "kitchen" in alone.err, alone.err


def test_no_user_config_from_the_environment_and_before_or_after_the_command(
    layered: Path, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "kitchen" in json.loads(run("resolve", "--format", "json").out)["servers"]
    after = json.loads(run("resolve", "--format", "json", "--no-user-config").out)
    assert "kitchen" not in after["servers"] and "me" not in after["agents"]
    monkeypatch.setenv("BUNDLECTL_NO_USER_CONFIG", "1")
    assert "kitchen" not in json.loads(run("resolve", "--format", "json").out)["servers"]
    # `--` ends the options: after it the flag is an argument like any other.
    monkeypatch.delenv("BUNDLECTL_NO_USER_CONFIG")
    literal = run("policy", "check", "-a", "me", "--", "--no-user-config")
    assert literal.code == 2
    assert "'--no-user-config' is not a qualified tool name" in literal.err


def test_a_bad_user_file_is_an_error_with_its_position_and_a_way_out(
    project: Path, user_file: Path, run: Run
) -> None:
    write(project / "bundlectl.yaml", PROJECT)
    write(user_file, "version: 1\nregistries: [./mine]\ngateway: {names: bare}\n")
    failed = run("resolve")
    assert failed.code == 2
    assert "config/bundlectl.yaml:2:1" in failed.err
    assert "'registries' is read from a project's bundlectl.yaml" in failed.err
    assert "bundlectl registry add" in failed.err
    assert "config/bundlectl.yaml:3:1" in failed.err
    assert "--no-user-config" in failed.err
    assert run("--no-user-config", "resolve").code == 0
    write(user_file, "version: 1\nbundles: [githib]\n")
    typo = run("resolve")
    assert typo.code == 2 and "config/bundlectl.yaml:2:11" in typo.err
    assert "did you mean github?" in typo.err
    write(user_file, "version: 1\nagents: {me: {allow: [files.read_file]\n")
    broken = run("resolve")
    assert broken.code == 2 and "config/bundlectl.yaml:" in broken.err


def test_lint_checks_the_project_as_the_repository_holds_it(layered: Path, run: Run) -> None:
    assert run("lock").code == 0
    linted = run("lint", "--format", "json")
    findings = json.loads(linted.out)["findings"]
    assert not any("config/bundlectl.yaml" in f["file"] for f in findings), findings
