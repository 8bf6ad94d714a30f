"""The call pipeline's policy side, through its interfaces (a confirmer, an audit sink)."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from bundlectl.calls.call import CallOutcome, CallRequest
from bundlectl.calls.confirm import After, always_yes
from bundlectl.calls.pipeline import Pipeline
from bundlectl.config.project import load_project
from bundlectl.errors import (
    CallTimeout,
    Interrupted,
    PolicyDenied,
    ServerCrashed,
    ServerError,
    ToolCallError,
    UsageError,
)
from bundlectl.policy.rules import Decision, default_agent
from bundlectl.resolve.resolved import resolve_project
from tests.conftest import TEST_SERVERS, Run, audit_records, write


class Recorded:
    """An audit sink that keeps what it is given (the protocol's second implementation)."""

    def __init__(self) -> None:
        self.records: list[tuple[str, str, str]] = []  # outcomes (pending ones kept apart)
        self.pending: list[str] = []  # the call ids recorded as pending, in order

    def record(self, decision: Decision, outcome: str, duration_ms: float, arguments: Any) -> None:
        if outcome == "pending":  # a call let through: before the server can act
            assert decision.call is not None and decision.call not in self.pending
            self.pending.append(decision.call)
            return
        # an outcome of a call that was let through completes its pending record
        assert decision.call is None or decision.call in self.pending, decision
        self.records.append((decision.agent, decision.qualified, outcome))


@pytest.fixture
def resolution(project: Path) -> Any:
    write(
        project / "bundlectl.yaml",
        """
        version: 1
        bundles: [basic]
        servers:
          off: {command: x, disabled: true}
        agents:
          writer: {allow: [files.read_file], ask: [files.write_file]}
        policy: {default: deny}
        """,
    )
    return resolve_project(load_project())


def test_denials_are_audited_and_raised(resolution: Any) -> None:
    sink = Recorded()
    pipeline = Pipeline(resolution, sink, confirm=None)
    assert pipeline.decide("writer", "files", "read_file").effect == "allow"
    with pytest.raises(PolicyDenied):
        pipeline.decide("stranger", "files", "read_file")
    with pytest.raises(PolicyDenied, match="no one can confirm"):
        pipeline.decide("writer", "files", "write_file")  # ask, and no one to ask
    assert sink.records == [
        ("stranger", "files.read_file", "denied"),
        ("writer", "files.write_file", "denied"),
    ]


@pytest.mark.parametrize(("answer", "outcome"), [(True, None), (False, "denied-by-user")])
def test_ask_goes_to_the_confirmer(resolution: Any, answer: bool, outcome: str | None) -> None:
    sink = Recorded()
    asked: list[str] = []

    async def confirm(pipeline: Pipeline, decision: Decision, arguments: Any) -> bool:
        asked.append(decision.qualified)
        return answer

    pipeline = Pipeline(resolution, sink, confirm)
    if answer:
        assert pipeline.decide("writer", "files", "write_file").effect == "ask"
    else:
        with pytest.raises(PolicyDenied, match="was not confirmed"):
            pipeline.decide("writer", "files", "write_file")
    assert asked == ["files.write_file"]
    assert sink.records == ([] if outcome is None else [("writer", "files.write_file", outcome)])
    assert Pipeline(resolution, sink, always_yes).decide("writer", "files", "write_file")


def test_an_ask_no_one_could_answer_is_refused_and_audited(resolution: Any) -> None:
    """The gateway's case: an `ask` rule, and a client that cannot elicit."""
    sink = Recorded()
    pipeline = Pipeline(resolution, sink, confirm=None)
    decision = pipeline.judge("writer", "files", "write_file", interactive=True)
    assert decision.effect == "ask" and sink.records == []  # judging records nothing
    with pytest.raises(PolicyDenied, match="no one can be asked"):
        pipeline.admit(decision, None)
    assert pipeline.admit(decision, True) == decision
    assert sink.records == [("writer", "files.write_file", "denied")]


@pytest.mark.parametrize(
    ("error", "outcome", "after"),
    [
        (None, "ok", After.KEEP),
        (ServerError("it returned an error"), "server-error", After.RESTART),
        (ServerCrashed("it exited"), "server-error", After.CRASHED),
        (CallTimeout("too slow"), "timeout", After.PROBE),
        (ToolCallError("bad arguments"), "invalid-call", After.KEEP),
        (Interrupted("stopped"), "interrupted", After.KEEP),
    ],
)
def test_finish_audits_the_outcome_and_says_what_the_server_needs(
    resolution: Any, error: Any, outcome: str, after: After
) -> None:
    sink = Recorded()
    pipeline = Pipeline(resolution, sink, confirm=None)
    decision = pipeline.decide("writer", "files", "read_file")
    request = CallRequest("writer", "files", "read_file", decision)
    assert pipeline.finish(CallOutcome(request, error=error)) is after
    assert sink.records == [("writer", "files.read_file", outcome)]


def test_targets(resolution: Any) -> None:
    pipeline = Pipeline(resolution, Recorded(), None)
    assert pipeline.target("files").builtin == "files"
    with pytest.raises(UsageError, match="disabled"):
        pipeline.target("off")
    with pytest.raises(UsageError, match="no server 'nope'"):
        pipeline.target("nope")
    assert (default_agent("given"), default_agent(None)) == ("given", "default")


# --- one sequence for every front door ------------------------------------------------------

SAME_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("kitchen.echo", {"text": "hi"}),  # allowed: ok
    ("kitchen.fail", {"message": "no"}),  # allowed: the tool reports an error
    ("kitchen.echo", {"text": 5}),  # allowed, invalid arguments: nothing is sent
    ("kitchen.add", {"a": 1, "b": 2}),  # denied: nothing starts
]
EXPECTED = [
    ("kitchen", "echo", "allow", "ok"),
    ("kitchen", "fail", "allow", "tool-error"),
    ("kitchen", "echo", "allow", "invalid-call"),
    ("kitchen", "add", "deny", "denied"),
]


