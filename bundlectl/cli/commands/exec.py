"""`bundlectl exec`: one policy-checked tool call (or a batch of them).

Order of work (SPEC 4.2), each step failing fast with its own exit code: load and validate the
config → resolve the agent's policy → decide (deny: exit 3, nothing started, audited) → `ask`:
confirm on a terminal or require --yes → start/connect the server → check the tool exists →
validate the arguments → call with the timeout → print → audit. The steps live in `bundlectl.calls`
(`pipeline`, `call`); this command parses, runs and renders.

A stdio server is started as soon as the policy has let the call through, and what talks to it
(asyncio, the transport, the validator, the MCP SDK when it is needed) is imported while it
starts: the modules imported here load none of them.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bundlectl.calls.arguments import build_arguments, load_json_args, preload, split_pairs
from bundlectl.calls.audit import AuditLog
from bundlectl.calls.confirm import always_yes, terminal_confirmer
from bundlectl.calls.pipeline import Pipeline
from bundlectl.calls.render import OutputDir, render_text, result_json
from bundlectl.cli.options import Format
from bundlectl.config.project import load_project
from bundlectl.errors import BundlectlError, UsageError
from bundlectl.mcpio.child import stop_on_failure
from bundlectl.mcpio.target import start_child
from bundlectl.output import emit_json, err, note, out
from bundlectl.policy.patterns import parse_tool_name
from bundlectl.policy.rules import default_agent
from bundlectl.resolve.resolved import resolve_project

if TYPE_CHECKING:
    from bundlectl.calls.batch import BatchItem
    from bundlectl.calls.call import CallOutcome, CallRequest
    from bundlectl.mcpio.child import Child
    from bundlectl.mcpio.target import Target


def _pipeline(config: Path | None, *, yes: bool, prompt: bool, wait: bool = False) -> Pipeline:
    """`prompt`: an `ask` rule is confirmed on the terminal when there is one, else (`wait`) by
    an approver out of band, whom exec waits for; without either the approver's request is
    made and its id reported (batch, --no-wait)."""
    resolution = resolve_project(load_project(config))
    pipeline = Pipeline(resolution, AuditLog(resolution), None, wait_for_approver=wait)
    if yes:
        pipeline.confirm = always_yes
    elif prompt:
        pipeline.confirm = terminal_confirmer() or pipeline.out_of_band(wait=wait)
    return pipeline


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
    fast_exit: bool = False,
    follow_links: bool = False,
    wait: bool = True,
) -> int:
    """`fast_exit`: the process leaves with os._exit once the command returns, so a finished
    stdio server's shutdown may be left to the detached watchdog."""
    for option, value in (("--timeout", timeout), ("--connect-timeout", connect_timeout)):
        if value is not None and not math.isfinite(value):  # nan passes click's range check
            raise UsageError(f"{option} must be a number of seconds, not {value}")
    if batch is not None:
        if tool or pairs or args_json:
            raise UsageError("--batch takes its calls from the file; give no tool or arguments")
        if follow_links:
            raise UsageError("--follow-links is for one call; read a batch's links with `read`")
        pipeline = _pipeline(config, yes=yes, prompt=False)
        return run_batch(
            pipeline,
            batch,
            agent=agent,
            timeout=timeout,
            connect_timeout=connect_timeout,
            quiet=quiet,
        )
    if not tool:
        raise UsageError(
            "missing SERVER.TOOL", hint="bundlectl exec files.read_file path=README.md"
        )
    if follow_links and fmt is Format.json:
        raise UsageError(
            "--follow-links prints the linked resources as text",
            hint="with --format json, read each link: bundlectl read SERVER URI --format json",
        )
    server, name = parse_tool_name(tool)
    split = split_pairs(pairs)
    base = load_json_args(args_json) if args_json else {}
    pipeline = _pipeline(config, yes=yes, prompt=True, wait=wait)
    who = default_agent(agent)
    unlisted = pipeline.resolution.policy.unlisted(who) if agent is not None else None
    if unlisted is not None:  # SPEC 3: it gets policy.default; often a typo, so say so
        note(unlisted)
    target = pipeline.target(server, quiet=quiet)
    target.sign_in = terminal_confirmer() is not None  # a person here: OAuth step-up may ask
    arguments, typed = _as_typed(target, name, split, base)
    decision = pipeline.decide(who, server, name, arguments, typed=typed)

    # Start a stdio server now: its start-up and our imports of what talks to it overlap.
    child = start_child(target) if target.spec.transport == "stdio" and not target.builtin else None
    # Whatever happens before the transport owns the child (Ctrl-C while the SDK imports),
    # the server and everything it started must not outlive us.
    with stop_on_failure(child):
        from bundlectl.calls.call import CallRequest  # noqa: PLC0415 - see the module's doc

        if child is not None:
            preload()
        limit = timeout if timeout is not None else float(target.spec.timeout)
        check = pipeline.pin_check(server)
        request = CallRequest(who, server, name, decision, split, base, limit, check=check)
        code, links = _call(
            pipeline,
            target,
            child,
            request,
            connect_timeout=connect_timeout,
            whole=timeout,
            fmt=fmt,
            output_dir=output_dir,
            detach=fast_exit,
        )
    if links and not follow_links and fmt is Format.text:
        err(
            f"note: the result links {len(links)} resource(s); --follow-links reads them "
            f"(or: bundlectl read {server} {links[0]})"
        )
    for uri in links if follow_links else []:
        # The same rule, audit and output as `bundlectl read` (the linked resource is the
        # server's: read where the tool that named it runs).
        from bundlectl.cli.commands.resources import run_read  # noqa: PLC0415 - only with links

        run_read(
            config,
            server=server,
            uri=uri,
            agent=who,
            fmt=fmt,
            output_dir=output_dir,
            timeout=float(timeout or target.spec.timeout),
        )
    return code


