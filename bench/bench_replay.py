"""`bundlectl policy replay` over a large audit log (#59: a 1 GiB log in <= 15 s).

    python bench/bench_replay.py [--mb 1024] [--agents 30]

Writes a log of records as bundlectl writes them (`AuditRecord.as_json`, hash-chained): calls
of the example team project's agents to its tools, allowed, asked, denied, with their outcomes,
each line unique (timestamps, call ids, argument digests, links), about 600 bytes a line. Then
runs the installed `bundlectl policy replay FILE` against the project with one rule changed
(`author` loses its ask of files.write_file and gains git.*), and reports the wall time, the
throughput and the peak RSS of that process.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bundlectl.calls.auditfile import AuditRecord, link

REPO = Path(__file__).resolve().parents[1]
TOOLS = [
    ("files", "read_file", "allow"),
    ("files", "write_file", "ask"),
    ("files", "list_directory", "allow"),
    ("git", "git_commit", "deny"),
    ("git", "git_status", "deny"),
    ("review", "view_diff", "allow"),
]
OUTCOMES = {"allow": ["ok"] * 9 + ["tool-error"], "ask": ["ok", "denied"], "deny": ["denied"]}


def write_log(path: Path, size: int, agents: int) -> int:
    rng = random.Random(5)
    names = ["reviewer", "author"] + [f"bot{i}" for i in range(agents - 2)]  # bots: not listed
    written = lines = 0
    prev = None
    with path.open("w", encoding="utf-8") as out:
        while written < size:
            server, tool, decision = rng.choice(TOOLS)
            record = AuditRecord(
                agent=rng.choice(names),
                server=server,
                tool=tool,
                decision=decision,
                lock_digest="sha256:" + "3f" * 32,
                policy_digest="sha256:" + "9e" * 32,
                outcome=rng.choice(OUTCOMES[decision]),
                rule=f"{server}.{tool}",
                rule_source="bundlectl.yaml:9:12",
                duration_ms=rng.random() * 50,
                arguments_sha256="sha256:" + hashlib.sha256(str(lines).encode()).hexdigest(),
                call=f"c-{lines:012x}",
            )
            line = record.as_json(prev)
            prev = link(line.encode())
            out.write(line + "\n")
            written += len(line) + 1
            lines += 1
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=1024)
    parser.add_argument("--agents", type=int, default=4, help="2 listed, the rest not")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name in ("bundlectl.yaml", "bundlectl.lock"):
            shutil.copy(REPO / "examples" / "team" / name, root / name)
        config = root / "bundlectl.yaml"
        config.write_text(
            config.read_text().replace("    ask: [files.write_file]\n", "    allow: [git.*]\n")
        )
        log = root / "audit.jsonl"
        started = time.perf_counter()
        lines = write_log(log, args.mb << 20, args.agents)
        print(
            f"wrote {log.stat().st_size / (1 << 20):.0f} MiB, {lines:,} records in "
            f"{time.perf_counter() - started:.1f} s"
        )
        exe = str(Path(sys.executable).with_name("bundlectl"))
        env = {**os.environ, "BUNDLECTL_HOME": str(root / "home")}
        started = time.perf_counter()
        child = subprocess.Popen(
            [exe, "policy", "replay", str(log)],
            cwd=root,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        out, errors = child.communicate()
        elapsed = time.perf_counter() - started
        if child.returncode not in (0, 1):
            raise SystemExit(errors.decode())
        print(out.decode().splitlines()[0])
        print(
            f"bundlectl policy replay: {elapsed:.2f} s, "
            f"{log.stat().st_size / (1 << 20) / elapsed:.0f} MiB/s (goal: 1 GiB <= 15 s)"
        )


if __name__ == "__main__":
    main()
