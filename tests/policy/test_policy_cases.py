"""The shared policy cases and our own corpus, through real project loading and the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from bundlectl.config.project import load_project
from bundlectl.policy.catalog import agent_row
from bundlectl.resolve.resolved import resolve_project
from tests.conftest import Run, write

DATA = Path(__file__).parents[1] / "data"
SOURCES = ["policy-cases.yaml", "policy-corpus.yaml"]


def _load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = YAML(typ="safe", pure=True).load((DATA / name).read_text())
    return data


def _cases(kind: str) -> list[Any]:
    out = []
    for name in SOURCES:
        data = _load(name)
        for case in data.get(kind, []):
            out.append(pytest.param(data["catalog"], case, id=f"{name}: {case['name']}"))
    return out


def _write_project(root: Path, catalog: dict[str, list[str]], fragment: dict[str, Any]) -> Path:
    config = {
        "version": 1,
        **fragment,
        "servers": {
            s: {"command": "true", "tools": [{"name": t} for t in tools]}
            for s, tools in catalog.items()
        },
    }
    path = root / "bundlectl.yaml"
    with path.open("w") as handle:
        YAML(typ="safe", pure=True).dump(config, handle)
    return path


@pytest.mark.parametrize(("catalog", "case"), _cases("cases"))
def test_decisions(
    catalog: dict[str, list[str]], case: dict[str, Any], project: Path, run: Run
) -> None:
    _write_project(project, catalog, case["config"])
    assert run("lock").code == 0  # the lock records the catalog (pin_tools)
    resolution = resolve_project(load_project())
    policy = resolution.policy
    for call in case["calls"]:
        decision = policy.decide(
            call["agent"], call["tool"], interactive=call.get("interactive", False)
        )
        assert decision.effect == call["want"], (call, decision.reason)
        # The CLI agrees, with the exit code of SPEC 4.1.
        # (--unlisted: a case's unlisted agent is on purpose, SPEC 3's policy.default.)
        args = ["policy", "check", "--agent", call["agent"], call["tool"], "--unlisted"]
        if call.get("interactive"):
            args.append("--interactive")
        result = run(*args)
        assert result.code == (3 if call["want"] == "deny" else 0), result.out
        assert result.out.split()[0] == call["want"]
    # The matrix's mask arithmetic agrees with tool-by-tool decisions on the whole catalog.
    for agent in {c["agent"] for c in case["calls"]}:
        compiled = policy.agent(agent)
        row = agent_row(compiled, resolution.catalog)
        for index, ref in enumerate(resolution.catalog.tools):
            assert (
                row.effect(index) == compiled.decide(ref.server, ref.tool, interactive=True).effect
            )


@pytest.mark.parametrize(("catalog", "case"), _cases("invalid"))
def test_invalid_configs_fail_at_load_with_positions(
    catalog: dict[str, list[str]], case: dict[str, Any], project: Path, run: Run
) -> None:
    _write_project(project, catalog, case["config"])
    for command in (
        ["resolve"],
        ["lock"],
        ["policy", "check", "--agent", "a", "files.x"],
        ["tools"],
    ):
        result = run(*command)
        assert result.code == 2, (command, result.err)
        assert result.err.startswith("error: bundlectl.yaml:"), result.err
        assert "Traceback" not in result.err


def test_cycle_is_named(project: Path, run: Run) -> None:
    _write_project(
        project,
        {"files": ["read_file"]},
        {"agents": {"a": {"extends": ["b"]}, "b": {"extends": ["c"]}, "c": {"extends": ["a"]}}},
    )
    result = run("resolve")
    assert "extends cycle: a -> b -> c -> a" in result.err_lines[0]


def test_long_extends_chains_and_a_cycle_at_their_end(project: Path, run: Run) -> None:
    """3,000 agents in one chain: no recursion limit, and the cycle at the far end is named."""
    lines = ["version: 1", "bundles: [basic]", "agents:"]
    lines += [f"  a{i}: {{extends: [a{i + 1}]}}" for i in range(2999)]
    lines.append("  a2999: {allow: [files.read_file]}")
    write(project / "bundlectl.yaml", "\n".join(lines) + "\n")
    allowed = run("policy", "check", "--agent", "a0", "files.read_file")
    assert allowed.code == 0, allowed.err
    (project / "bundlectl.yaml").write_text(
        (project / "bundlectl.yaml")
        .read_text()
        .replace("a2999: {allow: [files.read_file]}", "a2999: {extends: [a2998]}")
    )
    cycle = run("policy", "check", "--agent", "a0", "files.read_file")
    assert cycle.code == 2
    assert cycle.err_lines[0].endswith("extends cycle: a2998 -> a2999 -> a2998")


def _args_cases() -> list[Any]:
    data = _load("policy-cases-args.yaml")
    return [pytest.param(data["catalog"], c, id=c["name"]) for c in data["cases"]]


@pytest.mark.parametrize(("catalog", "case"), _args_cases())
def test_decisions_with_arguments(
    catalog: dict[str, dict[str, Any]], case: dict[str, Any], project: Path
) -> None:
    """SPEC 10: the shared cases with arguments, through real project loading; each call's
    arguments meet the tool's declared input schema, whose defaults fill what is missing."""
    config = {
        "version": 1,
        **case["config"],
        "servers": {
            server: {
                "command": "true",
                "tools": [{"name": t, "input_schema": s} for t, s in tools.items()],
            }
            for server, tools in catalog.items()
        },
    }
    with (project / "bundlectl.yaml").open("w") as handle:
        YAML(typ="safe", pure=True).dump(config, handle)
    policy = resolve_project(load_project()).policy
    for call in case["calls"]:
        server, tool = call["tool"].split(".", 1)
        decision = policy.agent(call["agent"]).decide(
            server,
            tool,
            interactive=call.get("interactive", False),
            arguments=call.get("args", {}),
            schema=catalog[server][tool],
        )
        assert decision.effect == call["want"], (call, decision.reason)
        assert decision.checked == decision.conditional  # checked when a condition mattered