def _call(
    pipeline: Pipeline,
    target: Target,
    child: Child | None,
    request: CallRequest,
    *,
    connect_timeout: float,
    whole: float | None,
    fmt: Format,
    output_dir: Path | None,
    detach: bool,
) -> tuple[int, list[str]]:
    """Connect, call, print (before the server's shutdown), audit; the exit code and the URIs
    of the resources the result links to."""
    from bundlectl.calls.call import call_once, client_capabilities, completed_now  # noqa: PLC0415

    printed: dict[str, int] = {}
    root = pipeline.resolution.project.root
    request.events = fmt is Format.json

    if child is not None and detach:
        # Once exec has its answer (printed) or its error (a timeout, say), the rest of the
        # server's shutdown is the detached watchdog's: it never holds the user up, and
        # `--timeout` bounds the whole command (a hung server took 2-4 s more to stop).
        child.detach = True

    def show(outcome: CallOutcome) -> None:
        printed["code"] = _print(outcome, fmt, output_dir)

    async def go() -> CallOutcome:
        return await call_once(
            target,
            request,
            child=child,
            connect_timeout=connect_timeout,
            whole=whole,
            show=show,
            options=client_capabilities(root, ask=terminal_confirmer() is not None),
            direct=True,
        )

    try:
        outcome = completed_now(pipeline, request, go)
    finally:
        target.close(wait=0 if child is not None and child.detach else 1.0)
    if outcome.error is not None:
        raise outcome.error
    result = outcome.result
    links = [
        str(block["uri"])
        for block in (result.content if result is not None and not result.is_error else [])
        if block.get("type") == "resource_link" and block.get("uri")
    ]
    return printed["code"], list(dict.fromkeys(links))


def _print(outcome: CallOutcome, fmt: Format, output_dir: Path | None) -> int:
    request, result = outcome.request, outcome.result
    assert result is not None  # shown only when the call got an answer
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
        err(f"error: tool {request.qualified} reported an error:")
        for line in lines:
            err(line.removesuffix("\n"))
        return 1
    for line in lines:
        out(line.removesuffix("\n"))
    return 0


def run_batch(
    pipeline: Pipeline,
    batch: Path,
    *,
    agent: str | None,
    timeout: float | None,
    connect_timeout: float,
    quiet: bool,
) -> int:
    """Run a batch; exit with the code of the first call that did not succeed (0 if none)."""
    from bundlectl.calls.batch import batch_line, read_batch, run_items, write_line  # noqa: PLC0415
    from bundlectl.mcpio import runner  # noqa: PLC0415

    items, targets = read_batch(batch, pipeline, agent=agent, timeout=timeout, quiet=quiet)
    codes: list[int] = []

    def emit(item: BatchItem, outcome: CallOutcome | None) -> None:
        data, code = batch_line(item, outcome)
        codes.append(code)
        write_line(data)

    async def go() -> Any:
        return await run_items(pipeline, items, targets, emit, connect_timeout=connect_timeout)

    try:
        runner.run(go)
    finally:
        for target in targets.values():
            target.close()
    return next((code for code in codes if code), 0)


def _as_typed(
    target: Target, tool: str, split: list[tuple[str, str]], base: dict[str, Any]
) -> tuple[dict[str, Any], bool]:
    """The call's arguments before the server is asked for its tools, and whether they are
    typed (KEY=VALUE strings typed by the declared input schema, when there is one), so the
    policy's argument conditions can be checked before anything starts."""
    if not split:
        return base, True
    for declared in target.spec.tools:
        if declared.name == tool and declared.input_schema:
            try:
                return build_arguments(split, base, declared.input_schema), True
            except BundlectlError:
                break  # validation says what is wrong, once the live schema is known
    return {**base, **dict(split)}, False
