"""The state stores (SPEC 11): the same contract from SQLite (one machine) and Redis (replicas),
a real `redis-server` started on a Unix socket, and two gateway processes sharing approvals
and quota counts through it."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from bundlectl.state import Binding, Counter, StateError, Store, UnknownApproval
from bundlectl.state.redis import RedisStore
from bundlectl.state.sqlite import SqliteStore
from tests.conftest import TEST_SERVERS, Run, write
from tests.gateway.test_gateway import PY, connected, texts

BINDING = Binding("/project", "writer", "files", "write_file", "sha256:abc")


@pytest.fixture(params=["sqlite", "redis"])
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """A way to open the store as another process would (a connection of its own)."""
    if request.param == "sqlite":
        path = tmp_path / "state.sqlite3"
        return lambda: SqliteStore(path)
    url = request.getfixturevalue("redis_url")
    return lambda: RedisStore(url)


def test_a_request_is_reused_approved_once_and_used_up(store_factory: Any) -> None:
    store: Store = store_factory()
    first, new = store.request(BINDING, rule="r", shown='{"a": 1}', ttl=600)
    again, new_again = store_factory().request(BINDING, rule="r", shown='{"a": 1}', ttl=600)
    assert (new, new_again, again.id) == (True, False, first.id)
    assert [a.id for a in store.listed()] == [first.id]
    assert store.take(BINDING) is None  # nothing approved yet
    decided = store_factory().decide(first.id, approve=True, by="alice")
    assert (decided.status, decided.decided_by) == ("approved", "alice")
    assert store.listed() == []
    other = Binding(*[*vars(BINDING).values()][:4], "sha256:other")  # other arguments
    assert store.take(other) is None
    taken = store.take(BINDING)
    assert taken is not None and taken.id == first.id
    assert store.take(BINDING) is None  # once: used up
    used = store.get(first.id)
    assert used is not None and used.status == "used"
    with pytest.raises(UnknownApproval, match="is used, not pending"):
        store.decide(first.id, approve=True, by="bob")
    with pytest.raises(UnknownApproval, match="no approval request 'nope'"):
        store.decide("nope", approve=False, by="bob")


def test_an_approval_for_a_while_stays_and_a_denial_or_withdrawal_grants_nothing(
    store_factory: Any,
) -> None:
    store: Store = store_factory()
    lasting, _ = store.request(BINDING, rule="r", shown="{}", ttl=600)
    store.decide(lasting.id, approve=True, by="alice", until=time.time() + 3600)
    assert [store.take(BINDING) is not None for _ in range(3)] == [True, True, True]
    denied_binding = Binding("/p", "a", "s", "t", "sha256:d")
    denied, _ = store.request(denied_binding, rule="r", shown="{}", ttl=600)
    after = store.decide(denied.id, approve=False, by="bob", reason="no")
    assert (after.status, after.reason) == ("denied", "no")
    assert store.take(denied_binding) is None
    gone_binding = Binding("/p", "a", "s", "t", "sha256:w")
    gone, _ = store.request(gone_binding, rule="r", shown="{}", ttl=600)
    store.withdraw(gone.id)
    withdrawn = store.get(gone.id)
    assert withdrawn is not None and withdrawn.state() == "withdrawn"
    fresh, new = store.request(gone_binding, rule="r", shown="{}", ttl=600)
    assert new and fresh.id != gone.id
    everything = {a.id: a.state() for a in store.listed(everything=True)}
    assert everything[denied.id] == "denied" and everything[gone.id] == "withdrawn"


def test_a_request_expires_unanswered(store_factory: Any) -> None:
    store: Store = store_factory()
    short, _ = store.request(BINDING, rule="r", shown="{}", ttl=0.2)
    deadline = time.monotonic() + 30
    while (current := store.get(short.id)) is not None and current.state() == "pending":
        assert time.monotonic() < deadline
        time.sleep(0.02)
    with pytest.raises(UnknownApproval, match="is expired, not pending"):
        store.decide(short.id, approve=True, by="late")
    renewed, new = store.request(BINDING, rule="r", shown="{}", ttl=600)
    assert new and renewed.id != short.id


def test_fifty_concurrent_calls_against_a_limit_of_twenty_admit_exactly_twenty(
    store_factory: Any,
) -> None:
    counters = [Counter("p|limit|agent|0", 20, time.time() + 3600)]
    results: list[Any] = []
    start = threading.Barrier(50)

    def call() -> None:
        store = store_factory()
        start.wait()
        results.append(store.charge(counters))

    threads = [threading.Thread(target=call) for _ in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results.count(None) == 20 and len(results) == 50
    assert store_factory().usage([counters[0].key], time.time()) == {counters[0].key: 20}
    # all or none: a full counter beside a roomy one counts the call against neither
    roomy = Counter("p|roomy|agent|0", 5, time.time() + 3600)
    assert store_factory().charge([roomy, counters[0]]) == counters[0]
    assert store_factory().usage([roomy.key], time.time()) == {}


def test_an_unreachable_redis_fails_closed_without_showing_its_password(
    project: Path, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(
        project / "bundlectl.yaml",
        """
        version: 1
        bundles: [basic]
        agents:
          reader: {allow: [files.read_file]}
        state: {url: "redis://:${REDIS_PASSWORD}@127.0.0.1:1/0"}
        limits:
          - {agents: [reader], tools: [files.read_file], calls: 5, per: 1h}
        policy: {default: deny}
        """,
    )
    (project / "a.txt").write_text("hi")
    monkeypatch.setenv("REDIS_PASSWORD", "hunter2-secret")
    refused = run("exec", "-a", "reader", "files.read_file", "path=a.txt")
    assert refused.code == 5, refused.err
    assert "cannot use the state store redis://***@127.0.0.1:1/0" in refused.err
    assert "hunter2" not in refused.out + refused.err
    assert "Traceback" not in refused.err and refused.out == ""
    with pytest.raises(StateError, match="not a Redis URL"):
        RedisStore("redis://host:notaport")


def _replica(project: Path, env: dict[str, str]) -> Any:
    """One gateway process (`serve --agent bot` over stdio) of the project, for the SDK's client."""
    from mcp import StdioServerParameters

    argv = ["-m", "bundlectl", "serve", "--agent", "bot"]
    return StdioServerParameters(command=PY, args=argv, cwd=str(project), env=env)


