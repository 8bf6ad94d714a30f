"""OpenTelemetry traces (issue 41, SPEC 13): a span per call from the one place every front
door records a call (`Pipeline.record`) — checked with the SDK's in-memory exporter, and end to
end with a real OTLP/HTTP receiver written here that `exec` and `serve` export to."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from bundlectl import telemetry
from tests.conftest import TEST_SERVERS, Run, over_the_pipes, write
from tests.gateway.test_gateway import texts

CONFIG = """
version: 1
bundles: [basic]
agents:
  reader: {allow: [files.read_file, "kitchen.*"], deny: [files.write_file]}
policy: {default: deny}
"""
KITCHEN = f"""servers:
  kitchen: {{command: {sys.executable}, args: ["{TEST_SERVERS / "kitchen.py"}"]}}
"""


@pytest.fixture
def spans() -> Iterator[Any]:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.use(provider)
    yield exporter
    telemetry.use(None)
    telemetry._TRACER.clear()  # the next test decides from its own environment again


def test_each_call_is_one_span_with_who_what_and_how_it_ended(
    project: Path, run: Run, spans: Any
) -> None:
    write(project / "bundlectl.yaml", CONFIG)
    (project / "a.txt").write_text("secret-content-of-the-file")
    assert run("exec", "-a", "reader", "files.read_file", "path=a.txt").code == 0
    assert run("exec", "-a", "reader", "files.write_file", "path=b", "content=zzz").code == 3
    sent, ok, denied = spans.get_finished_spans()
    assert ok.name == "bundlectl call files.read_file"
    # the call's step on its server is a child span (the built-in server: nothing to connect)
    assert sent.name == "bundlectl tools/call files.read_file"
    assert sent.parent.span_id == ok.context.span_id
    seen = dict(ok.attributes)
    assert seen.pop("bundlectl.call")  # the call id the audit log pairs its records by
    assert seen.pop("bundlectl.duration_ms") > 0
    assert seen == {
        "bundlectl.agent": "reader",
        "bundlectl.server": "files",
        "bundlectl.tool": "read_file",
        "bundlectl.decision": "allow",
        "bundlectl.rule": "files.read_file",
        "bundlectl.rule_source": "bundlectl.yaml:4:20",
        "bundlectl.outcome": "ok",
    }
    assert ok.status.is_ok and ok.end_time > ok.start_time
    assert denied.attributes["bundlectl.outcome"] == "denied"
    assert denied.attributes["bundlectl.decision"] == "deny"
    assert not denied.status.is_ok
    every = repr([dict(s.attributes) for s in (sent, ok, denied)])
    assert "a.txt" not in every and "zzz" not in every and "secret" not in every


@pytest.mark.parametrize(("transport", "path"), [("streamable-http", "mcp"), ("sse", "sse")])
def test_a_calls_connect_and_send_are_child_spans_and_reach_an_http_server(
    project: Path, run: Run, spans: Any, transport: str, path: str
) -> None:
    """#41: a call to a remote server has its connection and its request as spans under the
    call's, and the server gets the request's trace context as a `traceparent` header (over
    SSE too, on the POST that carries the call)."""
    from tests.cli.test_exec import listening

    kitchen = [sys.executable, str(TEST_SERVERS / "kitchen.py"), "--transport", transport]
    with listening(kitchen) as port:
        write(
            project / "bundlectl.yaml",
            f"version: 1\nservers:\n  kitchen: {{transport: {transport}, "
            f'url: "http://127.0.0.1:{port}/{path}"}}\npolicy: {{default: allow}}\n',
        )
        done = run("exec", "kitchen.traceheader")
    assert done.code == 0, done.err
    finished = spans.get_finished_spans()
    [call] = [s for s in finished if s.name == "bundlectl call kitchen.traceheader"]
    [connect] = [s for s in finished if s.name == "bundlectl connect kitchen"]
    [sent] = [s for s in finished if s.name == "bundlectl tools/call kitchen.traceheader"]
    assert connect.parent.span_id == call.context.span_id
    assert sent.parent.span_id == call.context.span_id
    assert connect.end_time <= sent.start_time  # connected first
    assert dict(sent.attributes) == {"bundlectl.server": "kitchen", "bundlectl.tool": "traceheader"}
    _, trace_id, parent, _ = done.out.strip().split("-")
    assert int(trace_id, 16) == call.context.trace_id
    assert int(parent, 16) == sent.context.span_id


class Receiver:
    """An OTLP/HTTP receiver: the spans of each export request, decoded."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
            ExportLogsServiceRequest,
        )
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
            ExportMetricsServiceRequest,
        )
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        self.spans: list[Any] = []
        self.logs: list[Any] = []  # log records (POST /v1/logs)
        self.metrics: list[Any] = []  # metrics (POST /v1/metrics)
        self.arrived = threading.Event()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.path == "/v1/metrics":
                    sent = ExportMetricsServiceRequest.FromString(body)
                    for resource_metrics in sent.resource_metrics:
                        for scope in resource_metrics.scope_metrics:
                            receiver.metrics.extend(scope.metrics)
                    self.answered()
                    return
                if self.path == "/v1/logs":
                    logs = ExportLogsServiceRequest.FromString(body)
                    for resource_logs in logs.resource_logs:
                        for scope in resource_logs.scope_logs:
                            receiver.logs.extend(scope.log_records)
                    self.answered()
                    return
                request = ExportTraceServiceRequest.FromString(body)
                for resource in request.resource_spans:
                    service = {a.key: a.value.string_value for a in resource.resource.attributes}
                    for scope in resource.scope_spans:
                        for span in scope.spans:
                            receiver.spans.append((service, span))
                self.answered()

            def answered(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()
                receiver.arrived.set()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def attributes(self, span: Any) -> dict[str, str]:
        return {a.key: a.value.string_value or str(a.value.double_value) for a in span.attributes}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.server.shutdown()
    found.server.server_close()


def test_exec_and_serve_export_their_spans_over_otlp_http(
    project: Path, receiver: Receiver, isolated_home: Path
) -> None:
    write(project / "bundlectl.yaml", CONFIG)
    (project / "a.txt").write_text("hello")
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_SERVICE_NAME": "ci"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bundlectl",
            "exec",
            "-a",
            "reader",
            "files.read_file",
            "path=a.txt",
        ],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert receiver.arrived.wait(30)  # sent before exec exits
    [(service, span)] = [(v, s) for v, s in receiver.spans if s.name.startswith("bundlectl call")]
    assert service["service.name"] == "ci"
    assert span.name == "bundlectl call files.read_file"
    assert receiver.attributes(span)["bundlectl.outcome"] == "ok"

    from mcp import StdioServerParameters

    from tests.gateway.test_gateway import connected

    receiver.spans.clear()
    receiver.arrived.clear()
    write(project / "bundlectl.yaml", CONFIG.replace("agents:", KITCHEN + "agents:"))
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "bundlectl", "serve", "--agent", "reader"],
        cwd=str(project),
        env=env,
    )

    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    sent = {"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"}
    warm_traces = ["4bf92f3577b34da6a3ce929d0e0e4737", "4bf92f3577b34da6a3ce929d0e0e4738"]

    async def session() -> None:
        async with connected(params) as client:
            traced = await client.call_tool("files__read_file", {"path": "a.txt"}, meta=sent)
            assert not traced.is_error
            for _ in range(2):  # warm calls of the built-in server: the SDK path and its own
                assert not (await client.call_tool("files__read_file", {"path": "a.txt"})).is_error
            await client.call_tool("kitchen__echo", {"text": "warm"})  # starts it: the SDK path
            for warm in warm_traces:  # at the express door, which bypasses the SDK's spans
                meta = {"traceparent": f"00-{warm}-00f067aa0ba902b8-01"}
                result = await client.call_tool("kitchen__request_id", {}, meta=meta)
                assert over_the_pipes(texts(result)[0])
            assert (
                await client.call_tool("files__write_file", {"path": "x", "content": "y"})
            ).is_error

    anyio.run(session)
    assert receiver.arrived.wait(30)  # sent when serve ended with its client
    ours = [s for _, s in receiver.spans if s.name.startswith("bundlectl call")]
    outcomes = sorted(receiver.attributes(s)["bundlectl.outcome"] for s in ours)
    assert outcomes == ["denied"] + ["ok"] * 6
    assert {receiver.attributes(s)["bundlectl.agent"] for s in ours} == {"reader"}
    # the first call's span joined the trace the client sent, under the SDK's request span
    joined = [s for s in ours if s.trace_id.hex() == trace_id]
    assert len(joined) == 1 and joined[0].parent_span_id
    request = [s for _, s in receiver.spans if s.span_id == joined[0].parent_span_id]
    assert request and request[0].parent_span_id.hex() == "00f067aa0ba902b7"
    # a call that started its server (files): its start and its request are its children,
    # and the span of the request the MCP SDK sent downstream is the request's
    [first] = [s for s in ours if s.parent_span_id == request[0].span_id]
    children = {s.name: s for _, s in receiver.spans if s.parent_span_id == first.span_id}
    assert set(children) == {"bundlectl start files", "bundlectl tools/call files.read_file"}
    sent = children["bundlectl tools/call files.read_file"]
    below = {s.name for _, s in receiver.spans if s.parent_span_id == sent.span_id}
    assert "tools/call read_file" in below  # the server's own span (it exports too)
    # a warm call on the express lane: its request is its child too
    [echo] = [s for s in ours if receiver.attributes(s)["bundlectl.tool"] == "echo"]
    lane = [s.name for _, s in receiver.spans if s.parent_span_id == echo.span_id]
    assert lane == ["bundlectl tools/call kitchen.echo"]
    # the express lane's calls join the trace each sent, under the client's span itself
    for warm in warm_traces:
        [span] = [s for s in ours if s.trace_id.hex() == warm]
        assert span.parent_span_id.hex() == "00f067aa0ba902b8"
        assert receiver.attributes(span)["bundlectl.tool"] == "request_id"


