"""What the audit log's hash chain costs a record (issue 41): one `AuditFile.write` — the
record as JSON, `prev` (the sha256 of the line before, kept from this writer's last write while
no one else appended), one `os.write` under `flock`.

    python bench/bench_audit.py [--records 5000]

Run it on two checkouts to compare (`PYTHONPATH=OLD python bench/bench_audit.py`): before the
chain a record was 17.2 us on the 2-core machine of the turn-4 notes, with it 26.5 us.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bundlectl.calls.auditfile import AuditFile, AuditRecord


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=5000)
    count = parser.parse_args().records
    record = AuditRecord(
        agent="bot",
        server="files",
        tool="read_file",
        decision="allow",
        lock_digest="sha256:" + "a" * 64,
        policy_digest="sha256:" + "b" * 64,
        outcome="ok",
        duration_ms=1.0,
    )
    with tempfile.TemporaryDirectory() as folder:
        log = AuditFile(Path(folder) / "audit.jsonl")
        log.write(record)
        best = float("inf")
        for _ in range(5):
            began = time.perf_counter()
            for _ in range(count):
                log.write(record)
            best = min(best, (time.perf_counter() - began) / count * 1e6)
        log.close()
    print(f"one audit record: {best:.1f} us (best of 5 rounds of {count})")


if __name__ == "__main__":
    main()
