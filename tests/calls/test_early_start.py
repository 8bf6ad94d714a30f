"""exec's head start (`calls.early_start`): which calls' launches are kept, that every input the
decision was made from invalidates them, and that a kept launch starts a real process.
The exec-level behaviour (the server starts before the project loads; a refused call starts
nothing; a kept launch that is not the configured one is stopped) is in tests/cli/test_exec.py."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from bundlectl.calls.audit import AuditLog
from bundlectl.calls.confirm import always_yes
from bundlectl.calls.early_start import HeadStart, stamp
from bundlectl.calls.pipeline import Pipeline
from bundlectl.config import paths
from bundlectl.config.project import load_project
from bundlectl.resolve.resolved import resolve_project
from tests.conftest import admitted, write

SLEEPER = f"{{command: {sys.executable}, args: [-c, 'import sys; sys.stdin.read()']"
CONFIG = f"""\
version: 1
bundles: [basic]
registries: [reg]
servers:
  sleeper: {SLEEPER}, env: {{TOKEN: "${{TOKEN:-none}}"}}}}
  leaky: {SLEEPER}, env: {{GITHUB_TOKEN: ghp_{"a1B2" * 9}}}}}
  web: {{transport: streamable-http, url: "http://127.0.0.1:9/mcp"}}
agents:
  plain: {{allow: [sleeper.nap, leaky.nap, web.nap, files.read_file]}}
  asked: {{ask: [sleeper.nap]}}
  conditional: {{allow: [{{tool: sleeper.nap, args: {{minutes: [1]}}}}]}}
  counted: {{allow: [sleeper.nap]}}
limits:
  - {{agents: [counted], tools: [sleeper.nap], calls: 5, per: 1h}}
policy: {{default: deny}}
"""


@pytest.fixture
def sleeper(project: Path) -> Path:
    write(project / "bundlectl.yaml", CONFIG)
    (project / "reg").mkdir()
    return project


def keep(agent: str, server: str = "sleeper", tool: str = "nap") -> HeadStart:
    """What an `exec` of `agent`'s call keeps (the call itself is not made)."""
    head = HeadStart(None, agent, server, tool)
    resolution = resolve_project(load_project())
    pipeline = Pipeline(resolution, AuditLog(resolution), always_yes)
    decision = admitted(pipeline, agent, server, tool, {"minutes": 1})
    head.keep(pipeline, decision, pipeline.target(server))
    return head


def kept(head: HeadStart) -> dict[str, object]:
    if not head.file.exists():
        return {}
    calls: dict[str, object] = json.loads(head.file.read_text())["calls"]
    return calls


def started(agent: str = "plain") -> bool:
    """Whether a new `exec` of the call starts its server early (stopped again at once)."""
    with HeadStart(None, agent, "sleeper", "nap") as head:
        child = head.start(quiet=False)
        if child is not None:
            assert child.process.poll() is None  # a real process, running
        return child is not None


def test_a_call_allowed_outright_is_kept_and_starts_early(sleeper: Path) -> None:
    head = keep("plain")
    assert list(kept(head)) == ["plain\x1fsleeper\x1fnap"]
    assert started()
    assert not started("asked")  # another agent's call is its own entry


@pytest.mark.parametrize(
    ("agent", "server", "tool"),
    [
        ("asked", "sleeper", "nap"),  # `ask`: a person (or an approver) answers first
        ("conditional", "sleeper", "nap"),  # the arguments decide
        ("counted", "sleeper", "nap"),  # a quota counts it before anything starts
        ("plain", "leaky", "nap"),  # a literal secret in its env
        ("plain", "web", "nap"),  # no process to start
        ("plain", "files", "read_file"),  # built in: runs in-process
    ],
)
def test_what_is_never_kept(sleeper: Path, agent: str, server: str, tool: str) -> None:
    assert kept(keep(agent, server, tool)) == {}


def test_references_are_kept_unexpanded(sleeper: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOKEN", "s3cret-value-of-the-token")
    head = keep("plain")
    text = head.file.read_text()
    assert "s3cret" not in text and "${TOKEN:-none}" in text


def test_a_remote_registry_is_not_an_input_that_can_be_stamped(sleeper: Path) -> None:
    """What a remote registry resolves to is on a web server: such a project keeps nothing."""
    assert load_project().local_registries() == [sleeper / "reg"]
    config = sleeper / "bundlectl.yaml"
    config.write_text(config.read_text().replace("[reg]", "[reg, 'https://127.0.0.1:9/r']"))
    assert load_project().local_registries() is None


def _registry_manifest(project: Path) -> None:
    write(project / "reg" / "tiny" / "1.0.0.yaml", "name: tiny\nversion: 1.0.0\nservers: {}\n")


EDITS: dict[str, Callable[[Path], object]] = {
    "config": lambda p: (p / "bundlectl.yaml").write_text(CONFIG + "# edited\n"),
    "lock": lambda p: (p / "bundlectl.lock").write_text("version: 1\n"),
    "local rules": lambda p: write(p / "bundlectl.local.yaml", "version: 1\n"),
    "user config": lambda p: write(paths.user_project_file() or p, "version: 1\n"),
    "project registry": _registry_manifest,
    "user registry": lambda p: write(paths.user_registry_dir() / "x" / "1.0.0.yaml", "x\n"),
}


@pytest.mark.parametrize("edit", list(EDITS))
def test_any_input_changed_misses(sleeper: Path, edit: str) -> None:
    keep("plain")
    EDITS[edit](sleeper)
    assert not started()


def test_turning_the_user_config_off_misses(sleeper: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keep("plain")
    monkeypatch.setattr(paths, "user_project_file", lambda: None)  # --no-user-config
    assert not started()


def test_a_damaged_cache_file_is_a_miss(sleeper: Path) -> None:
    head = keep("plain")
    head.file.write_text(head.file.read_text()[:-20])
    assert not started()
    head = keep("plain")  # and written again
    assert started()


def test_stamps(tmp_path: Path) -> None:
    folder = tmp_path / "reg"
    write(folder / "a" / "1.0.0.yaml", "x: 1\n")
    before = stamp(folder)
    assert stamp(folder) == before
    write(folder / "a" / "1.0.0.yaml", "x: 2\n")  # same size, new bytes
    assert stamp(folder) != before
    assert stamp(tmp_path / "nothing") == "missing"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert stamp(fifo) != stamp(fifo)  # never read (it would block), never equal


def test_a_kept_launch_that_cannot_start_is_left_to_the_call(sleeper: Path) -> None:
    """Its log unwritable (`--quiet`): no head start, and no error from it either."""
    keep("plain")
    write(paths.server_log("sleeper").parent, "a file where the logs' folder would be\n")
    with HeadStart(None, "plain", "sleeper", "nap") as head:
        assert head.start(quiet=True) is None
        assert head.start(quiet=False) is not None