def test_serve_over_http_joins_the_trace_of_the_traceparent_header(
    project: Path, receiver: Receiver, isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that sends its W3C trace context as HTTP headers (`traceparent`) rather than
    in `_meta`: the gateway's spans for its call join that trace."""
    from tests.gateway.test_gateway_http import client, gateway

    token = "reader-" + "r" * 30
    monkeypatch.setenv("READER_TOKEN", token)
    write(
        project / "bundlectl.yaml",
        CONFIG.replace("reader: {", 'reader: {token: "${READER_TOKEN}", '),
    )
    (project / "a.txt").write_text("hello")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")  # export soon, not at exit only
    trace_id = "5bf92f3577b34da6a3ce929d0e0e4736"
    header = {"traceparent": f"00-{trace_id}-10f067aa0ba902b7-01"}

    async def call(url: str) -> None:
        async with client(url, token, headers=header) as reader:
            assert not (await reader.call_tool("files__read_file", {"path": "a.txt"})).is_error

    with gateway(project) as (url, _):
        anyio.run(call, url)
        deadline = time.monotonic() + 30
        while not [s for _, s in receiver.spans if s.name.startswith("bundlectl call")]:
            assert time.monotonic() < deadline, "no span of the call arrived"
            receiver.arrived.wait(0.2)
            receiver.arrived.clear()
    [ours] = [s for _, s in receiver.spans if s.name.startswith("bundlectl call")]
    assert ours.trace_id.hex() == trace_id
    request = [s for _, s in receiver.spans if s.span_id == ours.parent_span_id]
    assert request and request[0].parent_span_id.hex() == "10f067aa0ba902b7"


def test_audit_records_go_to_otlp_as_log_records(
    project: Path, receiver: Receiver, isolated_home: Path
) -> None:
    """#41: `audit.sinks: [file, otlp]` — each record also an OpenTelemetry log record sent over
    OTLP/HTTP, the record (chain link included) its body; never an argument's value."""
    from google.protobuf.json_format import MessageToDict

    write(project / "bundlectl.yaml", CONFIG)
    (project / "a.txt").write_text("secret-content-of-the-file")
    write(isolated_home / "config" / "config.yaml", "audit: {sinks: [file, otlp]}\n")
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}
    for tool, argument in (("files.read_file", "path=a.txt"), ("files.write_file", "path=zzz")):
        subprocess.run(
            [sys.executable, "-m", "bundlectl", "exec", "-a", "reader", tool, argument],
            cwd=project,
            env=env,
            capture_output=True,
            timeout=120,
            check=False,
        )
    assert receiver.arrived.wait(30)  # sent before exec exits
    bodies = [MessageToDict(r.body)["kvlistValue"]["values"] for r in receiver.logs]
    sent = [{v["key"]: next(iter(v["value"].values()), None) for v in body} for body in bodies]
    log = (isolated_home / "state" / "audit.jsonl").read_text()
    filed = [json.loads(line) for line in log.splitlines()]
    assert [(r["tool"], r["outcome"], r.get("prev")) for r in sent] == [
        (r["tool"], r["outcome"], r.get("prev")) for r in filed
    ]
    assert sent[-1]["prev"].startswith("sha256:")  # the chain's link, as in the file
    assert [r["outcome"] for r in sent] == ["pending", "ok", "denied"]
    severities = [r.severity_text for r in receiver.logs]
    assert severities == ["INFO", "INFO", "WARN"]
    attributes = {a.key: a.value.string_value for a in receiver.logs[-1].attributes}
    assert attributes["bundlectl.agent"] == "reader"
    assert attributes["bundlectl.outcome"] == "denied"
    everything = repr([MessageToDict(r) for r in receiver.logs])
    assert "secret-content" not in everything and "zzz" not in everything


