"""`bundlectl audit summary` over a large audit log (issue 41's goal: 1 GB in <= 10 s and
<= 200 MiB): the log is read as a stream, each record counted, never kept.

    python bench/bench_audit_summary.py [--mb 1024]

Writes a log of realistic records (agents, tools, outcomes, the hash chain's `prev`) to a
temporary folder, then times the installed console script on it and reads its peak memory
(the child's max RSS from `wait4`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path


def write_log(path: Path, megabytes: int) -> int:
    """A chained log of about `megabytes`; the number of records."""
    agents = [f"agent-{i}" for i in range(20)]
    tools = [("files", "read_file"), ("files", "write_file"), ("git", "git_status")]
    outcomes = ["ok", "ok", "ok", "pending", "denied", "tool-error"]
    target, written, count, prev = megabytes << 20, 0, 0, None
    with path.open("wb") as out:
        chunk: list[bytes] = []
        while written < target:
            server, tool = tools[count % len(tools)]
            record = {
                "timestamp": "2026-11-25T12:00:00Z",
                "agent": agents[count % len(agents)],
                "server": server,
                "tool": tool,
                "decision": "allow",
                "lock_digest": "sha256:" + "a" * 64,
                "policy_digest": "sha256:" + "b" * 64,
                "outcome": outcomes[count % len(outcomes)],
                "duration_ms": float(count % 97),
                "arguments_sha256": "hmac-sha256:" + "c" * 64,
                "via": "serve",
                "call": f"r-{count}",
            }
            if prev is not None:
                record["prev"] = prev
            line = json.dumps(record).encode()
            prev = "sha256:" + hashlib.sha256(line).hexdigest()
            chunk.append(line + b"\n")
            written += len(line) + 1
            count += 1
            if len(chunk) == 10_000:
                out.write(b"".join(chunk))
                chunk.clear()
        out.write(b"".join(chunk))
    return count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=1024)
    size = parser.parse_args().mb
    folder = Path(tempfile.mkdtemp(prefix="bench-audit-"))
    try:
        log = folder / "audit.jsonl"
        records = write_log(log, size)
        command = [shutil.which("bundlectl") or "bundlectl", "audit", "summary", "--file", str(log)]
        env = {**os.environ, "BUNDLECTL_HOME": str(folder / "home")}
        started = time.perf_counter()
        child = subprocess.Popen(command, stdout=subprocess.DEVNULL, env=env)
        _, status, usage = os.wait4(child.pid, 0)
        took = time.perf_counter() - started
        assert os.waitstatus_to_exitcode(status) == 0
        print(
            f"audit summary: {log.stat().st_size / (1 << 20):.0f} MiB, {records:,} records: "
            f"{took:.1f} s, max RSS {usage.ru_maxrss / 1024:.0f} MiB"
        )
    finally:
        shutil.rmtree(folder)


if __name__ == "__main__":
    main()
