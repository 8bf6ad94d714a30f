"""The audit log's hash chain: what links a record to the line before it, read by the log that
writes it (`auditfile`), the seals that cover it (`auditseal`) and `audit verify`."""

from __future__ import annotations

import hashlib


def link(line: bytes) -> str:
    """What the next record's `prev` holds: the sha256 of this record's line as written (its
    bytes, without the line break)."""
    return "sha256:" + hashlib.sha256(line.rstrip(b"\n")).hexdigest()
