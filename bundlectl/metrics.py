"""Metrics (SPEC 13), opt-in: Prometheus — `serve --transport streamable-http --metrics` serves
them at `GET /metrics` (with `prometheus-client`, `bundlectl[metrics]`) — and OpenTelemetry —
exported over OTLP by every command when the SDK's variables ask for metrics
(`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_METRICS_EXPORTER`, ...; `bundlectl[otel]`), under the
same names (`telemetry.instruments`).

Counted where every call is recorded (`Pipeline.record`, all front doors and both gateway
paths) and where a downstream server is started afresh (`Downstream.after`). The labels are
names from the config (agents, servers, tools, outcomes), never values from a call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bundlectl import telemetry

if TYPE_CHECKING:
    from bundlectl.policy.rules import Decision

_METRICS: dict[str, Any] = {}  # empty: off


def enable() -> None:
    """Start counting (the gateway with --metrics); raises ImportError without the package."""
    if _METRICS:
        return
    from prometheus_client import CollectorRegistry, Counter, Histogram  # noqa: PLC0415

    registry = CollectorRegistry()
    _METRICS["registry"] = registry
    _METRICS["calls"] = Counter(
        "bundlectl_calls",
        "Calls by agent, server, tool and outcome (ok, denied, tool-error, over-limit, ...).",
        ["agent", "server", "tool", "outcome"],
        registry=registry,
    )
    _METRICS["denials"] = Counter(
        "bundlectl_denials",
        "Calls the policy refused, by agent and the rule that decided.",
        ["agent", "rule"],
        registry=registry,
    )
    _METRICS["duration"] = Histogram(
        "bundlectl_call_duration_seconds",
        "How long calls that reached their server took, by server and tool.",
        ["server", "tool"],
        registry=registry,
    )
    _METRICS["restarts"] = Counter(
        "bundlectl_downstream_restarts",
        "Downstream servers started afresh after a crash or an error reply, by server.",
        ["server", "reason"],
        registry=registry,
    )


def disable() -> None:
    _METRICS.clear()


def record(decision: Decision, outcome: str, duration_ms: float) -> None:
    """A call's step as the audit log has it; its outcome is counted (not `pending`)."""
    otel = telemetry.instruments()
    if (not _METRICS and otel is None) or outcome == "pending":
        return
    refused = outcome.startswith("denied") or outcome == "over-limit"
    rule = (decision.rule.pattern if decision.rule is not None else "(default)") if refused else ""
    timed = not refused and decision.call is not None
    if _METRICS:
        _METRICS["calls"].labels(decision.agent, decision.server, decision.tool, outcome).inc()
        if refused:
            _METRICS["denials"].labels(decision.agent, rule).inc()
        elif timed:
            _METRICS["duration"].labels(decision.server, decision.tool).observe(duration_ms / 1000)
    if otel is not None:
        labels = {"agent": decision.agent, "server": decision.server, "tool": decision.tool}
        otel["calls"].add(1, {**labels, "outcome": outcome})
        if refused:
            otel["denials"].add(1, {"agent": decision.agent, "rule": rule})
        elif timed:
            where = {"server": decision.server, "tool": decision.tool}
            otel["duration"].record(duration_ms / 1000, where)


def restarted(server: str, reason: str) -> None:
    if _METRICS:
        _METRICS["restarts"].labels(server, reason).inc()
    otel = telemetry.instruments()
    if otel is not None:
        otel["restarts"].add(1, {"server": server, "reason": reason})


def exposition() -> tuple[bytes, str]:
    """The metrics in Prometheus's text format, and its content type."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest  # noqa: PLC0415

    return generate_latest(_METRICS["registry"]), CONTENT_TYPE_LATEST