def test_two_gateway_processes_share_approvals_and_counts_through_redis(
    project: Path, tmp_path: Path, redis_url: str, run: Run
) -> None:

    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        bundles: [basic]
        servers:
          kitchen:
            command: {PY}
            args: ["{TEST_SERVERS / "kitchen.py"}"]
        agents:
          bot:
            allow: ["kitchen.*"]
            ask: [files.write_file]
        state: {{url: "{redis_url}"}}
        limits:
          - {{agents: [bot], tools: [kitchen.echo], calls: 3, per: 1h}}
        policy:
          default: deny
          approvals: {{ttl: 10m}}
        """,
    )
    env = {**os.environ, "BUNDLECTL_HOME": str(tmp_path / "home")}

    def params() -> Any:
        return _replica(project, env)

    write_args = {"path": "shared.txt", "content": "approved once, used elsewhere"}

    async def replicas() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with connected(params()) as one, connected(params()) as two:
            seen["held"] = await one.call_tool("files__write_file", write_args)
            listed = run("approvals", "list", "--format", "json")  # the project's Redis
            [request] = json.loads(listed.out)["approvals"]
            assert run("approvals", "approve", request["id"]).code == 0
            seen["on_two"] = await two.call_tool("files__write_file", write_args)
            seen["again_on_one"] = await one.call_tool("files__write_file", write_args)
            echoes = [one, two, one, two]
            seen["echo"] = [await c.call_tool("kitchen__echo", {"text": "x"}) for c in echoes]
        return seen

    seen = anyio.run(replicas)
    assert seen["held"].is_error and "held as approval request" in texts(seen["held"])[0]
    assert not seen["on_two"].is_error, texts(seen["on_two"])
    assert (project / "shared.txt").read_text() == write_args["content"]
    assert seen["again_on_one"].is_error  # approved once: used by the other replica
    assert [r.is_error for r in seen["echo"]] == [False, False, False, True]
    assert "limits[0]: 3 call(s) of kitchen.echo per 1h" in texts(seen["echo"][3])[0]
    assert not any(Path(env["BUNDLECTL_HOME"], "state").glob("state.sqlite3"))


PRIVACY_KEY = "k" * 40


def test_replicas_share_an_agents_privacy_token_map_encrypted(
    project: Path, tmp_path: Path, redis_url: str, run: Run
) -> None:
    """#39: with `state.url`, a token one gateway gave is turned back into its value by
    another (`detokenize`); the store holds the value encrypted only, and a gateway without the
    key does not start."""
    import redis

    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        bundles: [basic]
        agents:
          bot: {{allow: [files.read_file, files.write_file]}}
        state: {{url: "{redis_url}"}}
        privacy: {{tokenize: [email], detokenize: [files.write_file]}}
        policy: {{default: deny}}
        """,
    )
    (project / "contact.txt").write_text("write to ada@example.com")
    env = {**os.environ, "BUNDLECTL_HOME": str(tmp_path / "home")}
    keyed = {**env, "BUNDLECTL_PRIVACY_KEY": PRIVACY_KEY}

    def params() -> Any:
        return _replica(project, keyed)

    (project / "other.txt").write_text("or to bob@example.com")

    db = redis.Redis.from_url(redis_url)
    kept: list[str] = []

    async def replicas() -> tuple[str, Any, Any]:
        async with connected(params()) as one, connected(params()) as two:
            [read] = texts(await one.call_tool("files__read_file", {"path": "contact.txt"}))
            token = read.removeprefix("write to ")
            written = {"path": "out.txt", "content": f"mail {token}"}
            wrote = await two.call_tool("files__write_file", written)
            kept.append(repr({key: db.dump(key) for key in db.keys("*")}))
            db.shutdown(nosave=True)  # the store goes away
            gone = await one.call_tool("files__read_file", {"path": "other.txt"})
            return read, wrote, gone

    read, wrote, gone = anyio.run(replicas)
    assert "tokens:" in kept[0] and "ada@example.com" not in kept[0]  # sealed, indexed by HMAC
    # a value no map holds yet, with the store gone: refused, never shown as it is
    assert gone.is_error and "cannot use the state store" in texts(gone)[0]
    assert "bob@example.com" not in texts(gone)[0]
    assert read == "write to [EMAIL_1]"
    assert not wrote.is_error, texts(wrote)
    assert (project / "out.txt").read_text() == "mail ada@example.com"  # the other replica's
    refused = subprocess.run(
        [PY, "-m", "bundlectl", "serve", "--agent", "bot"],
        cwd=project,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode == 2 and "BUNDLECTL_PRIVACY_KEY" in refused.stderr


def test_a_shared_token_is_never_given_to_a_second_value(redis_url: str) -> None:
    """A map that expired in the store starts again without reusing a number, so a token a
    replica still remembers can never be turned into another value; a wrong key reads
    nothing."""
    from bundlectl.privacy.tokens import SharedTokens

    store = RedisStore(redis_url)
    one = SharedTokens(store, PRIVACY_KEY, "/project\x1fbot", 60)
    assert one.token_for("EMAIL", "ada@example.com") == "[EMAIL_1]"
    assert one.token_for("EMAIL", "ada@example.com") == "[EMAIL_1]"  # the same value, once
    assert one.value_of("[EMAIL_1]") == "ada@example.com"
    other = SharedTokens(store, "x" * 40, "/project\x1fbot", 60)
    assert other.value_of("[EMAIL_1]") is None  # sealed with another key
    import redis

    db = redis.Redis.from_url(redis_url)
    db.delete(*db.keys("bundlectl:tokens:*:index"), *db.keys("bundlectl:tokens:*:sealed"))
    assert one.value_of("[EMAIL_1]") is None  # expired
    assert one.token_for("EMAIL", "bob@example.com") == "[EMAIL_2]"  # not [EMAIL_1] again
    assert db.ttl(db.keys("bundlectl:tokens:*:index")[0]) > 0  # kept a while after its use


def test_a_refund_takes_back_one_count_and_never_goes_below_zero(store_factory: Any) -> None:
    """#54 item 5: a call refused for its arguments gets its quota count back."""
    store: Store = store_factory()
    counter = Counter(f"refund-{time.time_ns()}", 2, time.time() + 60)
    assert store.charge([counter]) is None and store.charge([counter]) is None
    assert store.charge([counter]) == counter  # full
    store_factory().refund([counter])
    assert store.usage([counter.key], time.time()) == {counter.key: 1}
    assert store.charge([counter]) is None  # the refunded call's place
    for _ in range(3):
        store.refund([counter])
    assert store.usage([counter.key], time.time()).get(counter.key, 0) == 0


def test_a_request_that_needs_two_people_counts_distinct_approvers(store_factory: Any) -> None:
    """#54 item 2: `approvals: 2` — two different people before the call runs (told apart by
    their `sub`), the same one twice refused, a denial by either ends it; the count is the
    store's own (one Lua script in Redis), so two replicas share it."""
    store: Store = store_factory()
    binding = Binding("/p", "a", "s", "t", f"sha256:two-{time.time_ns()}")
    first, _ = store.request(binding, rule="r", shown="{}", ttl=600, requester="ana", needed=2)
    assert (first.needed, first.requester, first.progress) == (2, "ana", "0 of 2 approvals")
    half = store_factory().decide(first.id, approve=True, by="Carol", approver="carol")
    assert half.status == "pending" and half.approved_by == (("carol", "Carol"),)
    assert half.progress == "1 of 2 approvals" and store.take(binding) is None
    with pytest.raises(UnknownApproval, match=r"approved request \w+ already"):
        store_factory().decide(first.id, approve=True, by="Carol again", approver="carol")
    done = store_factory().decide(first.id, approve=True, by="Dave", approver="dave")
    assert (done.status, done.decided_by) == ("approved", "Carol, Dave")
    assert store.take(binding) is not None
    other = Binding("/p", "a", "s", "t", f"sha256:deny-{time.time_ns()}")
    second, _ = store.request(other, rule="r", shown="{}", ttl=600, needed=2)
    store.decide(second.id, approve=True, by="Carol", approver="carol")
    denied = store_factory().decide(second.id, approve=False, by="Dave", reason="no")
    assert denied.status == "denied" and store.take(other) is None


def test_a_task_record_is_written_once_new_then_only_over_the_revision_read(
    store_factory: Any,
) -> None:
    """`gateway/tasks.py`'s records: a new task never overwrites one (ids are random, but a
    replica must not clobber another's); an update written over a stale revision is refused,
    so a client's cancel written by one replica is not lost to another's lease renewal; and a
    record is gone when its time is up."""
    store: Store = store_factory()
    assert store.task("t1") is None
    assert store.put_task("t1", '{"n": 1}', 60, rev=None)
    assert not store_factory().put_task("t1", '{"n": "other"}', 60, rev=None)
    record, rev = store_factory().task("t1") or ("", 0)
    assert record == '{"n": 1}'
    # Two writers read the same revision: the first wins, the second must read again.
    assert store.put_task("t1", '{"n": 2, "cancel": true}', 60, rev=rev)
    assert not store_factory().put_task("t1", '{"n": 2, "lease": 9}', 60, rev=rev)
    record, newer = store.task("t1") or ("", 0)
    assert (record, newer) == ('{"n": 2, "cancel": true}', rev + 1)
    assert store.put_task("t2", "{}", 0.3, rev=None)
    time.sleep(0.4)
    assert store_factory().task("t2") is None and store.task("t1") is not None
