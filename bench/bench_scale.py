"""Whole commands at scale: 3,000 agents over 5,000 declared tools, in several policy shapes.

    python bench/bench_scale.py [--agents 3000] [--shapes random misses extends] [--commands ...]

Shapes (50 servers x 100 tools each, `policy.default: deny`, a global `*.delete_*` deny):
  random   2-6 rules per agent from a mix of exact names and wildcards of every kind
  misses   2-6 rules per agent, a third of the exact ones naming tools that do not exist
           (typos), and per-server denies
  extends  2-6 rules per agent, and most agents extend one or two earlier agents
  conditions  as random, a fifth of the rules with an argument condition ({path: docs3/**})
Each command runs as the installed `bundlectl` script in a fresh process; the figures are its
wall time and its own peak RSS.
Goal: each command <= 2 s and <= 300 MiB for every shape, growing linearly with the size;
`policy diff` of two revisions <= 4 s (#59).
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_policy import ORIGIN, SERVERS, TOOLS, random_pattern, write_project

from bundlectl.policy.engine import Policy
from bundlectl.policy.rules import AgentSpec, PolicySet, Rule

COMMANDS = {
    "lock": ["lock"],
    "resolve": ["resolve", "--format", "json"],
    "matrix": ["policy", "matrix", "--format", "json"],
    "lint": ["lint", "--format", "json", "--exit-zero"],
    # against the committed project, after an edit: a new agent, and the global deny
    # (which every agent inherits: each of them is decided again over every tool)
    "diff-one": ["policy", "diff", "HEAD", "--format", "json"],
    "diff-all": ["policy", "diff", "HEAD", "--format", "json"],
}
EDITS = {
    "diff-one": ("agents:\n", "agents:\n  newcomer:\n    allow: ['*']\n"),
    "diff-all": (
        "policy: {default: deny, deny: ['*.delete_*']}",
        "policy: {default: deny, deny: ['*.delete_*', '*.get_*']}",
    ),
}


def committed(root: Path) -> None:
    """The project (and its lock) as a git commit: what `policy diff` compares with."""
    (root / ".gitignore").write_text("home/\n")
    git = ["git", "-c", "user.email=b@example.com", "-c", "user.name=b"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base"]):
        subprocess.run([*git, *args], cwd=root, check=True, stdout=subprocess.DEVNULL)


def edited(root: Path, command: str) -> None:
    config = root / "bundlectl.yaml"
    subprocess.run(["git", "checkout", "-q", "--", "bundlectl.yaml"], cwd=root, check=True)
    old, new = EDITS[command]
    text = config.read_text()
    assert old in text, old
    config.write_text(text.replace(old, new, 1))


def typo(rng: random.Random, tool: str) -> str:
    i = rng.randrange(len(tool))
    return tool[:i] + tool[i + 1 :] if rng.random() < 0.5 else tool[:i] + "x" + tool[i:]


def shaped_rule(rng: random.Random, shape: str, agent: str) -> Rule:
    effect = rng.choice(["allow"] * 6 + ["ask"] * 2 + ["deny"] * 2)
    pattern = random_pattern(rng)
    if shape == "conditions" and rng.random() < 0.2:  # a fifth with argument conditions
        from bundlectl.policy.conditions import compile_condition

        matcher = {"path": {"path": f"docs{rng.randrange(9)}/**"}}
        return Rule(pattern, effect, ORIGIN, agent, compile_condition(matcher, None))  # type: ignore[arg-type]
    if shape == "misses":
        roll = rng.random()
        if roll < 0.33:
            pattern = f"{rng.choice(SERVERS)}.{typo(rng, rng.choice(TOOLS))}"
        elif roll < 0.5:
            pattern, effect = f"{rng.choice(SERVERS)}.*", "deny"
    return Rule(pattern, effect, ORIGIN, agent)  # type: ignore[arg-type]


def policy(shape: str, agents: int, rng: random.Random) -> Policy:
    specs = {}
    for i in range(agents):
        name = f"agent{i:04d}"
        parents: tuple[tuple[str, object], ...] = ()
        if shape == "extends" and i and rng.random() < 0.8:
            picks = rng.sample(range(max(0, i - 50), i), min(i, rng.randint(1, 2)))
            parents = tuple((f"agent{j:04d}", ORIGIN) for j in picks)
        rules = tuple(shaped_rule(rng, shape, name) for _ in range(rng.randint(2, 6)))
        specs[name] = AgentSpec(name, ORIGIN, rules, parents)  # type: ignore[arg-type]
    return Policy(PolicySet(specs, "deny", None, (Rule("*.delete_*", "deny", ORIGIN),)))


def run(root: Path, args: list[str]) -> tuple[float, str]:
    """The installed console script, as a user runs it: wall time, and its own peak RSS (from
    `wait4`, so each figure is this process's alone)."""
    env = {**os.environ, "BUNDLECTL_HOME": str(root / "home")}
    exe = str(Path(sys.executable).with_name("bundlectl"))
    start = time.perf_counter()
    child = subprocess.Popen(
        [exe, *args], cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    assert child.stderr is not None
    errors = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    elapsed = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode not in (0, 1):
        raise SystemExit(f"{args} failed:\n{errors.decode()[-2000:]}")
    return elapsed, f"{usage.ru_maxrss / 1024:>5.0f} MiB (exit {child.returncode})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=3000)
    parser.add_argument(
        "--shapes", nargs="+", default=["random", "misses", "extends", "conditions"]
    )
    parser.add_argument("--commands", nargs="+", default=list(COMMANDS))
    args = parser.parse_args()
    for shape in args.shapes:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            write_project(root, policy(shape, args.agents, random.Random(7)))
            run(root, ["lock"])  # warm the cache and write the lock
            if any(c in EDITS for c in args.commands):
                committed(root)
            for command in args.commands:
                if command in EDITS:
                    edited(root, command)
                elapsed, peak = run(root, COMMANDS[command])
                print(f"{shape:>8} {args.agents} agents  {command:>8}  {elapsed:6.2f} s  {peak}")


if __name__ == "__main__":
    main()
