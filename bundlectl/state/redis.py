"""The state store for replicas: Redis (`state: {url: redis://...}`), which every team already
runs. Gateways behind a load balancer share held calls, approvals and quota counters through
it. Every change that reads before it writes is one Lua script, which Redis runs atomically:
two replicas cannot both take a one-time approval, and concurrent calls against a limit of 20
admit exactly 20. Keys expire on their own (a counter at its window's end, a request a week
after it was made).

Keys, under `bundlectl:` — `approval:ID` (a hash), `pending:B` and `grant:B` (the id of a
binding's pending request and of its approval; B is the sha256 of the binding), `task:ID` (a
client's task, `gateway/tasks.py`: its record and revision), `approvals` (a
sorted set of ids by creation), `count:KEY` (a counter); the privacy token maps of agents
shared by replicas (`privacy.tokens`): `tokens:S:index` (keyed digest of a value → its token),
`tokens:S:sealed` (token → the value, encrypted by the gateway), both expiring a while after
their last use, and `tokens:S:counts` (the last number of each label, kept: a number is never
given to a second value).
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from bundlectl.state import Approval, Binding, Counter, StateError, UnknownApproval, new_id

PREFIX = "bundlectl:"
KEPT = 7 * 86400  # seconds a request is kept once made
TIMEOUT = 5.0  # seconds to connect or get an answer: a store that does not answer fails closed

_REQUEST = """
local pending = redis.call('GET', KEYS[1])
if pending then
  local status = redis.call('HGET', ARGV[13] .. pending, 'status')
  local expires = tonumber(redis.call('HGET', ARGV[13] .. pending, 'expires') or '0')
  if status == 'pending' and expires > tonumber(ARGV[9]) then
    return {pending, 0}
  end
end
local key = ARGV[13] .. ARGV[1]
redis.call('HSET', key, 'project', ARGV[2], 'agent', ARGV[3], 'server', ARGV[4],
  'tool', ARGV[5], 'digest', ARGV[6], 'rule', ARGV[7], 'shown', ARGV[8],
  'created', ARGV[9], 'expires', ARGV[10], 'status', 'pending', 'requester', ARGV[14],
  'needed', ARGV[15], 'approved_by', '[]')
redis.call('EXPIRE', key, ARGV[11])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[12])
redis.call('ZADD', KEYS[2], ARGV[9], ARGV[1])
return {ARGV[1], 1}
"""

_TAKE = """
local id = redis.call('GET', KEYS[1])
if not id then return false end
local key = ARGV[2] .. id
local status = redis.call('HGET', key, 'status')
local untils = redis.call('HGET', key, 'until')
if status ~= 'approved' then redis.call('DEL', KEYS[1]) return false end
if untils and untils ~= '' then
  if tonumber(untils) <= tonumber(ARGV[1]) then redis.call('DEL', KEYS[1]) return false end
  return id
end
redis.call('HSET', key, 'status', 'used')
redis.call('DEL', KEYS[1])
return id
"""

_DECIDE = """
local key = KEYS[1]
if redis.call('EXISTS', key) == 0 then return 'missing' end
local status = redis.call('HGET', key, 'status')
local expires = tonumber(redis.call('HGET', key, 'expires'))
if status == 'pending' and expires <= tonumber(ARGV[5]) then return 'expired' end
if status ~= 'pending' then return status end
local by = ARGV[2]
local needed = tonumber(redis.call('HGET', key, 'needed') or '1')
if ARGV[1] == 'approved' and needed > 1 then
  local given = cjson.decode(redis.call('HGET', key, 'approved_by') or '[]')
  local names = {}
  for _, person in ipairs(given) do
    if person[1] == ARGV[8] then return 'again' end
    table.insert(names, person[2])
  end
  table.insert(given, {ARGV[8], ARGV[2]})
  table.insert(names, ARGV[2])
  redis.call('HSET', key, 'approved_by', cjson.encode(given))
  if #given < needed then return 'counted' end
  by = table.concat(names, ', ')
end
redis.call('HSET', key, 'status', ARGV[1], 'decided_by', by, 'reason', ARGV[3],
  'until', ARGV[4])
redis.call('DEL', KEYS[2])
if ARGV[1] == 'approved' then
  redis.call('SET', KEYS[3], ARGV[6], 'EX', ARGV[7])
end
return 'ok'
"""

_WITHDRAW = """
if redis.call('HGET', KEYS[1], 'status') == 'pending' then
  redis.call('HSET', KEYS[1], 'status', 'withdrawn')
  redis.call('DEL', KEYS[2])
end
return 1
"""

# A waiting caller's mark, on a pending request only (one that expired away stays gone)
_WAITING = """
if redis.call('HGET', KEYS[1], 'status') == 'pending' then
  redis.call('HSET', KEYS[1], 'waited', ARGV[1])
end
return 1
"""

_CHARGE = """
for i, key in ipairs(KEYS) do
  local count = tonumber(redis.call('GET', key) or '0')
  if count >= tonumber(ARGV[i * 2 - 1]) then return i end
