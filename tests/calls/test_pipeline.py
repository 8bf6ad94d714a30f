"""The call pipeline's policy side, through its interfaces (a confirmer, an audit sink)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from bundlectl.calls.calldata import CallOutcome, CallRequest, ToolCall
from bundlectl.calls.confirm import AfterCall, always_yes
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
from tests.conftest import TEST_SERVERS, Run, admitted, audit_records, write


class Recorded:
    """An audit sink that keeps what it is given (the protocol's second implementation)."""

    def __init__(self) -> None:
        self.records: list[tuple[str, str, str]] = []  # outcomes (pending ones kept apart)
        self.pending: list[str] = []  # the call ids recorded as pending, in order
        self.subjects: list[str | None] = []  # who stood behind each record's call

    def record(
        self,
        decision: Decision,
        outcome: str,
        duration_ms: float,
        arguments: Any,
        *,
        call: ToolCall | None = None,
        why: str | None = None,
    ) -> None:
        assert call is not None  # every step of a call is recorded with the call
        self.subjects.append(call.subject)
        if outcome == "pending":  # a call let through: before the server can act
            assert call.id is not None and call.id not in self.pending
            self.pending.append(call.id)
            return
        # an outcome of a call that was let through completes its pending record
        assert call.id is None or call.id in self.pending, decision
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
    assert admitted(pipeline, "writer", "files", "read_file").effect == "allow"
    with pytest.raises(PolicyDenied):
        admitted(pipeline, "stranger", "files", "read_file")
    with pytest.raises(PolicyDenied, match="no one can confirm"):
        admitted(pipeline, "writer", "files", "write_file")  # ask, and no one to ask
    assert sink.records == [
        ("stranger", "files.read_file", "denied"),
        ("writer", "files.write_file", "denied"),
    ]


@pytest.mark.parametrize(("answer", "outcome"), [(True, None), (False, "denied-by-user")])
def test_ask_goes_to_the_confirmer(resolution: Any, answer: bool, outcome: str | None) -> None:
    sink = Recorded()
    asked: list[str] = []

    async def confirm(pipeline: Pipeline, decision: Decision, call: ToolCall) -> bool:
        asked.append(decision.qualified)
        return answer

    pipeline = Pipeline(resolution, sink, confirm)
    if answer:
        assert admitted(pipeline, "writer", "files", "write_file").effect == "ask"
    else:
        with pytest.raises(PolicyDenied, match="was not confirmed"):
            admitted(pipeline, "writer", "files", "write_file")
    assert asked == ["files.write_file"]
    assert sink.records == ([] if outcome is None else [("writer", "files.write_file", outcome)])
    assert admitted(Pipeline(resolution, sink, always_yes), "writer", "files", "write_file")


def test_every_record_of_a_call_names_who_made_it_refused_at_judging_too(resolution: Any) -> None:
    """The running call's data travels with the call, not the decision (#53): its subject is
    on every record, the one of arguments refused before admission included."""
    sink = Recorded()
    pipeline = Pipeline(resolution, sink, confirm=None)
    call = ToolCall("writer", "files", "read_file", {"path": float("nan")}, subject="ana@x")
    with pytest.raises(ToolCallError, match="NaN"):
        admitted(pipeline, "writer", "files", "read_file", call.arguments, call=call)
    call = ToolCall("writer", "files", "read_file", {}, subject="ana@x")
    admitted(pipeline, "writer", "files", "read_file", call=call)
    pipeline.finish(
        CallOutcome(
            CallRequest(
                call, pipeline.judge("writer", "files", "read_file", interactive=False), sent=True
            )
        )
    )
    assert sink.records == [
        ("writer", "files.read_file", "invalid-call"),
        ("writer", "files.read_file", "ok"),
    ]
    assert sink.subjects == ["ana@x", "ana@x", "ana@x"]  # refused; let through; its outcome


def test_an_ask_no_one_could_answer_is_refused_and_audited(resolution: Any) -> None:
    """The gateway's case: an `ask` rule, and a client that cannot elicit."""
    sink = Recorded()
    pipeline = Pipeline(resolution, sink, confirm=None)
    call = ToolCall("writer", "files", "write_file", {})
    decision = pipeline.judge("writer", "files", "write_file", interactive=True, call=call)
    assert decision.effect == "ask" and sink.records == []  # judging records nothing
    with pytest.raises(PolicyDenied, match="no one can be asked"):
        pipeline.admit(decision, call, None)
    assert call.id is None  # refused: no id
    assert pipeline.admit(decision, call, True) == decision
    assert call.id is not None  # let through under an id its records share
    assert sink.records == [("writer", "files.write_file", "denied")]


@pytest.mark.parametrize(
    ("error", "outcome", "after"),
    [
        (None, "ok", AfterCall.KEEP),
        (ServerError("it returned an error"), "server-error", AfterCall.RESTART),
        (ServerCrashed("it exited"), "server-error", AfterCall.CRASHED),
        (CallTimeout("too slow"), "timeout", AfterCall.PROBE),
        (ToolCallError("bad arguments"), "invalid-call", AfterCall.KEEP),
        (Interrupted("stopped"), "interrupted", AfterCall.KEEP),
    ],
)
def test_finish_audits_the_outcome_and_says_what_the_server_needs(
    resolution: Any, error: Any, outcome: str, after: AfterCall
) -> None:
    sink = Recorded()
    pipeline = Pipeline(resolution, sink, confirm=None)
    call = ToolCall("writer", "files", "read_file", {})
    decision = admitted(pipeline, "writer", "files", "read_file", call=call)
    request = CallRequest(call, decision, sent=True)
    assert pipeline.finish(CallOutcome(request, error=error)) is after
    assert sink.records == [("writer", "files.read_file", outcome)]
    # The same error before the request went to the server: nothing can have acted (#56).
    unsent = CallRequest(call, decision)
    pipeline.finish(CallOutcome(unsent, error=error))
    kept = outcome if error is None or isinstance(error, ToolCallError) else "not-started"
    assert sink.records[-1] == ("writer", "files.read_file", kept)


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
    ("kitchen.echo", {"text": "hi"}),  # allowed under its condition: ok
    ("kitchen.echo", {"text": "bye"}),  # its condition does not hold: denied, nothing starts
    ("kitchen.fail", {"message": "no"}),  # allowed: the tool reports an error
    ("kitchen.fail", {"message": 5}),  # allowed, invalid arguments: nothing is sent
    ("kitchen.people", {}),  # allowed, the quota's one call
    ("kitchen.people", {}),  # over the quota: refused before anything is sent
    ("kitchen.add", {"a": 1, "b": 2}),  # an ask only an approver answers: held
    ("kitchen.media", {}),  # denied: nothing starts
]
EXPECTED = [
    ("kitchen", "echo", "allow", "ok"),
    ("kitchen", "echo", "deny", "denied"),
    ("kitchen", "fail", "allow", "tool-error"),
    ("kitchen", "fail", "allow", "invalid-call"),
    ("kitchen", "people", "allow", "ok"),
    ("kitchen", "people", "allow", "over-limit"),
    ("kitchen", "add", "ask", "approval-requested"),
    ("kitchen", "media", "deny", "denied"),
]
# Which calls' arguments are digested (the calls let through: the held one's record is its
# approval request's), which are admitted (a `pending` record their outcome completes), and
# which answer without an error.
DIGESTED = [True, False, True, True, True, False, False, False]
ADMITTED = [True, False, True, True, True, False, False, False]
ANSWERED = [True, False, False, False, True, False, False, False]
TOKEN = "agent-" + "t" * 30