@pytest.fixture
def same_project(project: Path) -> Path:
    kitchen = TEST_SERVERS / "kitchen.py"
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          kitchen: {{command: {sys.executable}, args: ["{kitchen}"]}}
        agents:
          agent: {{allow: [kitchen.echo, kitchen.fail]}}
        policy: {{default: deny}}
        """,
    )
    return project


def audited(home: Path) -> list[tuple[Any, ...]]:
    """What each front door must record alike: the call, the decision, the outcome, the
    digest of the arguments (never their values), and whether the call was admitted (its
    outcome completes a `pending` record under its id)."""
    records = audit_records(home / "state" / "audit.jsonl")
    return [
        (
            *(r["server"], r["tool"], r["decision"], r["outcome"]),
            *(r.get("arguments_sha256"), "call" in r),
        )
        for r in records
    ]


def digests(home: Path) -> list[Any]:
    return [row[4] for row in audited(home)]


def test_every_front_door_records_the_same_calls_alike(
    same_project: Path, isolated_home: Path, run: Run, tmp_path: Path
) -> None:
    """exec, exec --batch, code mode, and the gateway's SDK path and express lane run one
    sequence (admit → perform → finish): the same calls leave the same audit records."""
    import anyio
    from mcp import StdioServerParameters

    from bundlectl import client
    from tests.gateway.test_gateway import connected

    log = isolated_home / "state" / "audit.jsonl"
    doors: dict[str, list[tuple[Any, ...]]] = {}

    def take(door: str) -> None:
        doors[door] = audited(isolated_home)
        log.unlink()

    for name, arguments in SAME_CALLS:
        run("exec", "-a", "agent", name, "--args", json.dumps(arguments))
    take("exec")

    batch = tmp_path / "calls.jsonl"
    lines = [{"agent": "agent", "tool": n, "arguments": a} for n, a in SAME_CALLS]
    batch.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    run("exec", "--batch", str(batch))
    take("batch")

    for name, arguments in SAME_CALLS:
        with contextlib.suppress(client.ToolFailed, client.ToolDenied):
            client.call_tool(name, arguments, agent="agent")
    take("code mode")

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "bundlectl", "serve", "--agent", "agent"],
        cwd=str(same_project),
        env={**os.environ, "BUNDLECTL_HOME": str(isolated_home)},
    )

    async def through_the_gateway() -> None:
        async with connected(params) as session:
            # First round: the first call starts the server (the SDK path), the rest find it warm
            # (the express lane); second round: all warm.
            for _ in range(2):
                for name, arguments in SAME_CALLS:
                    await session.call_tool(name.replace(".", "__"), arguments)

    anyio.run(through_the_gateway)
    both = audited(isolated_home)
    doors["serve, first round"], doors["serve, second round"] = both[:4], both[4:]

    # A batch decides every line before it calls anything: its denial comes first.
    doors["batch"] = doors["batch"][1:] + doors["batch"][:1]
    for door, rows in doors.items():
        assert [row[:4] for row in rows] == EXPECTED, door
        # The arguments as the agent sent them are digested, for an allowed call only.
        assert [row[4] is not None for row in rows] == [True, True, True, False], door
        # An allowed call is admitted before its arguments are checked, on every path.
        assert [row[5] for row in rows] == [True, True, True, False], door
    assert len({tuple(rows) for rows in doors.values()}) == 1, doors


def test_the_question_shows_the_arguments_with_secrets_hidden(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#24 item 6: a person confirming an `ask` rule sees what the call would do: each argument,
    long values cut, a secret variable's value as its `${NAME}`, a token-shaped value hidden,
    control characters escaped."""
    shown: list[str] = []

    async def confirm(pipeline: Pipeline, decision: Decision, arguments: Any) -> bool:
        shown.append(pipeline.shown.question(decision, arguments))
        return True

    write(  # a server takes a secret from the environment: its value is never shown
        project / "bundlectl.yaml",
        """
        version: 1
        bundles: [basic]
        servers:
          api: {command: x, env: {API_TOKEN: "${API_TOKEN}"}, tools: []}
        agents:
          writer: {ask: [files.write_file]}
        policy: {default: deny}
        """,
    )
    monkeypatch.setenv("API_TOKEN", "tok-123456")
    pipeline = Pipeline(resolve_project(load_project()), Recorded(), confirm)
    arguments = {
        "path": "notes/x.txt",
        "content": "line one\x1b[2J\u2028\u202eline two " + "x" * 300,
        "header": "Bearer tok-123456",
        "key": "ghp_" + "a" * 36,
        "count": 3,
    }
    assert pipeline.decide("writer", "files", "write_file", arguments).effect == "ask"
    [question] = shown
    lines = question.splitlines()
    assert lines[0].startswith("agent 'writer' wants to call files.write_file (")
    assert lines[0].endswith(" with:")
    assert lines[1] == '  path: "notes/x.txt"'
    assert lines[2].startswith('  content: "line one\\u001b[2J\\u2028\\u202eline two xxx')
    assert lines[2].endswith("… (323 characters)") and len(lines[2]) < 150
    assert question.count("\n") == 6  # the separator broke no line (#52)
    assert lines[3] == "  and 3 argument(s) the tool does not declare:"
    assert lines[4] == '  header: "Bearer ${API_TOKEN}"'
    assert lines[5] == "  key: <a GitHub token, not shown>"
    assert lines[6] == "  count: 3"
    assert "tok-123456" not in question and "aaaa" not in question