end
for i, key in ipairs(KEYS) do
  redis.call('INCR', key)
  redis.call('PEXPIREAT', key, ARGV[i * 2])
end
return 0
"""


_REFUND = """
for i, key in ipairs(KEYS) do
  if tonumber(redis.call('GET', key) or '0') > 0 then redis.call('DECR', key) end
end
return 0
"""


_TOKEN = """
local token = redis.call('HGET', KEYS[1], ARGV[1])
if not token then
  local n = redis.call('HINCRBY', KEYS[3], ARGV[2], 1)
  token = '[' .. ARGV[2] .. '_' .. n .. ']'
  redis.call('HSET', KEYS[1], ARGV[1], token)
  redis.call('HSET', KEYS[2], token, ARGV[3])
end
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('EXPIRE', KEYS[2], ARGV[4])
return token
"""


_PUT_TASK = """
local rev = tonumber(redis.call('HGET', KEYS[1], 'rev') or '0')
if ARGV[3] == '' then
  if rev > 0 then return 0 end
elseif rev ~= tonumber(ARGV[3]) then
  return 0
end
redis.call('HSET', KEYS[1], 'record', ARGV[1], 'rev', rev + 1)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""


def _binding_key(binding: Binding) -> str:
    joined = "\x1f".join(
        (binding.project, binding.agent, binding.server, binding.tool, binding.digest)
    )
    return hashlib.sha256(joined.encode()).hexdigest()