@pytest.fixture
def same_project(project: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    kitchen = TEST_SERVERS / "kitchen.py"
    monkeypatch.setenv("AGENT_TOKEN", TOKEN)
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          kitchen: {{command: {sys.executable}, args: ["{kitchen}"]}}
        agents:
          agent:
            token: "${{AGENT_TOKEN}}"
            allow:
              - {{tool: kitchen.echo, args: {{text: "h*"}}}}
              - kitchen.fail
              - kitchen.people
            ask: [{{tool: kitchen.add, approve: out-of-band}}]
        limits:
          - {{agents: [agent], tools: [kitchen.people], calls: 1, per: 1h}}
        policy: {{default: deny, approvals: {{ttl: 10m}}}}
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


def test_every_front_door_decides_records_and_answers_alike(
    same_project: Path, isolated_home: Path, run: Run, tmp_path: Path
) -> None:
    """#53: exec, exec --batch, code mode, and `serve` over stdio (the SDK path and the express
    lane) and over HTTP (sessions, and --stateless) run one sequence (judge → admission →
    perform → finish): allowed, conditional, failing, invalid, over-quota, held and denied
    calls leave the same audit records and the same answers on every door. A door that skips
    a step (admits before it judges, or charges the quota after the arguments are refused)
    shows here."""
    import anyio
    from mcp import StdioServerParameters

    from bundlectl import client
    from tests.gateway.test_gateway import connected
    from tests.gateway.test_gateway_http import client as http_client
    from tests.gateway.test_gateway_http import gateway

    state = isolated_home / "state"
    doors: dict[str, list[tuple[Any, ...]]] = {}
    answers: dict[str, list[tuple[bool, str]]] = {}

    def take(door: str, answered: list[tuple[bool, str]]) -> None:
        doors[door], answers[door] = audited(isolated_home), answered
        (state / "audit.jsonl").unlink()
        for store in state.glob("state.sqlite3*"):  # the quota's count and the held call afresh
            store.unlink()

    answered = []
    for name, arguments in SAME_CALLS:
        done = run("exec", "-a", "agent", "--no-wait", "--format", "json", name, "--args",
                   json.dumps(arguments))  # fmt: skip
        said = json.loads(done.out)["result"] if done.code == 0 else None
        answered.append((done.code == 0, _text(said)))
    take("exec", answered)

    batch = tmp_path / "calls.jsonl"
    lines = [{"agent": "agent", "tool": n, "arguments": a} for n, a in SAME_CALLS]
    batch.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    results = [json.loads(line) for line in run("exec", "--batch", str(batch)).lines]
    answered = [
        ("error" not in r and not r["result"]["isError"], _text(r.get("result"))) for r in results
    ]
    take("batch", answered)

    answered = []
    for name, arguments in SAME_CALLS:
        try:
            value = client.call_tool(name, arguments, agent="agent")
        except (client.ToolFailed, client.ToolDenied):
            answered.append((False, ""))
            continue
        answered.append((True, value if isinstance(value, str) else json.dumps(value)))
    take("code mode", answered)

    async def rounds(session: Any, count: int) -> list[tuple[bool, str]]:
        said = []
        for _ in range(count):
            for name, arguments in SAME_CALLS:
                result = await session.call_tool(name.replace(".", "__"), arguments)
                text = _text(result.model_dump(mode="json", by_alias=True))
                said.append((not result.is_error, text if not result.is_error else ""))
        return said

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "bundlectl", "serve", "--agent", "agent"],
        cwd=str(same_project),
        env={**os.environ, "BUNDLECTL_HOME": str(isolated_home)},
    )

    async def over_stdio() -> list[tuple[bool, str]]:
        async with connected(params) as session:
            # The first round starts the server (the SDK path) and finds it warm (the lane)
            return await rounds(session, 1)

    take("serve over stdio", anyio.run(over_stdio))

    for door, options in (("serve over HTTP", ()), ("serve --stateless", ("--stateless",))):
        with gateway(same_project, *options, home=isolated_home) as (url, _):

            async def over_http(url: str = url) -> list[tuple[bool, str]]:
                async with http_client(url, TOKEN) as session:
                    return await rounds(session, 1)

            take(door, anyio.run(over_http))

    for door, rows in doors.items():
        assert [row[:4] for row in rows] == EXPECTED, door
        assert [row[4] is not None for row in rows] == DIGESTED, door
        assert [row[5] for row in rows] == ADMITTED, door
        assert [ok for ok, _ in answers[door]] == ANSWERED, door
    assert len({tuple(rows) for rows in doors.values()}) == 1, doors
    same = {door: [(ok, _canonical(text)) for ok, text in said] for door, said in answers.items()}
    for door, said in same.items():
        assert said == same["exec"], door


def _canonical(text: str) -> str:
    """JSON as one canonical line (exec prints it indented), other text as it is."""
    try:
        return json.dumps(json.loads(text), sort_keys=True)
    except ValueError:
        return text


def _text(result: Any) -> str:
    """What a successful result gives code mode's caller, whichever door it came through: its
    structured content (as JSON) when it has any, else its text blocks."""
    if not isinstance(result, dict) or result.get("isError"):
        return ""
    structured = result.get("structuredContent")
    if structured is not None:
        return json.dumps(structured)
    return "\n".join(b["text"] for b in result.get("content", []) if b.get("type") == "text")
