"""Policy decisions and the policy matrix at scale.

    python bench/bench_policy.py [--cli]

1. One agent with 1,000 rules over a catalog of 5,000 tools (50 servers x 100 tools): compile
   once, then decide each of the 5,000 tools; median time per decision. Target <= 5 us.
   Then with 200 of the 1,000 rules carrying argument conditions (matchers, then CEL), each
   decision made on a call's arguments. Targets <= 10 us and <= 25 us.
2. `policy matrix` for 1,000 agents x 5,000 tools: engine + CSV rendering in memory.
   Target <= 5 s. With --cli, also the whole `bundlectl policy matrix --format csv` on a
   generated project (YAML parse, validation, resolution included).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bundlectl.policy.catalog import Catalog, ToolRef, agent_row
from bundlectl.policy.engine import Policy
from bundlectl.policy.rules import AgentSpec, Origin, PolicySet, Rule

SERVERS = [f"srv{i:02d}" for i in range(50)]
VERBS = ["get", "list", "create", "update", "delete", "search", "run", "read", "write", "sync"]
NOUNS = ["issue", "file", "page", "user", "repo", "job", "metric", "secret", "branch", "team"]
TOOLS = [f"{v}_{n}" for v in VERBS for n in NOUNS]  # 100 per server
ORIGIN = Origin("bundlectl.yaml", 1, 1)


def random_pattern(rng: random.Random) -> str:
    server, tool = rng.choice(SERVERS), rng.choice(TOOLS)
    verb, noun = tool.split("_")
    return rng.choice(
        [
            f"{server}.{tool}",
            f"{server}.{verb}_*",
            f"{server}.*_{noun}",
            tool,
            f"*.{verb}_*",
            f"{server}.*",
            f"srv?{server[-1]}.{tool}",
            f"{server}.{verb}_?{noun[1:]}",
        ]
    )


def rules_for(rng: random.Random, agent: str, count: int) -> tuple[Rule, ...]:
    effects = ["allow"] * 6 + ["ask"] * 2 + ["deny"] * 2
    return tuple(
        Rule(random_pattern(rng), rng.choice(effects), ORIGIN, agent)  # type: ignore[arg-type]
        for _ in range(count)
    )


def catalog() -> Catalog:
    return Catalog(ToolRef(s, t) for s in SERVERS for t in TOOLS)


def bench_decisions() -> None:
    rng = random.Random(1)
    agent = AgentSpec("big", ORIGIN, rules_for(rng, "big", 1000))
    policy = Policy(PolicySet({"big": agent}, "deny"))
    start = time.perf_counter()
    compiled = policy.agent("big")
    compile_ms = (time.perf_counter() - start) * 1000
    tools = [(s, t) for s in SERVERS for t in TOOLS]
    rng.shuffle(tools)
    per_call = []
    for _ in range(6):
        start = time.perf_counter()
        for server, tool in tools:
            compiled.decide(server, tool)
        per_call.append((time.perf_counter() - start) / len(tools) * 1e6)
    print(
        f"1 agent x 1,000 rules, 5,000 distinct tools: compile {compile_ms:.1f} ms, "
        f"first pass (indexes each server on first use) {per_call[0]:.2f} us, "
        f"then median {statistics.median(per_call[1:]):.2f} us per decision"
    )


def bench_conditional_decisions() -> None:
    """1,000 rules of which 200 have argument conditions (matchers; then CEL `when:`): each
    decision is made with a call's arguments. Targets: <= 10 us, CEL <= 25 us."""
    from bundlectl.policy.conditions import compile_condition

    for label, make in (
        ("matchers", lambda i: compile_condition({"path": {"path": f"docs{i % 7}/**"}}, None)),
        ("CEL when:", lambda i: compile_condition(None, f'args.path.startsWith("docs{i % 7}/")')),
    ):
        rng = random.Random(3)
        plain = list(rules_for(rng, "big", 800))
        conditional = [
            Rule(random_pattern(rng), rng.choice(["allow", "deny"]), ORIGIN, "big", make(i))
            for i in range(200)
        ]
        rules = tuple(plain + conditional)
        policy = Policy(PolicySet({"big": AgentSpec("big", ORIGIN, rules)}, "deny"))
        compiled = policy.agent("big")
        tools = [(s, t) for s in SERVERS for t in TOOLS]
        rng.shuffle(tools)
        arguments = {"path": "docs3/readme.md", "content": "x"}
        named = [
            (s, t) for s, t in tools if any(r.matches(s, t) for r in conditional)
        ]  # the tools whose decision checks a condition
        for which, chosen in (("all tools", tools), ("tools a conditional rule names", named)):
            per_call = []
            for _ in range(6):
                start = time.perf_counter()
                for server, tool in chosen:
                    compiled.decide(server, tool, arguments=arguments)
                per_call.append((time.perf_counter() - start) / len(chosen) * 1e6)
            print(
                f"1 agent x 1,000 rules (200 with {label}), {len(chosen):,} {which}, decided "
                f"on arguments: first pass {per_call[0]:.2f} us, then median "
                f"{statistics.median(per_call[1:]):.2f} us per decision"
            )


