"""State that outlives one process (SPEC 11): calls held for an approver, the grants approvers
gave, and the quotas' counters. One small interface (`Store`); the embedded default is SQLite
in the user state folder (`sqlite.SqliteStore`), safe for several processes on one machine
(`exec` beside `serve`).

A held call is bound to (project, agent, server, tool, sha256 of its arguments): an approval lets
exactly that call through — a retry with other arguments is a new request. The store keeps
digests and the arguments as an approver is shown them (`Pipeline.redacted`: the values of
secret variables as their `${NAME}`, secret-shaped values hidden), never a secret's value.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from bundlectl.config import paths
from bundlectl.errors import BundlectlError, UsageError

if TYPE_CHECKING:
    from pathlib import Path

# What an approval request can be: `pending` until an approver answers or it expires; `approved`
# (once: until used; for a duration: until then), `used`, `denied`, `withdrawn` (the caller
# gave up: Ctrl-C), `expired` (no answer within its time).
STATUSES = ("pending", "approved", "denied", "used", "withdrawn", "expired")


class StateError(BundlectlError):
    """The state store cannot be read or written: approvals fail closed."""

    exit_code = 5


class UnknownApproval(UsageError):
    """An approval id that does not exist, or cannot be decided any more."""


@dataclass(frozen=True)
class Binding:
    """What an approval is bound to: one agent's call of one tool with exactly these arguments,
    in one project."""

    project: str
    agent: str
    server: str
    tool: str
    digest: str  # sha256 of the arguments' canonical JSON

    @property
    def qualified(self) -> str:
        return f"{self.server}.{self.tool}"

    @property
    def tool_change(self) -> bool:
        """Whether this binds a changed tool's definition (a "tool changed" request)."""
        return self.digest.startswith(TOOL_CHANGE)


# A binding's digest that starts so binds a tool's new definition, not a call's arguments: a
# "tool changed" request (`pin_tools`, #60), of no agent, approved once for the definition.
TOOL_CHANGE = "tool:"

WAITED_EVERY = 2.0  # seconds between a waiting caller's "still waiting"


@dataclass(frozen=True)
class Approval:
    """One request for approval, and what became of it."""

    id: str
    binding: Binding
    rule: str  # the rule that asked, and where it is written
    shown: str  # the arguments as the approver sees them (JSON; secrets kept as references)
    created: float
    expires: float  # a pending request expires then
    status: str
    decided_by: str | None = None
    reason: str | None = None
    until: float | None = None  # an approval for a duration: good until then (else once)
    # Who made the call (the `sub` of the identity token it came with; None: a static token,
    # the command line): that person may not approve it.
    requester: str | None = None
    needed: int = 1  # how many different people must approve (`approvals: 2`)
    # Who has approved so far while more are needed: (their key — `sub`, else their name —
    # and the name shown), in order.
    approved_by: tuple[tuple[str, str], ...] = ()
    # When a caller last said it waits for the answer (`exec`, a client held open by the
    # gateway; every WAITED_EVERY seconds while it does); None: no one has.
    waited: float | None = None

    def waited_on(self, now: float | None = None) -> bool:
        """Whether a caller waits for the answer now (it said so lately)."""
        now = time.time() if now is None else now
        return self.waited is not None and now - self.waited < 3 * WAITED_EVERY

    @property
    def progress(self) -> str:
        """`1 of 2 approvals` while a request needs more than one; else ``."""
        if self.needed <= 1:
            return ""
        done = self.needed if self.status in ("approved", "used") else len(self.approved_by)
        return f"{done} of {self.needed} approvals"

    def state(self, now: float | None = None) -> str:
        """Its status now: a pending request past its expiry is `expired`, an approval for a
        duration past its end too."""
        now = time.time() if now is None else now
        if self.status == "pending" and now >= self.expires:
            return "expired"
        if self.status == "approved" and self.until is not None and now >= self.until:
            return "expired"
        return self.status


@dataclass(frozen=True)
class Counter:
    """One quota's count for one agent in one window: `key` names the three; at most `limit`
    calls until `ends` (a time.time() stamp), when the window and its count are over."""

    key: str
    limit: int
    ends: float


class Store(Protocol):
    """Where held calls and approvals live."""

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
        """The pending request for `binding`: the one already waiting, or a new one (True)
        made by `requester` (the call's subject, when an identity token named one), that
        `needed` different people must approve."""
        ...

    def take(self, binding: Binding) -> Approval | None:
        """An approval of `binding` that is still good, used now (an approval for once is used
        up; one for a duration stays); None: there is none."""
        ...

    def get(self, approval_id: str) -> Approval | None: ...

    def listed(self, *, everything: bool = False) -> list[Approval]:
        """The pending requests (`everything`: every request kept), oldest first."""
        ...

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
        """Approve or deny a pending request (UnknownApproval: no such pending request). A
        request that needs several people counts each approval (`approver`: who, told apart
        by their `sub`; else by `by`) and stays pending until enough different people have
        approved; the same person twice is UnknownApproval; a denial by anyone ends it."""
        ...

    def withdraw(self, approval_id: str) -> None:
        """The caller stopped waiting: a pending request is withdrawn."""
        ...

    def waiting(self, approval_id: str) -> None:
        """A caller waits for the answer to this request (said every WAITED_EVERY seconds)."""
        ...

    def charge(self, counters: list[Counter]) -> Counter | None:
        """Count one call against every counter, all or none: the first counter that is full
        (nothing counted then), or None (each counted once)."""
        ...

    def usage(self, keys: list[str], now: float) -> dict[str, int]:
        """The calls counted so far in the current window of each key (absent: none)."""
        ...

    def refund(self, counters: list[Counter]) -> None:
        """Take back one count of each counter whose window is not over (a call counted when
        it was let through, then refused for its arguments before anything was sent)."""
        ...

    def put_task(self, task_id: str, record: str, ttl: float, *, rev: int | None) -> bool:
        """Write a task's record (`gateway/tasks.py`, JSON), kept `ttl` seconds from now: a new
        task when `rev` is None (False: the id is taken), else over revision `rev` only (False:
        another process wrote it since; read it again)."""
        ...

    def task(self, task_id: str) -> tuple[str, int] | None:
        """A task's record and its revision; None: no such task (or it expired)."""
        ...


class TokenStore(Protocol):
    """Where replicas share the privacy token maps of agents (`privacy.tokens`): Redis."""

    def token(self, scope: str, index: str, label: str, sealed: str, ttl: int) -> str:
        """The token of a value (by its keyed digest `index`), given it now if it has none."""
        ...

    def sealed(self, scope: str, token: str) -> str | None:
        """The encrypted value behind a token (None: the map does not know it)."""
        ...


def new_id() -> str:
    """An approval id: short enough to type, random enough not to guess (60 bits)."""
    alphabet = "23456789abcdefghjkmnpqrstuvwxyz"
    return "".join(secrets.choice(alphabet) for _ in range(12))


def default_path() -> Path:
    return paths.state_dir() / "state.sqlite3"


def open_store(url: str | None = None) -> Store:
    """The state store: Redis at `url` (`state.url`, its `${VAR}` references expanded), else
    SQLite in the user state folder."""
    if url is not None:
        import os  # noqa: PLC0415

        from bundlectl.config.expand import expand  # noqa: PLC0415
        from bundlectl.state.redis import RedisStore  # noqa: PLC0415 - only when configured

        return RedisStore(expand(url, os.environ, where="state.url"))
    from bundlectl.state.sqlite import SqliteStore  # noqa: PLC0415 - only when a call is held

    return SqliteStore(default_path())
