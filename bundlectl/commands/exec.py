"""`bundlectl exec`: one policy-checked tool call (or a batch of them).

Order of work (SPEC 4.2), each step failing fast with its own exit code: load and validate the
config → resolve the agent's policy → decide (deny: exit 3, nothing started, audited) → `ask`:
confirm on a terminal or require --yes → start/connect the server → check the tool exists →
validate the arguments → call with the timeout → print → audit.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from bundlectl import audit, runtime
from bundlectl.arguments import DuplicateKeyError, load_json_args, loads_strict, split_pairs
from bundlectl.errors import BundlectlError, Interrupted, PolicyDenied, UsageError
from bundlectl.output import Format, emit_json, err
from bundlectl.patterns import parse_tool_name
from bundlectl.policy import Decision
from bundlectl.project import Resolution, load_project, resolve_project

DEFAULT_AGENT = "default"


def default_agent(agent: str | None) -> str:
    return agent or os.environ.get("BUNDLECTL_AGENT") or DEFAULT_AGENT


def _interactive() -> bool:
    ci = os.environ.get("CI", "").lower() not in ("", "0", "false")
    return sys.stdin.isatty() and sys.stderr.isatty() and not ci


def _audit(
    resolution: Resolution,
    decision: Decision,
    outcome: str,
    duration_ms: float,
    arguments: dict[str, Any] | None,
) -> None:
    rule = decision.rule
    record = audit.AuditRecord(
        agent=decision.agent,
        server=decision.server,
        tool=decision.tool,
        decision=decision.effect,
        rule=rule.pattern if rule else None,
        rule_source=str(rule.origin) if rule else None,
        lock_digest=audit.lock_digest(resolution.project.lock_path),
        # The policy that decided: the config as loaded now, whether or not the lock is fresh.
        policy_digest=resolution.lock.policy_digest,
        outcome=outcome,
        duration_ms=duration_ms,
        arguments_sha256=audit.arguments_digest(arguments),
    )
    from bundlectl import userconfig

    try:
        audit.append(record, userconfig.load().audit.path)
    except OSError as exc:
        err(f"warning: could not write the audit log: {exc}")


def _target(resolution: Resolution, server: str, quiet: bool) -> Any:
    from bundlectl import paths
    from bundlectl.executor.connect import Target

    merged = resolution.merged.servers.get(server)
    if merged is None:
        known = ", ".join(resolution.merged.servers) or "none"
        raise UsageError(
            f"no server {server!r} in the resolved configuration", hint=f"servers: {known}"
        )
    if merged.spec.disabled:
        raise UsageError(
            f"server {server!r} is disabled", hint=f"set servers.{server}.disabled: false to use it"
        )
    return Target(
        server,
        merged.spec,
        resolution.project.root,
        log_file=paths.state_dir() / "logs" / f"{server}.log" if quiet else None,
    )


def _decide(
    resolution: Resolution, agent: str, server: str, tool: str, *, yes: bool, prompt: bool
) -> Decision:
    """The policy decision, confirmed with a human where an ask rule needs it."""
    compiled = resolution.policy.agent(agent)
    can_ask = yes or (prompt and _interactive())
    decision = compiled.decide(server, tool, interactive=can_ask)
    if decision.effect == "deny":
        _audit(resolution, decision, "denied", 0.0, None)
        raise PolicyDenied(
            f"agent {agent!r} may not call {server}.{tool}: {decision.reason}",
            hint=f"bundlectl policy explain --agent {agent} {server}.{tool}",
        )
    if decision.effect == "ask" and not yes:
        assert decision.rule is not None
        sys.stderr.write(
            f"agent {agent!r} wants to call {server}.{tool} "
            f"({decision.rule.label}, {decision.rule.origin}). Allow? [y/N] "
        )
        sys.stderr.flush()
        answer = sys.stdin.readline().strip().lower()
        if answer not in ("y", "yes"):
            _audit(resolution, decision, "denied-by-user", 0.0, None)
            raise PolicyDenied(f"{server}.{tool} was not confirmed; nothing was started")
    return decision


def run(
    config: Path | None,
    tool: str | None,
    pairs: list[str],
    *,
    agent: str | None,
    args_json: str | None,
    timeout: float | None,
    connect_timeout: float,
    yes: bool,
    fmt: Format,
    output_dir: Path | None,
    quiet: bool,
    batch: Path | None,
) -> int:
    if batch is not None:
        if tool or pairs or args_json:
            raise UsageError("--batch takes its calls from the file; give no tool or arguments")
        return run_batch(
            config,
            batch,
            agent=agent,
            timeout=timeout,
            connect_timeout=connect_timeout,
            yes=yes,
            quiet=quiet,
        )
    if not tool:
        raise UsageError(
            "missing SERVER.TOOL", hint="bundlectl exec files.read_file path=README.md"
        )
    server, name = parse_tool_name(tool)
    split = split_pairs(pairs)
    base = load_json_args(args_json) if args_json else {}
    resolution = resolve_project(load_project(config))
    who = default_agent(agent)
    target = _target(resolution, server, quiet)
    decision = _decide(resolution, who, server, name, yes=yes, prompt=True)

    from bundlectl.executor.call import CallRequest
    from bundlectl.executor.connect import start_child
    from bundlectl.executor.stdio import stop_on_failure

    limit = timeout if timeout is not None else float(target.spec.timeout)
    request = CallRequest(who, server, name, decision, split, base, limit)
    # Start a stdio server before the SDK is imported: its start-up and our import overlap.
    child = start_child(target) if target.spec.transport == "stdio" and not target.builtin else None
    # Whatever happens before the transport owns the child (Ctrl-C while the SDK imports),
    # the server and everything it started must not outlive us.
    with stop_on_failure(child):
        return _call(
            resolution,
            target,
            child,
            request,
            connect_timeout=connect_timeout,
            whole=timeout,
            fmt=fmt,
            output_dir=output_dir,
        )


def _call(
    resolution: Resolution,
    target: Any,
    child: Any,
    request: Any,
    *,
    connect_timeout: float,
    whole: float | None,
    fmt: Format,
    output_dir: Path | None,
) -> int:
    """Connect, call, print (before the server's shutdown), audit; the exit code."""
    from bundlectl.executor import runner
    from bundlectl.executor.call import call_once

    printed: dict[str, int] = {}

    def show(outcome: Any) -> None:
        printed["code"] = _print(outcome, fmt, output_dir)
        if child is not None and runtime.FAST_EXIT:
            child.detach = True  # the rest of the shutdown need not hold the user up

    async def go() -> Any:
        return await call_once(
            target, request, child=child, connect_timeout=connect_timeout, whole=whole, show=show
        )

    decision = request.decision
    started = time.perf_counter()
    try:
        outcome = runner.run(go)
    except BundlectlError as exc:
        kind = "interrupted" if isinstance(exc, Interrupted) else "error"
        _audit(resolution, decision, kind, (time.perf_counter() - started) * 1000, None)
        raise exc from None
    finally:
        target.close(wait=0 if child is not None and child.detach else 1.0)
    _audit(resolution, decision, outcome.outcome, outcome.duration_ms, outcome.arguments)
    if outcome.error is not None:
        raise outcome.error
    return printed["code"]


def _print(outcome: Any, fmt: Format, output_dir: Path | None) -> int:
    from bundlectl.executor.render import OutputDir, render_text, result_json

    request, result = outcome.request, outcome.result
    if fmt is Format.json:
        rule = request.decision.rule
        emit_json(
            {
                "agent": request.agent,
                "server": request.server,
                "tool": request.tool,
                "decision": request.decision.effect,
                "rule": rule.pattern if rule else None,
                "duration_ms": round(outcome.duration_ms, 1),
                "result": result_json(result),
            }
        )
        return 1 if result.is_error else 0
    lines = render_text(result, OutputDir(output_dir), f"{request.server}-{request.tool}")
    if result.is_error:  # reported on stderr (exit 1) once the audit record is written
        sys.stderr.write(
            f"error: tool {request.qualified} reported an error:\n"
            + "".join(line if line.endswith("\n") else line + "\n" for line in lines)
        )
        return 1
    for line in lines:
        sys.stdout.write(line if line.endswith("\n") else line + "\n")
    return 0


def _parse_batch(
    resolution: Resolution,
    batch: Path,
    *,
    agent: str | None,
    timeout: float | None,
    yes: bool,
    quiet: bool,
) -> tuple[list[Any], dict[str, Any]]:
    """Each line decided by the policy now; what is allowed becomes a request."""
    import json

    from bundlectl.executor.batch import BatchItem
    from bundlectl.executor.call import CallRequest

    try:
        lines = batch.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise UsageError(f"cannot read {batch}: {exc.strerror}") from None
    items: list[BatchItem] = []
    targets: dict[str, Any] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        call: dict[str, str] | None = None
        try:
            entry = loads_strict(line)
            if not isinstance(entry, dict) or not isinstance(entry.get("tool"), str):
                raise UsageError('each line must be an object with a "tool"')
            arguments = entry.get("arguments") or {}
            if not isinstance(arguments, dict):
                raise UsageError('"arguments" must be an object')
            who = default_agent(entry.get("agent") or agent)
            server, name = parse_tool_name(entry["tool"])
            call = {"agent": who, "server": server, "tool": name}
            if server not in targets:
                targets[server] = _target(resolution, server, quiet)
            decision = _decide(resolution, who, server, name, yes=yes, prompt=False)
            limit = timeout if timeout is not None else float(targets[server].spec.timeout)
            items.append(
                BatchItem(number, CallRequest(who, server, name, decision, [], arguments, limit))
            )
        except json.JSONDecodeError as exc:
            items.append(
                BatchItem(
                    number,
                    None,
                    UsageError(f"{batch}:{number}:{exc.colno}: invalid JSON: {exc.msg}"),
                )
            )
        except DuplicateKeyError as exc:
            items.append(BatchItem(number, None, UsageError(f"{batch}:{number}: {exc}")))
        except BundlectlError as exc:
            items.append(BatchItem(number, None, exc, call))
    return items, targets


def _batch_line(item: Any, outcome: Any) -> tuple[dict[str, Any], int]:
    """One output line of a batch, and its exit code."""
    from bundlectl.executor.render import result_json

    error = item.error if outcome is None else outcome.error
    data: dict[str, Any] = {"line": item.line, **(item.call or {})}
    if item.request is not None:
        req = item.request
        data.update(
            agent=req.agent,
            server=req.server,
            tool=req.tool,
            decision=req.decision.effect,
            rule=req.decision.rule.pattern if req.decision.rule else None,
        )
    if outcome is not None:
        data["duration_ms"] = round(outcome.duration_ms, 1)
    if error is not None:
        data["error"] = {"exit_code": error.exit_code, "message": error.message}
        return data, error.exit_code
    data["result"] = result_json(outcome.result)
    return data, 1 if outcome.result.is_error else 0


def run_batch(
    config: Path | None,
    batch: Path,
    *,
    agent: str | None,
    timeout: float | None,
    connect_timeout: float,
    yes: bool,
    quiet: bool,
) -> int:
    """Run a batch; exit with the code of the first call that did not succeed (0 if none)."""
    from bundlectl.executor import runner
    from bundlectl.executor.batch import BatchItem, write_line
    from bundlectl.executor.batch import run_batch as run_items
    from bundlectl.executor.call import CallOutcome

    resolution = resolve_project(load_project(config))
    items, targets = _parse_batch(
        resolution, batch, agent=agent, timeout=timeout, yes=yes, quiet=quiet
    )
    codes: list[int] = []

    def emit(item: BatchItem, outcome: CallOutcome | None) -> None:
        if outcome is not None and item.request is not None:
            _audit(
                resolution,
                item.request.decision,
                outcome.outcome,
                outcome.duration_ms,
                outcome.arguments,
            )
        data, code = _batch_line(item, outcome)
        codes.append(code)
        write_line(data)

    async def go() -> Any:
        return await run_items(items, targets, emit, connect_timeout=connect_timeout)

    try:
        runner.run(go)
    finally:
        for target in targets.values():
            target.close()
    return next((code for code in codes if code), 0)
