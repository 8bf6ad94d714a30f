"""`bundlectl policy export --format cedar` (#59), checked decision by decision: generated
projects and every request over their catalogs (each agent, a stranger, each tool, each way a
call can be confirmed or approved) decided by bundlectl's engine and by the Cedar engine itself
(`cedarpy`, the Python binding of the official Rust implementation) must agree."""

from __future__ import annotations

import json
import random
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import cedarpy
import pytest
from hypothesis import given, settings

from bundlectl.config.project import load_project
from bundlectl.resolve.cedar import export
from bundlectl.resolve.resolved import Resolution, resolve_project
from tests.conftest import REPO, Run, write
from tests.resolve.test_policy_diff import AGENTS, PATTERNS, TOOLS, configs

pytestmark = pytest.mark.no_cover  # generated projects through code other tests cover

# (confirmed where the call was made, approvals out of band)
CONTEXTS = [(False, 0), (True, 0), (False, 1), (False, 2)]


def _expected(resolution: Resolution, agent: str, server: str, tool: str, context: Any) -> bool:
    """bundlectl's answer: allow; an ask when confirmed (or approved by as many people as its
    rule wants, out of band only for `approve: out-of-band`); never a deny."""
    decision = resolution.policy.agent(agent).decide(server, tool, interactive=True)
    confirmed, approvals = context
    if decision.matched_effect == "allow":
        return True
    if decision.matched_effect == "deny":
        return False
    rule = decision.rule
    assert rule is not None
    if rule.by_approver:
        return approvals >= rule.approvals
    return confirmed or approvals >= 1


def _agree(resolution: Resolution) -> int:
    found = export(resolution)
    assert found.refused == []
    validated = cedarpy.validate_policies(found.policies, json.dumps(found.schema))
    assert validated.validation_passed, validated.errors
    agents = [*resolution.policy.agents, "stranger"]
    requests, expected = [], []
    for agent in agents:
        for ref in resolution.catalog.tools:
            for context in CONTEXTS:
                requests.append(
                    {
                        "principal": {"type": "Agent", "id": agent},
                        "action": {"type": "Action", "id": "call"},
                        "resource": {"type": "Tool", "id": ref.qualified},
                        "context": {"confirmed": context[0], "approvals": context[1]},
                    }
                )
                expected.append(
                    (
                        agent,
                        ref.qualified,
                        context,
                        _expected(resolution, agent, ref.server, ref.tool, context),
                    )
                )
    answers = cedarpy.is_authorized_batch(
        requests, found.policies, json.dumps(found.entities), json.dumps(found.schema)
    )
    for (agent, tool, context, want), answer in zip(expected, answers, strict=True):
        assert answer.allowed is want, (agent, tool, context, want, found.policies)
    return len(requests)


@settings(max_examples=60, deadline=None)
@given(configs(conditions=False))
def test_cedar_decides_every_generated_request_as_bundlectl(text: str) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        (Path(scratch) / "bundlectl.yaml").write_text(text)
        assert _agree(resolve_project(load_project(Path(scratch) / "bundlectl.yaml"))) > 0


def _project(rng: random.Random) -> str:
    """A project drawn by a seeded generator of the same shapes as `configs`: a fixed sample,
    so each run decides a known number of requests both ways."""
    servers = []
    for server, names in TOOLS.items():
        kept = rng.sample(names, rng.randint(1, len(names)))
        servers.append(
            f"  {server}: {{command: x, tools: [{', '.join(f'{{name: {n}}}' for n in kept)}]}}"
        )
    agents: list[str] = []
    listed: list[str] = []
    for agent in rng.sample(AGENTS, rng.randint(1, len(AGENTS))):
        agents += [f"  {agent}:", f"    description: {agent}"]
        if listed and rng.random() < 0.4:
            agents.append(f"    extends: [{rng.choice(listed)}]")
        listed.append(agent)
        for effect in ("allow", "ask", "deny"):
            rules = []
            for pattern in rng.sample(PATTERNS, rng.randint(0, 2)):
                roll = rng.random()
                if effect == "ask" and roll < 0.3:
                    people = rng.randint(1, 2)
                    rules.append(
                        f'{{tool: "{pattern}", approve: out-of-band, approvals: {people}}}'
                    )
                else:
                    rules.append(f'"{pattern}"')
            if rules:
                agents.append(f"    {effect}: [{', '.join(rules)}]")
    deny = json.dumps(rng.sample(PATTERNS, rng.randint(0, 1)))
    default = rng.choice(["allow", "deny"])
    return (
        "version: 1\nservers:\n"
        + "\n".join(servers)
        + "\nagents:\n"
        + "\n".join(agents)
        + f"\npolicy:\n  default: {default}\n  deny: {deny}\n  approvals: {{ttl: 10m}}\n"
    )


def test_two_thousand_requests_and_more_agree_each_run() -> None:
    rng = random.Random(59)
    agreed = 0
    with tempfile.TemporaryDirectory() as scratch:
        for n in range(50):
            folder = Path(scratch) / str(n)
            folder.mkdir()
            (folder / "bundlectl.yaml").write_text(_project(rng))
            agreed += _agree(resolve_project(load_project(folder / "bundlectl.yaml")))
    assert agreed >= 2000, agreed


def test_the_example_team_with_pinned_tools_exports_and_agrees(project: Path, run: Run) -> None:
    for name in ("bundlectl.yaml", "bundlectl.lock"):
        shutil.copy(REPO / "examples" / "team" / name, project / name)
    assert _agree(resolve_project(load_project(project / "bundlectl.yaml"))) > 100
    done = run("policy", "export", "--format", "cedar", "--out", "cedar")
    assert done.code == 0, done.err
    assert {p.name for p in (project / "cedar").iterdir()} == {
        "policies.cedar",
        "schema.cedarschema.json",
        "entities.json",
    }
    assert "forbid (principal" in (project / "cedar" / "policies.cedar").read_text()


def test_what_cedar_cannot_say_is_refused_with_its_position(project: Path, run: Run) -> None:
    write(
        project / "bundlectl.yaml",
        """
        version: 1
        bundles: [basic]
        agents:
          docs:
            allow: [{tool: files.write_file, args: {path: {path: "docs/**"}}}, "files.re?d_file"]
        """,
    )
    done = run("policy", "export", "--format", "cedar")
    assert done.code == 2 and done.out == ""
    assert re.search(r"\(bundlectl\.yaml:\d+:\d+\): argument conditions", done.err), done.err
    assert "`?` (Cedar's like has only `*`)" in done.err
