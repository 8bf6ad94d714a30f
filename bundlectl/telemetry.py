"""OpenTelemetry traces (SPEC 13), with the optional extra `bundlectl[otel]`: one span per call,
opened when the pipeline lets it through (its `pending` record) and ended with its outcome, on
every front door (exec, batch, code mode, both gateway paths: they all record through
`Pipeline.record`); a call refused before that is a span of its own, ended at once. Attributes
say who called what and what came of it — never an argument's value or a token.

The W3C trace context a client sends parents the gateway's spans: over MCP (`_meta.traceparent`)
the MCP SDK's server span for the request is made from it and a call's span starts inside it;
over HTTP (the `traceparent` header of a request to `/mcp`) it is the ambient context the SDK's
span starts from (`from_headers`); on the stdio express lane, which bypasses the SDK, the call's
span is made from the request's `_meta` itself (`ToolCall.trace`). The client's context goes on
to the server in the request's `_meta` on both paths (the SDK's client passes the context of the
request it serves; the lane passes the client's as it came), so the server's spans join it.

Configured the standard way, by the OpenTelemetry SDK's own variables
(`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_TRACES_EXPORTER`,
`OTEL_EXPORTER_OTLP_PROTOCOL` http/protobuf or grpc, `OTEL_SERVICE_NAME`, headers, ...). With
none of them set nothing of OpenTelemetry is imported (~70 ms).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from bundlectl.output import err

if TYPE_CHECKING:
    from bundlectl.calls.calldata import ToolCall
    from bundlectl.policy.rules import Decision

_TRACER: list[Any] = []  # [tracer] once set up, [None] when off
_PROVIDER: list[Any] = []
_OPEN: dict[str, Any] = {}  # call id → its span, between `pending` and the outcome


def wanted(signal: str = "traces") -> bool:
    """Whether the environment asks for `signal` (traces, metrics): its exporter named (not
    `none`), or an OTLP endpoint for all signals or for it."""
    env = os.environ
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    exporter = env.get(f"OTEL_{signal.upper()}_EXPORTER", "")
    if exporter:
        return exporter != "none"
    return bool(
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or env.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT")
    )


def _protocol(signal: str) -> str:
    return os.environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL") or os.environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )


# Each signal's OTLP exporter: its module under opentelemetry.exporter.otlp.proto.{grpc,http}
_EXPORTERS = {
    "traces": ("trace_exporter", "OTLPSpanExporter"),
    "metrics": ("metric_exporter", "OTLPMetricExporter"),
    "logs": ("_log_exporter", "OTLPLogExporter"),
}


def _exporter(signal: str) -> Any:
    """The OTLP exporter of `signal` for the protocol the SDK's variables name, configured by
    them (ImportError: that exporter is not installed)."""
    module, name = _EXPORTERS[signal]
    kind = "grpc" if _protocol(signal) == "grpc" else "http"
    found = importlib.import_module(f"opentelemetry.exporter.otlp.proto.{kind}.{module}")
    return getattr(found, name)()


def _resource() -> Any:
    from opentelemetry.sdk.resources import Resource  # noqa: PLC0415

    from bundlectl import __version__  # noqa: PLC0415

    if os.environ.get("OTEL_SERVICE_NAME"):
        return Resource.create({"service.version": __version__})  # the variable names it
    return Resource.create({"service.name": "bundlectl", "service.version": __version__})


def use(provider: Any) -> None:
    """Trace through `provider` (an SDK TracerProvider; tests give one with an in-memory
    exporter); None turns tracing off again."""
    _TRACER[:] = [provider.get_tracer("bundlectl") if provider is not None else None]
    _PROVIDER[:] = [provider] if provider is not None else []
    _OPEN.clear()


def _tracer() -> Any:
    if _TRACER:
        return _TRACER[0]
    if not wanted():
        _TRACER.append(None)
        return None
    try:
        from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
        from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: PLC0415
    except ImportError:
        err(
            "warning: OTEL_* asks for traces, and OpenTelemetry is not installed: "
            "pip install 'bundlectl[otel]'"
        )
        _TRACER.append(None)
        return None
    try:
        exporter = _exporter("traces")
    except ImportError:
        err(f"warning: no OTLP exporter for {_protocol('traces')!r} is installed; no traces")
        _TRACER.append(None)
        return None
    provider = TracerProvider(resource=_resource())
    provider.add_span_processor(BatchSpanProcessor(exporter))
    # The global provider too: the MCP SDK's own spans (its server's, around each request,
    # parented on the client's `_meta.traceparent`, which it also passes on downstream) then
    # export with ours, and a call's span, started inside the request, joins the caller's trace.
    from opentelemetry import trace  # noqa: PLC0415

    trace.set_tracer_provider(provider)
    use(provider)
    return _TRACER[0]


def active() -> bool:
    return _tracer() is not None


def record(decision: Decision, outcome: str, duration_ms: float, call: ToolCall | None) -> None:
    """A step of a call, as the audit log records it: `pending` opens its span (a child of the
    trace the call came with), the outcome ends it; a call with no id (refused before it was
    let through) is a span of its own."""
    tracer = _tracer()
    if tracer is None:
        return
    call_id = call.id if call is not None else None
    if outcome == "pending" and call is not None and call_id is not None:
        parent = _parent(call.trace) if call.trace else None
        span = tracer.start_span(
            f"bundlectl call {decision.qualified}",
            context=parent,
            attributes=_about(decision, call),
        )
        _OPEN[call_id] = span
        return
    span = _OPEN.pop(call_id, None) if call_id is not None else None
    if span is None:
        span = tracer.start_span(
            f"bundlectl call {decision.qualified}", attributes=_about(decision, call)
        )
    span.set_attribute("bundlectl.outcome", outcome)
    span.set_attribute("bundlectl.duration_ms", round(duration_ms, 3))
    if outcome not in ("ok", "pending"):
        from opentelemetry.trace import Status, StatusCode  # noqa: PLC0415

        span.set_status(Status(StatusCode.ERROR, outcome))
    span.end()


def begin_step(call: str | None, name: str, **attributes: str) -> Any:
    """A child span of the open span of call `call` for one of its steps (`bundlectl start
    SERVER`, `bundlectl connect SERVER`, `bundlectl tools/call SERVER.TOOL`), ended by
    `end_step`; None when tracing is off or the call has no open span."""
    parent = _OPEN.get(call) if call is not None and _OPEN else None
    if parent is None:
        return None
    from opentelemetry import trace  # noqa: PLC0415

    about = {f"bundlectl.{key}": value for key, value in attributes.items()}
    return _TRACER[0].start_span(
        f"bundlectl {name}", trace.set_span_in_context(parent), attributes=about
    )


def end_step(span: Any, failure: str | None = None) -> None:
    """End a step's span (`begin_step`); `failure`: why the step failed."""
    if span is None:
        return
    if failure is not None:
        from opentelemetry.trace import Status, StatusCode  # noqa: PLC0415

        span.set_status(Status(StatusCode.ERROR, failure))
    span.end()


