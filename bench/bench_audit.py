"""What the audit log's hash chain costs a record (issue 41): one `AuditFile.write` — the
record as JSON, `prev` (the sha256 of the line before, kept from this writer's last write while
no one else appended), one `os.write` under `flock`.

    python bench/bench_audit.py [--records 5000]

Run it on two checkouts to compare (`PYTHONPATH=OLD python bench/bench_audit.py`): before the
chain a record was 17.2 us on the 2-core machine of the turn-4 notes, with it 26.5 us.

It also times the same records on a forward-securely sealed log (#52: `audit seal --init`,
whose writers look at the sealing state once a record), side by side in the same run, and what
one seal costs (the seal record, the key evolved and its file replaced with an fsync): that
happens once an epoch (15 minutes by default), not once a record.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from bundlectl.calls import auditseal
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
        os.environ["BUNDLECTL_HOME"] = folder  # the sealing key goes to its state folder
        plain = AuditFile(Path(folder) / "audit.jsonl")
        sealed = AuditFile(Path(folder) / "sealed.jsonl")
        auditseal.initialise(sealed.target, auditseal.DEFAULT_INTERVAL)
        best = {"plain": float("inf"), "sealed": float("inf")}
        for log in (plain, sealed):
            log.write(record)
        for _ in range(5):  # the two alternate, so a slow stretch of the machine hits both
            for name, log in (("plain", plain), ("sealed", sealed)):
                began = time.perf_counter()
                for _ in range(count):
                    log.write(record)
                best[name] = min(best[name], (time.perf_counter() - began) / count * 1e6)
        seals = []
        for _ in range(20):
            began = time.perf_counter()
            sealed.seal()
            seals.append((time.perf_counter() - began) * 1e6)
        plain.close()
        sealed.close()
    print(f"one audit record: {best['plain']:.1f} us (best of 5 rounds of {count})")
    print(
        f"one audit record, sealed log: {best['sealed']:.1f} us "
        f"(+{best['sealed'] - best['plain']:.1f} us a record)"
    )
    print(f"one seal (once an epoch): {sorted(seals)[len(seals) // 2]:.0f} us, median of 20")


if __name__ == "__main__":
    main()
