"""Prometheus metrics of the gateway (SPEC 13), opt-in: `serve --transport streamable-http
--metrics` serves them at `GET /metrics` (with `prometheus-client`, `bundlectl[metrics]`).

Counted where every call is recorded (`Pipeline.record`, all front doors and both gateway
paths) and where a downstream server is started afresh (`Downstream.after`). The labels are
names from the config (agents, servers, tools, outcomes), never values from a call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
    if not _METRICS or outcome == "pending":
        return
    _METRICS["calls"].labels(decision.agent, decision.server, decision.tool, outcome).inc()
    if outcome.startswith("denied") or outcome == "over-limit":
        rule = decision.rule.pattern if decision.rule is not None else "(default)"
        _METRICS["denials"].labels(decision.agent, rule).inc()
    elif decision.call is not None:
        _METRICS["duration"].labels(decision.server, decision.tool).observe(duration_ms / 1000)


def restarted(server: str, reason: str) -> None:
    if _METRICS:
        _METRICS["restarts"].labels(server, reason).inc()


def exposition() -> tuple[bytes, str]:
    """The metrics in Prometheus's text format, and its content type."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest  # noqa: PLC0415

    return generate_latest(_METRICS["registry"]), CONTENT_TYPE_LATEST
