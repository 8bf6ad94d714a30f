"""Metrics (SPEC 13), opt-in: Prometheus — `serve --transport streamable-http --metrics` serves
them at `GET /metrics` (with `prometheus-client`, `bundlectl[metrics]`) — and OpenTelemetry —
exported over OTLP by every command when the SDK's variables ask for metrics
(`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_METRICS_EXPORTER`, ...; `bundlectl[otel]`, the meter from
`telemetry.meter`). Both are made from one table (`_METRICS`), so they share names and labels.

Counted where every call is recorded (`Pipeline.record`, all front doors and both gateway
paths), where a quota refuses one (`Pipeline.charge`), where a downstream server is started
afresh (`Downstream.after`) and where a gateway session begins and ends (`handlers._Server`);
pending approvals are read from the state store when the metrics are collected (`pending`).
The labels are names from the config (agents, servers, tools, outcomes, limits), never values
from a call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from bundlectl import telemetry
from bundlectl.errors import BundlectlError

if TYPE_CHECKING:
    from bundlectl.calls.calldata import ToolCall
    from bundlectl.policy.rules import Decision


class _Metric(NamedTuple):
    name: str
    kind: str  # counter, histogram, gauge (set by the process), reading (read when collected)
    about: str
    labels: tuple[str, ...] = ()


_METRICS = {
    "calls": _Metric(
        "bundlectl_calls",
        "counter",
        "Calls by agent, server, tool and outcome (ok, denied, tool-error, over-limit, ...).",
        ("agent", "server", "tool", "outcome"),
    ),
    "denials": _Metric(
        "bundlectl_denials",
        "counter",
        "Calls the policy refused, by agent and the rule that decided.",
        ("agent", "rule"),
    ),
    "duration": _Metric(
        "bundlectl_call_duration_seconds",
        "histogram",
        "How long calls that reached their server took, by server and tool.",
        ("server", "tool"),
    ),
    "restarts": _Metric(
        "bundlectl_downstream_restarts",
        "counter",
        "Downstream servers started afresh after a crash or an error reply, by server.",
        ("server", "reason"),
    ),
    "quota": _Metric(
        "bundlectl_quota_refusals",
        "counter",
        "Calls a quota (limits:) refused, by agent and limit.",
        ("agent", "limit"),
    ),
    "sessions": _Metric(
        "bundlectl_active_sessions", "gauge", "MCP sessions open on the gateway now."
    ),
    "pending": _Metric(
        "bundlectl_pending_approvals",
        "reading",
        "Approval requests waiting for an approver in the state store (shared by replicas).",
    ),
}

_PROMETHEUS: dict[str, Any] = {}  # empty: off
_OTEL: list[dict[str, Any] | None] = []  # [instruments] once set up, [None]: not asked for
# What `bundlectl_pending_approvals` reads (the gateway's pipeline); None when unknown.
_PENDING: list[Callable[[], int | None]] = []


def enable() -> None:
    """Start counting (the gateway with --metrics); raises ImportError without the package."""
    if _PROMETHEUS:
        return
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram  # noqa: PLC0415

    registry = CollectorRegistry()
    _PROMETHEUS["registry"] = registry
    for key, metric in _METRICS.items():
        if metric.kind == "counter":
            made: Any = Counter(metric.name, metric.about, metric.labels, registry=registry)
        elif metric.kind == "histogram":
            made = Histogram(metric.name, metric.about, metric.labels, registry=registry)
        else:
            made = Gauge(metric.name, metric.about, metric.labels, registry=registry)
            if metric.kind == "reading":
                made.set_function(lambda: _read(float("nan")))
        _PROMETHEUS[key] = made


def disable() -> None:
    _PROMETHEUS.clear()


def _otel() -> dict[str, Any] | None:
    """The OpenTelemetry instruments, made once from the table when the environment asks for
    metrics (None: it does not, and nothing was imported)."""
    if _OTEL:
        return _OTEL[0]
    meter = telemetry.meter()
    if meter is None:
        _OTEL.append(None)
        return None
    from opentelemetry.metrics import Observation  # noqa: PLC0415

    def observed(_options: object) -> Iterable[Observation]:
        value = _read(None)
        return [] if value is None else [Observation(value)]

    made: dict[str, Any] = {}
    for key, metric in _METRICS.items():
        if metric.kind == "counter":
            made[key] = meter.create_counter(metric.name, description=metric.about)
        elif metric.kind == "histogram":
            made[key] = meter.create_histogram(metric.name, unit="s", description=metric.about)
        elif metric.kind == "gauge":
            made[key] = meter.create_up_down_counter(metric.name, description=metric.about)
        else:
            meter.create_observable_gauge(metric.name, [observed], description=metric.about)
    _OTEL.append(made)
    return made


def _count(key: str, amount: float, **labels: str) -> None:
    """Add `amount` to a counter or gauge (histograms: observe it) on every backend that is on."""
    if _PROMETHEUS:
        metric = _PROMETHEUS[key]
        found = metric.labels(**labels) if labels else metric
        if _METRICS[key].kind == "histogram":
            found.observe(amount)
        else:
            found.inc(amount)
    otel = _otel()
    if otel is not None:
        instrument = otel[key]
        if _METRICS[key].kind == "histogram":
            instrument.record(amount, labels)
        else:
            instrument.add(amount, labels)


def on() -> bool:
    return bool(_PROMETHEUS) or _otel() is not None


def record(decision: Decision, outcome: str, duration_ms: float, call: ToolCall | None) -> None:
    """A call's step as the audit log has it; its outcome is counted (not `pending`)."""
    if outcome == "pending" or not on():
        return
    who = {"agent": decision.agent, "server": decision.server, "tool": decision.tool}
    _count("calls", 1, **who, outcome=outcome)
    if outcome.startswith("denied"):
        _count("denials", 1, agent=decision.agent, rule=decision.decided_by)
    elif outcome != "over-limit" and call is not None and call.id is not None:
        _count("duration", duration_ms / 1000, server=decision.server, tool=decision.tool)


def over_limit(agent: str, limit: str) -> None:
    """A quota refused a call of `agent` (`limit`: which entry, as `limits[N]`)."""
    if on():
        _count("quota", 1, agent=agent, limit=limit)


def restarted(server: str, reason: str) -> None:
    if on():
        _count("restarts", 1, server=server, reason=reason)


def session(change: int) -> None:
    """A gateway session began (+1) or ended (-1)."""
    if on():
        _count("sessions", change)


def pending(read: Callable[[], int | None] | None) -> None:
    """What `bundlectl_pending_approvals` reads when collected (None: nothing, it is absent)."""
    _PENDING[:] = [read] if read is not None else []


def _read(missing: float | None) -> float | None:
    """The pending approvals now, or `missing` when there is nothing to read them from or the
    store cannot say (collecting never fails for it)."""
    if not _PENDING:
        return missing
    try:
        value = _PENDING[0]()
    except BundlectlError:  # a store that cannot be reached is not a collection's failure
        return missing
    return missing if value is None else float(value)


def exposition() -> tuple[bytes, str]:
    """The metrics in Prometheus's text format, and its content type."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest  # noqa: PLC0415

    return generate_latest(_PROMETHEUS["registry"]), CONTENT_TYPE_LATEST