class RedisStore:
    """`state.Store` in Redis."""

    def __init__(self, url: str) -> None:
        try:
            import redis  # noqa: PLC0415 - only for a project that names a Redis store
        except ImportError:
            raise StateError(
                "the state store is Redis (state.url), and the `redis` package is not installed",
                hint="pip install 'bundlectl[redis]'",
            ) from None
        self._errors: tuple[type[Exception], ...] = (redis.RedisError,)
        self.where = _shown_url(url)
        try:
            self._db: Any = redis.Redis.from_url(
                url,
                socket_timeout=TIMEOUT,
                socket_connect_timeout=TIMEOUT,
                decode_responses=True,
            )
        except ValueError as exc:
            raise StateError(f"state.url is not a Redis URL: {exc}") from None
        self._scripts: dict[str, Any] = {}

    def _run(self, name: str, source: str, keys: list[str], args: list[Any]) -> Any:
        script = self._scripts.get(name)
        if script is None:
            script = self._scripts[name] = self._db.register_script(source)
        try:
            return script(keys=keys, args=args)
        except self._errors as exc:
            raise self._broken(exc) from None

    def _broken(self, exc: Exception) -> StateError:
        return StateError(
            f"cannot use the state store {self.where}: {exc}; calls that need an approval or "
            "a quota are refused until it can be",
            hint="check that Redis is running and state.url (its host, port, password)",
        )

    def _approval(self, approval_id: str) -> Approval | None:
        try:
            data = self._db.hgetall(PREFIX + "approval:" + approval_id)
        except self._errors as exc:
            raise self._broken(exc) from None
        if not data:
            return None
        binding = Binding(
            data["project"], data["agent"], data["server"], data["tool"], data["digest"]
        )
        until = data.get("until") or None
        return Approval(
            approval_id,
            binding,
            data["rule"],
            data["shown"],
            float(data["created"]),
            float(data["expires"]),
            data["status"],
            data.get("decided_by") or None,
            data.get("reason") or None,
            float(until) if until is not None else None,
            data.get("requester") or None,
            int(data.get("needed") or 1),
            tuple((str(k), str(n)) for k, n in json.loads(data.get("approved_by") or "[]")),
            float(data["waited"]) if data.get("waited") else None,
        )

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
        b = _binding_key(binding)
        fresh = new_id()
        args = [
            fresh,
            binding.project,
            binding.agent,
            binding.server,
            binding.tool,
            binding.digest,
            rule,
            shown,
            repr(now),
            repr(now + ttl),
            KEPT,
            max(1, int(ttl * 1000)),
            PREFIX + "approval:",
            requester or "",
            needed,
        ]
        keys = [PREFIX + "pending:" + b, PREFIX + "approvals"]
        approval_id, new = self._run("request", _REQUEST, keys, args)
        approval = self._approval(approval_id)
        if approval is None:  # expired between the two commands: ask again
            return self.request(
                binding, rule=rule, shown=shown, ttl=ttl, requester=requester, needed=needed
            )
        return approval, bool(new)

    def take(self, binding: Binding) -> Approval | None:
        keys = [PREFIX + "grant:" + _binding_key(binding)]
        taken = self._run("take", _TAKE, keys, [repr(time.time()), PREFIX + "approval:"])
        return self._approval(taken) if taken else None

    def get(self, approval_id: str) -> Approval | None:
        return self._approval(approval_id)

    def listed(self, *, everything: bool = False) -> list[Approval]:
        try:
            self._db.zremrangebyscore(PREFIX + "approvals", "-inf", time.time() - KEPT)
            ids = self._db.zrange(PREFIX + "approvals", 0, -1)
        except self._errors as exc:
            raise self._broken(exc) from None
        found = [a for a in map(self._approval, ids) if a is not None]
        if everything:
            return found
        now = time.time()
        return [a for a in found if a.state(now) == "pending"]

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
        approval = self._approval(approval_id)
        if approval is None:
            raise UnknownApproval(
                f"no approval request {approval_id!r}",
                hint="`bundlectl approvals list` shows the pending ones",
            )
        now = time.time()
        b = _binding_key(approval.binding)
        keys = [
            PREFIX + "approval:" + approval_id,
            PREFIX + "pending:" + b,
            PREFIX + "grant:" + b,
        ]
        status = "approved" if approve else "denied"
        lasts = int((until - now) if until is not None else KEPT) + 1
        args = [status, by, reason or "", repr(until) if until else "", repr(now), approval_id]
        answer = self._run("decide", _DECIDE, keys, [*args, lasts, approver or by])
        if answer == "missing":
            raise UnknownApproval(f"no approval request {approval_id!r}")
        if answer == "again":
            raise UnknownApproval(
                f"{by} approved request {approval_id} already; it needs {approval.needed} "
                "different people",
                hint="another approver decides the rest",
            )
        if answer == "counted":  # more people to go: still pending
            counted = self._approval(approval_id)
            assert counted is not None
            return counted
        if answer != "ok":
            raise UnknownApproval(
                f"approval request {approval_id} is {answer}, not pending; nothing changed",
                hint="the caller makes the call again to ask anew"
                if answer in ("expired", "withdrawn")
                else None,
            )
        decided = self._approval(approval_id)
        assert decided is not None
        return decided

    def withdraw(self, approval_id: str) -> None:
        approval = self._approval(approval_id)
        if approval is None:
            return
        b = _binding_key(approval.binding)
        keys = [PREFIX + "approval:" + approval_id, PREFIX + "pending:" + b]
        self._run("withdraw", _WITHDRAW, keys, [])

    def waiting(self, approval_id: str) -> None:
        self._run("waiting", _WAITING, [PREFIX + "approval:" + approval_id], [repr(time.time())])

    def charge(self, counters: list[Counter]) -> Counter | None:
        if not counters:
            return None
        keys = [PREFIX + "count:" + c.key for c in counters]
        args: list[Any] = []
        for counter in counters:
            args += [counter.limit, int(counter.ends * 1000)]
        full = int(self._run("charge", _CHARGE, keys, args))
        return counters[full - 1] if full else None

    def refund(self, counters: list[Counter]) -> None:
        if counters:  # an expired key is gone: nothing to take back there
            self._run("refund", _REFUND, [PREFIX + "count:" + c.key for c in counters], [])

    def usage(self, keys: list[str], now: float) -> dict[str, int]:
        if not keys:
            return {}
        try:
            values = self._db.mget([PREFIX + "count:" + key for key in keys])
        except self._errors as exc:
            raise self._broken(exc) from None
        return {key: int(v) for key, v in zip(keys, values, strict=True) if v is not None}

    def put_task(self, task_id: str, record: str, ttl: float, *, rev: int | None) -> bool:
        args = [record, max(int(ttl * 1000), 1), "" if rev is None else rev]
        return bool(self._run("put_task", _PUT_TASK, [PREFIX + "task:" + task_id], args))

    def task(self, task_id: str) -> tuple[str, int] | None:
        try:
            found = self._db.hmget(PREFIX + "task:" + task_id, ["record", "rev"])
        except self._errors as exc:
            raise self._broken(exc) from None
        record, rev = found
        return (record, int(rev)) if record is not None and rev is not None else None

    def token(self, scope: str, index: str, label: str, sealed: str, ttl: int) -> str:
        """The token of the value whose keyed digest is `index` in the token map `scope`: the
        one it has, or the label's next number (`sealed`: the value, encrypted, kept for it);
        the map is kept `ttl` seconds after this use."""
        keys = [f"{PREFIX}tokens:{scope}:{part}" for part in ("index", "sealed", "counts")]
        token: str = self._run("token", _TOKEN, keys, [index, label, sealed, ttl])
        return token

    def sealed(self, scope: str, token: str) -> str | None:
        """The encrypted value behind `token` in the token map `scope` (None: unknown)."""
        try:
            found: str | None = self._db.hget(f"{PREFIX}tokens:{scope}:sealed", token)
        except self._errors as exc:
            raise self._broken(exc) from None
        return found


def _shown_url(url: str) -> str:
    """The URL without its password (messages, never the secret)."""
    scheme, _, rest = url.partition("://")
    if "@" in rest:
        rest = "***@" + rest.split("@", 1)[1]
    return f"{scheme}://{rest}" if scheme else url