def step(call: str | None, name: str, **attributes: str) -> contextlib.AbstractContextManager[Any]:
    """`begin_step` around a block, its span the current one inside, so the MCP SDK's own
    request spans nest under it; an exception ends it as an error. Nothing (a shared null
    context, no generator) when the call has no open span: every warm gateway call asks."""
    span = begin_step(call, name, **attributes)
    if span is None:
        return _NO_STEP
    from opentelemetry import trace  # noqa: PLC0415

    return trace.use_span(span, end_on_exit=True)


_NO_STEP = contextlib.nullcontext()


async def inject_headers(request: Any) -> None:
    """An HTTP client's request hook: the current trace context as `traceparent`/`tracestate`
    headers, so an HTTP server downstream joins the call's trace (the MCP SDK sends each
    message in the context of the code that sent it)."""
    from opentelemetry import propagate  # noqa: PLC0415

    propagate.inject(request.headers)


def traced(meta: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A request's `_meta` with the current W3C trace context added (`traceparent`,
    `tracestate`), as the SDK's client adds it to every request, so a server joins the call's
    trace. Without OpenTelemetry loaded there is no current context: `meta` as it is (and the
    import, ~80 ms, is not paid by a call that traces nothing)."""
    context = sys.modules.get("opentelemetry.context")
    if context is None or not context.get_current():  # nothing is current: nothing to add
        return dict(meta) if meta else None
    from opentelemetry import propagate  # noqa: PLC0415

    carrier = dict(meta) if meta else {}
    propagate.inject(carrier)
    return carrier or None


def _parent(carrier: Mapping[str, Any]) -> Any:
    """The context a W3C carrier (`traceparent`, `tracestate`) names; None when it names none
    (a malformed value is ignored, never an error)."""
    from opentelemetry import propagate, trace  # noqa: PLC0415

    try:
        context = propagate.extract(carrier)
    except (ValueError, TypeError):
        return None
    return context if trace.get_current_span(context).get_span_context().is_valid else None


@contextlib.contextmanager
def from_headers(headers: Mapping[bytes, bytes]) -> Iterator[None]:
    """The trace context of an HTTP request's `traceparent`/`tracestate` headers as the ambient
    one while the request is handled (nothing when tracing is off or the request sent none)."""
    raw = headers.get(b"traceparent")
    if raw is None or not active():
        yield
        return
    carried = {"traceparent": raw.decode("latin-1")}
    state = headers.get(b"tracestate")
    if state is not None:
        carried["tracestate"] = state.decode("latin-1")
    parent = _parent(carried)
    if parent is None:
        yield
        return
    from opentelemetry import context  # noqa: PLC0415

    token = context.attach(parent)
    try:
        yield
    finally:
        context.detach(token)


def _about(decision: Decision, call: ToolCall | None) -> dict[str, Any]:
    rule = decision.rule
    about: dict[str, Any] = {
        "bundlectl.agent": decision.agent,
        "bundlectl.server": decision.server,
        "bundlectl.tool": decision.tool,
        "bundlectl.decision": decision.effect,
    }
    if rule is not None:
        about["bundlectl.rule"] = rule.pattern
        about["bundlectl.rule_source"] = str(rule.origin)
    if call is not None and call.id is not None:
        about["bundlectl.call"] = call.id
    if call is not None and call.subject is not None:
        about["enduser.id"] = call.subject
    return about


_METER: list[Any] = []  # [meter] once set up, [None]: metrics are not asked for
_METER_PROVIDER: list[Any] = []


def meter() -> Any:
    """The OpenTelemetry meter the metrics are made on (`metrics`), exported over OTLP when the
    environment asks for metrics; None: it does not (nothing is imported)."""
    if _METER:
        return _METER[0]
    if not wanted("metrics"):
        _METER.append(None)
        return None
    try:
        from opentelemetry.sdk.metrics import MeterProvider  # noqa: PLC0415
        from opentelemetry.sdk.metrics.export import (  # noqa: PLC0415
            PeriodicExportingMetricReader,
        )

        exporter = _exporter("metrics")
    except ImportError:
        err(
            "warning: OTEL_* asks for metrics, and OpenTelemetry's OTLP exporter is not "
            "installed: pip install 'bundlectl[otel]'"
        )
        _METER.append(None)
        return None
    provider = MeterProvider(
        resource=_resource(), metric_readers=[PeriodicExportingMetricReader(exporter)]
    )
    _METER_PROVIDER[:] = [provider]
    _METER.append(provider.get_meter("bundlectl"))
    return _METER[0]


_LOGGER: list[Any] = []  # [logger] of the audit log's `otlp` sink once set up, [None]: none
_LOG_PROVIDER: list[Any] = []


def _audit_logger() -> Any:
    """The OpenTelemetry logger the audit records go to (`audit.sinks: [otlp]`), exporting over
    OTLP as the SDK's own variables say (`OTEL_EXPORTER_OTLP_ENDPOINT`,
    `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`, `OTEL_EXPORTER_OTLP_LOGS_PROTOCOL`, ...)."""
    if _LOGGER:
        return _LOGGER[0]
    try:
        from opentelemetry.sdk._logs import LoggerProvider  # noqa: PLC0415
        from opentelemetry.sdk._logs.export import BatchLogRecordProcessor  # noqa: PLC0415

        exporter = _exporter("logs")
    except ImportError:
        err(
            "warning: audit.sinks names otlp, and OpenTelemetry's OTLP exporter is not "
            "installed: pip install 'bundlectl[otel]'; no audit records go there"
        )
        _LOGGER.append(None)
        return None
    provider = LoggerProvider(resource=_resource())
    provider.add_log_record_processor(BatchLogRecordProcessor(exporter))
    _LOG_PROVIDER[:] = [provider]
    _LOGGER.append(provider.get_logger("bundlectl.audit"))
    return _LOGGER[0]


def audit(record: Mapping[str, Any]) -> None:
    """One audit record (as the log file has it, chain link included) as an OpenTelemetry log
    record: the record the body, who called what and its outcome also as attributes."""
    logger = _audit_logger()
    if logger is None:
        return
    from opentelemetry._logs import LogRecord, SeverityNumber  # noqa: PLC0415

    attributes = {
        f"bundlectl.{key}": record[key]
        for key in ("agent", "server", "tool", "decision", "outcome", "call", "via")
        if isinstance(record.get(key), str)
    }
    refused = str(record.get("outcome", "")).startswith(("denied", "unauthorized"))
    logger.emit(
        LogRecord(
            body=dict(record),
            attributes=attributes,
            severity_number=SeverityNumber.WARN if refused else SeverityNumber.INFO,
            severity_text="WARN" if refused else "INFO",
        )
    )


def shutdown() -> None:
    """Send what is still buffered (a command about to exit)."""
    for span in list(_OPEN.values()):
        span.end()
    _OPEN.clear()
    if _PROVIDER:
        _PROVIDER[0].shutdown()
    if _LOG_PROVIDER:
        _LOG_PROVIDER[0].shutdown()
    if _METER_PROVIDER:
        _METER_PROVIDER[0].shutdown()  # the last export of the counts