def matrix_policy(rng: random.Random) -> Policy:
    agents = {}
    for i in range(1000):
        name = f"agent{i:04d}"
        parents = tuple(
            (f"agent{j:04d}", ORIGIN) for j in rng.sample(range(i), min(i, 2)) if rng.random() < 0.3
        )
        agents[name] = AgentSpec(name, ORIGIN, rules_for(rng, name, rng.randint(3, 15)), parents)
    return Policy(PolicySet(agents, "deny", None, (Rule("*.delete_*", "deny", ORIGIN),)))


def bench_matrix() -> None:
    policy = matrix_policy(random.Random(2))
    cat = catalog()
    start = time.perf_counter()
    rows = [agent_row(policy.agent(a), cat) for a in policy.agents]
    computed = time.perf_counter() - start
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    names = [row.agent for row in rows]
    columns = [row.effects(len(cat)) for row in rows]
    writer.writerow(["tool", *names])
    for i, ref in enumerate(cat.tools):
        writer.writerow([ref.qualified, *(col[i] for col in columns)])
    total = time.perf_counter() - start
    cells = len(rows) * len(cat)
    print(
        f"matrix 1,000 agents x 5,000 tools ({cells:,} cells): engine {computed:.2f} s, "
        f"with CSV rendering {total:.2f} s ({len(buffer.getvalue()) / 1e6:.0f} MB)"
    )


def _rule_yaml(rule: Rule) -> str:
    """A rule as a flow-style YAML item: its pattern, or a mapping with its conditions."""
    if rule.condition is None:
        return f"'{rule.pattern}'"
    return json.dumps({"tool": rule.pattern, **rule.condition.canonical})


def write_project(root: Path, policy: Policy) -> None:
    """A bundlectl.yaml with 50 servers x 100 declared tools and the policy's agents."""
    lines = ["version: 1", "servers:"]
    for s in SERVERS:
        lines.append(f"  {s}:\n    command: {s}\n    tools:")
        lines += [f"      - name: {t}" for t in TOOLS]
    lines.append("agents:")
    for name, spec in policy.set.agents.items():
        lines.append(f"  {name}:")
        if spec.extends:
            lines.append(f"    extends: [{', '.join(p for p, _ in spec.extends)}]")
        for effect in ("allow", "ask", "deny"):
            pats = [_rule_yaml(r) for r in spec.rules if r.effect == effect]
            if pats:
                lines.append(f"    {effect}: [{', '.join(pats)}]")
    lines.append("policy: {default: deny, deny: ['*.delete_*']}")
    (root / "bundlectl.yaml").write_text("\n".join(lines) + "\n")


def bench_cli() -> None:
    policy = matrix_policy(random.Random(3))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_project(root, policy)
        exe = str(Path(sys.executable).with_name("bundlectl"))
        env = {**os.environ, "BUNDLECTL_HOME": str(root / "home")}
        start = time.perf_counter()
        done = subprocess.run(
            [exe, "policy", "matrix", "--format", "csv"],
            cwd=root,
            env=env,
            stdout=subprocess.PIPE,
            check=True,
        )
        print(
            f"bundlectl policy matrix --format csv (1,000 agents, 50 servers x 100 tools, "
            f"{len(done.stdout) / 1e6:.0f} MB): {time.perf_counter() - start:.2f} s"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cli", action="store_true", help="also run the CLI end to end")
    args = parser.parse_args()
    bench_decisions()
    bench_conditional_decisions()
    bench_matrix()
    if args.cli:
        bench_cli()


if __name__ == "__main__":
    main()
