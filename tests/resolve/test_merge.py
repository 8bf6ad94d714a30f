"""Merging resolved bundles with the project's own servers and agents: what wins, what is
noted, what collides, and where each rule was written."""

from __future__ import annotations

from pathlib import Path

import pytest

from bundlectl.config.project import load_project
from bundlectl.errors import ResolutionError
from bundlectl.resolve.resolved import resolve_project
from tests.conftest import make_registry, write

TOOL = {"command": "t", "tools": [{"name": "run"}]}


def bundles(project: Path, **servers: dict[str, object]) -> None:
    make_registry(
        project / "bundles",
        {
            "one": {"1.0.0": {"servers": {"shared": servers.get("one", TOOL)}}},
            "two": {
                "1.0.0": {
                    "servers": {"shared": servers.get("two", TOOL)},
                    "agents": {"helper": {"allow": ["shared.run"]}},
                }
            },
        },
    )


def test_the_project_wins_and_says_so(project: Path) -> None:
    bundles(project)
    write(
        project / "bundlectl.yaml",
        """
        version: 1
        registries: [bundles]
        bundles: [one, two]
        servers:
          shared: {command: mine}
        agents:
          helper: {deny: ["shared.*"]}
        """,
    )
    merged = resolve_project(load_project()).merged
    assert merged.servers["shared"].bundle is None
    assert merged.servers["shared"].spec.command == "mine"
    assert [r.pattern for r in merged.agents["helper"].rules] == ["shared.*"]
    assert merged.notes == [
        "server 'shared' from bundlectl.yaml replaces the one from bundle one@1.0.0",
        "agent 'helper' in bundlectl.yaml replaces the defaults of bundle two@1.0.0",
    ]


def test_bundle_agent_defaults_keep_their_origin(project: Path) -> None:
    bundles(project)
    write(project / "bundlectl.yaml", "version: 1\nregistries: [bundles]\nbundles: [one, two]\n")
    merged = resolve_project(load_project()).merged
    [rule] = merged.agents["helper"].rules
    assert (rule.pattern, rule.effect, str(rule.origin)) == (
        "shared.run",
        "allow",
        "bundle two@1.0.0",
    )
    assert list(merged.servers) == ["shared"] and merged.servers["shared"].bundle == "one@1.0.0"


def test_two_bundles_that_define_a_server_differently_collide(project: Path) -> None:
    bundles(project, two={"command": "other"})
    write(project / "bundlectl.yaml", "version: 1\nregistries: [bundles]\nbundles: [one, two]\n")
    with pytest.raises(
        ResolutionError, match=r"defined differently by bundles one@1\.0\.0 and two"
    ):
        resolve_project(load_project())
    # Naming the server in the project settles it.
    config = "version: 1\nregistries: [bundles]\nbundles: [one, two]\n"
    write(project / "bundlectl.yaml", config + "servers:\n  shared: {command: x}\n")
    assert resolve_project(load_project()).merged.servers["shared"].spec.command == "x"


def test_project_rules_know_their_line_and_column(project: Path) -> None:
    write(
        project / "bundlectl.yaml",
        """
        version: 1
        bundles: [basic]
        agents:
          reader:
            allow: [files.read_file]
            deny: ["files.write_*"]
        policy: {deny: ["*.delete_*"]}
        """,
    )
    resolution = resolve_project(load_project())
    rules = {r.pattern: r.origin.position for r in resolution.merged.agents["reader"].rules}
    assert rules == {
        "files.read_file": "bundlectl.yaml:5:13",
        "files.write_*": "bundlectl.yaml:6:12",
    }
    [deny] = resolution.policy.set.global_deny
    assert deny.origin.position == "bundlectl.yaml:7:17"