def test_filler_arguments_cannot_hide_the_one_that_matters(resolution: Any) -> None:
    """Twenty filler arguments before `path` showed only the fillers and "… and 2 more": the
    person approved a write to src/backdoor.py. Declared arguments come first, all of them."""
    pipeline = Pipeline(resolution, Recorded(), None)
    decision = pipeline.judge("writer", "files", "write_file", interactive=True)
    arguments = {f"filler{i:02}": "x" for i in range(40)}
    arguments |= {"path": "src/backdoor.py", "content": "evil"}
    lines = pipeline.shown.question(decision, arguments).splitlines()
    assert lines[1:4] == [
        '  path: "src/backdoor.py"',
        '  content: "evil"',
        "  and 40 argument(s) the tool does not declare, the first 20:",
    ]
    assert len(lines) == 24
    # without a schema to tell them apart, every argument up to a hundred, and the count first
    unknown = pipeline.shown.question(decision, {f"a{i}": i for i in range(150)}, schema={})
    assert "(150 arguments, the first 100 shown)" in unknown.splitlines()[0]


def test_the_builtin_servers_refuse_undeclared_arguments(project: Path, run: Run) -> None:
    run("init")
    (project / "a.txt").write_text("hi")
    extra = run("exec", "-a", "reader", "files.read_file", "path=a.txt", "extra=1")
    assert extra.code == 4 and "files.read_file takes no argument 'extra'" in extra.err
    assert run("exec", "-a", "reader", "files.read_file", "path=a.txt").out == "hi\n"