def test_calls_are_counted_as_opentelemetry_metrics_under_the_prometheus_names(
    project: Path, receiver: Receiver, isolated_home: Path
) -> None:
    """#41: with an OTLP endpoint every command exports its counts when it ends — calls by
    agent, server, tool and outcome, denials by rule, durations — named as `/metrics` names
    them, quota refusals by limit too; `OTEL_METRICS_EXPORTER=none` turns them off."""
    limit = "limits: [{agents: [reader], tools: [files.read_file], calls: 2, per: 1h}]\n"
    write(project / "bundlectl.yaml", CONFIG + limit)
    (project / "a.txt").write_text("hello")
    env = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_TRACES_EXPORTER": "none",
    }

    def exec_(tool: str, argument: str, **more: str) -> None:
        subprocess.run(
            [sys.executable, "-m", "bundlectl", "exec", "-a", "reader", tool, argument],
            cwd=project,
            env={**env, **more},
            capture_output=True,
            timeout=120,
            check=False,
        )

    exec_("files.read_file", "path=a.txt")
    exec_("files.write_file", "path=b")
    exec_("files.read_file", "path=a.txt", OTEL_METRICS_EXPORTER="none")
    exec_("files.read_file", "path=a.txt")  # the limit's third: refused
    assert receiver.arrived.wait(30)
    assert receiver.spans == []  # traces were asked off

    def points(name: str) -> list[tuple[dict[str, str], float]]:
        found = []
        for metric in receiver.metrics:
            if metric.name == name:
                data = metric.sum.data_points or metric.histogram.data_points
                for point in data:
                    labels = {a.key: a.value.string_value for a in point.attributes}
                    found.append((labels, point.as_int if metric.HasField("sum") else point.count))
        return found

    calls = sorted((p["tool"], p["outcome"], n) for p, n in points("bundlectl_calls"))
    assert calls == [
        ("read_file", "ok", 1),
        ("read_file", "over-limit", 1),
        ("write_file", "denied", 1),
    ]
    assert {p["agent"] for p, _ in points("bundlectl_calls")} == {"reader"}
    assert points("bundlectl_quota_refusals") == [({"agent": "reader", "limit": "limits[0]"}, 1)]
    assert points("bundlectl_denials") == [({"agent": "reader", "rule": "files.write_file"}, 1)]
    [(where, count)] = points("bundlectl_call_duration_seconds")
    assert where == {"server": "files", "tool": "read_file"} and count == 1
