"""The embedded state store: one SQLite file in the user state folder, in WAL mode, so `exec`,
`serve` and `bundlectl approvals` on one machine read and write it at once. Every change is one
`BEGIN IMMEDIATE` transaction: two processes taking the same one-time approval cannot both get
it."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bundlectl.config.paths import display_path
from bundlectl.state import Approval, Binding, Counter, StateError, UnknownApproval, new_id

SCHEMA = """
CREATE TABLE IF NOT EXISTS approvals (
    id TEXT PRIMARY KEY,
    project TEXT NOT NULL,
    agent TEXT NOT NULL,
    server TEXT NOT NULL,
    tool TEXT NOT NULL,
    digest TEXT NOT NULL,
    rule TEXT NOT NULL,
    shown TEXT NOT NULL,
    created REAL NOT NULL,
    expires REAL NOT NULL,
    status TEXT NOT NULL,
    decided_by TEXT,
    reason TEXT,
    until REAL,
    requester TEXT,
    needed INTEGER NOT NULL DEFAULT 1,
    approved_by TEXT NOT NULL DEFAULT '[]',
    waited REAL
);
CREATE INDEX IF NOT EXISTS approvals_binding
    ON approvals (project, agent, server, tool, digest, status);
CREATE TABLE IF NOT EXISTS tasks (
    id TEXT PRIMARY KEY,
    record TEXT NOT NULL,
    rev INTEGER NOT NULL,
    expires REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS counters (
    key TEXT PRIMARY KEY,
    count INTEGER NOT NULL,
    ends REAL NOT NULL
);
"""
KEPT = 7 * 86400.0  # seconds a request that is over is kept (for `approvals list --all`)
_COLUMNS = "id, project, agent, server, tool, digest, rule, shown, created, expires, status, "
_COLUMNS += "decided_by, reason, until, requester, needed, approved_by, waited"


class SqliteStore:
    """`state.Store` in one SQLite file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db: sqlite3.Connection | None = None
        self._swept = 0.0

    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                db = sqlite3.connect(self.path, timeout=10.0, isolation_level=None)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA busy_timeout=10000")
                db.execute("PRAGMA synchronous=NORMAL")  # WAL: durable but for a power cut
                db.executescript(SCHEMA)
                _migrated(db)
            except (sqlite3.Error, OSError) as exc:
                raise self._broken(exc) from None
            self._db = db
        return self._db

    def _broken(self, exc: Exception) -> StateError:
        where = display_path(self.path)
        if isinstance(exc, sqlite3.DatabaseError) and "not a database" in str(exc):
            return StateError(
                f"the state store {where} is not an SQLite database (damaged?); calls that "
                "need an approval are refused until it is",
                hint=f"move it aside (its pending approvals are then lost): mv {where} "
                f"{where}.broken",
            )
        return StateError(
            f"cannot use the state store {where}: {exc}; calls that need an approval are "
            "refused until it can be",
            hint="check the folder's permissions and free space",
        )

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        db = self._connect()
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            raise self._broken(exc) from None

    def _rows(self, sql: str, *args: Any) -> list[Approval]:
        try:
            rows = self._connect().execute(f"SELECT {_COLUMNS} FROM approvals {sql}", args)
            return [_approval(row) for row in rows.fetchall()]
        except sqlite3.Error as exc:
            raise self._broken(exc) from None

    def request(
        self,
        binding: Binding,
        *,
        rule: str,
        shown: str,
        ttl: float,
        requester: str | None = None,
        needed: int = 1,
    ) -> tuple[Approval, bool]:
        now = time.time()
        with self._transaction() as db:
            db.execute(
                "UPDATE approvals SET status = 'expired' WHERE status = 'pending' AND expires <= ?",
                (now,),
            )
            db.execute(
                "DELETE FROM approvals WHERE status != 'pending' AND created < ?", (now - KEPT,)
            )
            row = db.execute(
                f"SELECT {_COLUMNS} FROM approvals WHERE project = ? AND agent = ? AND server = ? "
                "AND tool = ? AND digest = ? AND status = 'pending' ORDER BY created LIMIT 1",
                _key(binding),
            ).fetchone()
            if row is not None:
                return _approval(row), False
            approval = Approval(
                new_id(),
                binding,
                rule,
                shown,
                now,
                now + ttl,
                "pending",
                requester=requester,
                needed=needed,
            )
            db.execute(
                f"INSERT INTO approvals ({_COLUMNS}) VALUES ({', '.join('?' * 18)})",
                (
                    approval.id,
                    *_key(binding),
                    rule,
                    shown,
                    now,
                    now + ttl,
                    "pending",
                    None,
                    None,
                    None,
                    requester,
                    needed,
                    "[]",
                    None,
                ),
            )
        return approval, True

    def take(self, binding: Binding) -> Approval | None:
        now = time.time()
        with self._transaction() as db:
            row = db.execute(
                f"SELECT {_COLUMNS} FROM approvals WHERE project = ? AND agent = ? AND server = ? "
                "AND tool = ? AND digest = ? AND status = 'approved' "
                "AND (until IS NULL OR until > ?) ORDER BY created LIMIT 1",
                (*_key(binding), now),
            ).fetchone()
            if row is None:
                return None
            approval = _approval(row)
            if approval.until is None:  # once: used up now
                db.execute("UPDATE approvals SET status = 'used' WHERE id = ?", (approval.id,))
        return approval

    def get(self, approval_id: str) -> Approval | None:
        found = self._rows("WHERE id = ?", approval_id)
        return found[0] if found else None

    def listed(self, *, everything: bool = False) -> list[Approval]:
        if everything:
            return self._rows("ORDER BY created")
        return self._rows("WHERE status = 'pending' AND expires > ? ORDER BY created", time.time())

    def decide(
        self,
        approval_id: str,
        *,
        approve: bool,
        by: str,
        reason: str | None = None,
        until: float | None = None,
        approver: str | None = None,
    ) -> Approval:
        now = time.time()
        with self._transaction() as db:
            row = db.execute(
                f"SELECT {_COLUMNS} FROM approvals WHERE id = ?", (approval_id,)
            ).fetchone()
            if row is None:
                raise UnknownApproval(
                    f"no approval request {approval_id!r}",
                    hint="`bundlectl approvals list` shows the pending ones",
                )
            approval = _approval(row)
            state = approval.state(now)
            if state != "pending":
                raise UnknownApproval(
                    f"approval request {approval_id} is {state}, not pending; nothing changed",
                    hint="the caller makes the call again to ask anew"
                    if state in ("expired", "withdrawn")
                    else None,
                )
            status = "approved" if approve else "denied"
            given = approval.approved_by
            if approve and approval.needed > 1:
                given = _counted(approval, approver or by, by)
                db.execute(
                    "UPDATE approvals SET approved_by = ? WHERE id = ?",
                    (json.dumps(given), approval_id),
                )
                if len(given) < approval.needed:  # more people to go: still pending
                    return dataclasses.replace(approval, approved_by=given)
                by = ", ".join(name for _, name in given)
            db.execute(
                "UPDATE approvals SET status = ?, decided_by = ?, reason = ?, until = ? "
                "WHERE id = ?",
                (status, by, reason, until, approval_id),
            )
        return dataclasses.replace(
            approval, status=status, decided_by=by, reason=reason, until=until, approved_by=given
        )

    def withdraw(self, approval_id: str) -> None:
        with self._transaction() as db:
            db.execute(
                "UPDATE approvals SET status = 'withdrawn' WHERE id = ? AND status = 'pending'",
                (approval_id,),
            )

    def waiting(self, approval_id: str) -> None:
        with self._transaction() as db:
            db.execute(
                "UPDATE approvals SET waited = ? WHERE id = ? AND status = 'pending'",
                (time.time(), approval_id),
            )

    def charge(self, counters: list[Counter]) -> Counter | None:
        if not counters:
            return None
        now = time.time()
        with self._transaction() as db:
            for counter in counters:
                row = db.execute(
                    "SELECT count FROM counters WHERE key = ? AND ends > ?", (counter.key, now)
                ).fetchone()
                if row is not None and row[0] >= counter.limit:
                    return counter
            for counter in counters:
                db.execute(
                    "INSERT INTO counters (key, count, ends) VALUES (?, 1, ?) ON CONFLICT(key) "
                    "DO UPDATE SET count = count + 1",
                    (counter.key, counter.ends),
                )
            if self._swept < now - 60:  # windows that are over, now and then
                db.execute("DELETE FROM counters WHERE ends <= ?", (now,))
                self._swept = now
        return None

    def refund(self, counters: list[Counter]) -> None:
        if not counters:
            return
        now = time.time()
        with self._transaction() as db:
            for counter in counters:
                db.execute(
                    "UPDATE counters SET count = count - 1 "
                    "WHERE key = ? AND count > 0 AND ends > ?",
                    (counter.key, now),
                )

    def usage(self, keys: list[str], now: float) -> dict[str, int]:
        if not keys:
            return {}
        try:
            rows = self._connect().execute(
                f"SELECT key, count FROM counters WHERE ends > ? AND key IN "
                f"({', '.join('?' * len(keys))})",
                (now, *keys),
            )
            return dict(rows.fetchall())
        except sqlite3.Error as exc:
            raise self._broken(exc) from None

    def put_task(self, task_id: str, record: str, ttl: float, *, rev: int | None) -> bool:
        now = time.time()
        with self._transaction() as db:
            db.execute("DELETE FROM tasks WHERE expires <= ?", (now,))
            if rev is None:
                done = db.execute(
                    "INSERT OR IGNORE INTO tasks (id, record, rev, expires) VALUES (?, ?, 1, ?)",
                    (task_id, record, now + ttl),
                )
            else:
                done = db.execute(
                    "UPDATE tasks SET record = ?, rev = rev + 1, expires = ? "
                    "WHERE id = ? AND rev = ?",
                    (record, now + ttl, task_id, rev),
                )
            return done.rowcount == 1

    def task(self, task_id: str) -> tuple[str, int] | None:
        try:
            row = (
                self._connect()
                .execute(
                    "SELECT record, rev FROM tasks WHERE id = ? AND expires > ?",
                    (task_id, time.time()),
                )
                .fetchone()
            )
        except sqlite3.Error as exc:
            raise self._broken(exc) from None
        return (str(row[0]), int(row[1])) if row is not None else None


def _key(binding: Binding) -> tuple[str, str, str, str, str]:
    return (binding.project, binding.agent, binding.server, binding.tool, binding.digest)


def _approval(row: tuple[Any, ...]) -> Approval:
    (id_, project, agent, server, tool, digest, rule, shown, created, expires, status,
     decided_by, reason, until, requester, needed, approved_by, waited) = row  # fmt: skip
    binding = Binding(project, agent, server, tool, digest)
    given = tuple((str(k), str(n)) for k, n in json.loads(approved_by or "[]"))
    return Approval(
        id_,
        binding,
        rule,
        shown,
        created,
        expires,
        status,
        decided_by,
        reason,
        until,
        requester,
        int(needed or 1),
        given,
        waited,
    )


def _counted(approval: Approval, key: str, name: str) -> tuple[tuple[str, str], ...]:
    """The approvers of a request that needs several, with one more (UnknownApproval: they
    approved it already)."""
    if any(k == key for k, _ in approval.approved_by):
        raise UnknownApproval(
            f"{name} approved request {approval.id} already; it needs {approval.needed} "
            "different people",
            hint="another approver decides the rest",
        )
    return (*approval.approved_by, (key, name))


def _migrated(db: sqlite3.Connection) -> None:
    """A store written before a column existed gets it (every earlier row: NULL)."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(approvals)")}
    if "requester" not in columns:
        db.execute("ALTER TABLE approvals ADD COLUMN requester TEXT")
    if "needed" not in columns:
        db.execute("ALTER TABLE approvals ADD COLUMN needed INTEGER NOT NULL DEFAULT 1")
        db.execute("ALTER TABLE approvals ADD COLUMN approved_by TEXT NOT NULL DEFAULT '[]'")
    if "waited" not in columns:
        db.execute("ALTER TABLE approvals ADD COLUMN waited REAL")
