"""`exec`'s work once the project is loaded: judge the call, start or take over its server,
call, print, audit — or run a batch. `exec` (the command's front) imports this module after a
head start has started the server, so what is imported here loads while the server starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from bundlectl.calls import sequence
from bundlectl.calls.arguments import build_arguments
from bundlectl.calls.audit import AuditLog
from bundlectl.calls.calldata import ToolCall
from bundlectl.calls.confirm import AnswerLater, always_yes, run_to_end, terminal_confirmer
from bundlectl.calls.pipeline import Pipeline
from bundlectl.calls.render import OutputDir, render_text, result_json
from bundlectl.cli.options import Format
from bundlectl.config.project import load_project
from bundlectl.errors import BundlectlError
from bundlectl.mcpio.child import stop_on_failure
from bundlectl.mcpio.schemas import preload
from bundlectl.output import emit_json, err, note, out, terminal_safe, visible_lines
from bundlectl.resolve.resolved import resolve_project

if TYPE_CHECKING:
    from bundlectl.calls.batch import BatchItem
    from bundlectl.calls.calldata import CallOutcome, CallRequest
    from bundlectl.calls.early_start import HeadStart
    from bundlectl.cli.commands.exec_options import ExecOptions, Parsed
    from bundlectl.mcpio.target import Target
    from bundlectl.policy.rules import Decision


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


def one(head: HeadStart, options: ExecOptions, parsed: Parsed) -> int:
    """One call through the sequence: judged, its server started (or the head start's taken
    over), called, printed, audited."""
    o, server, who = options, parsed.server, parsed.who
    pipeline = _pipeline(o.config, yes=o.yes, prompt=True, wait=o.wait)
    unlisted = pipeline.resolution.policy.unlisted(who) if o.agent is not None else None
    if unlisted is not None:  # SPEC 3: it gets policy.default; often a typo, so say so
        note(unlisted)
    target = pipeline.target(server, quiet=o.quiet, agents=[who])
    target.sign_in = terminal_confirmer() is not None  # a person here: OAuth step-up may ask
    seen, typed = _as_typed(target, parsed.name, parsed.split, parsed.base)
    call = ToolCall(who, server, parsed.name, parsed.base, parsed.split, seen=seen, typed=typed)
    door = _ExecDoor(pipeline, head, target, o.timeout, connect_timeout=o.connect_timeout)
    door.fmt, door.output_dir, door.detach = o.fmt, o.output_dir, o.fast_exit
    ran = sequence.run(pipeline, door, call)  # its confirmations block: no event loop yet
    outcome = run_to_end(ran)
    assert not isinstance(outcome, AnswerLater)  # exec's confirmations answer now
    if outcome.error is not None:
        raise outcome.error
    result = outcome.result
    links = list(
        dict.fromkeys(
            str(block["uri"])
            for block in (result.content if result is not None and not result.is_error else [])
            if block.get("type") == "resource_link" and block.get("uri")
        )
    )
    if links and not o.follow_links and o.fmt is Format.text:
        err(
            f"note: the result links {len(links)} resource(s); --follow-links reads them "
            f"(or: bundlectl read {server} {links[0]})"
        )
    for uri in links if o.follow_links else []:
        # The same rule, audit and output as `bundlectl read` (the linked resource is the
        # server's: read where the tool that named it runs).
        from bundlectl.cli.commands.resources import run_read  # noqa: PLC0415 - only with links

        run_read(
            o.config,
            server=server,
            uri=uri,
            agent=who,
            fmt=o.fmt,
            output_dir=o.output_dir,
            timeout=float(o.timeout or target.spec.timeout),
        )
    return door.code


class _ExecDoor(sequence.Door["CallOutcome"]):
    """exec's door: confirmed on the terminal (or --yes, or by an approver it waits for); its
    stdio server taken over from the head start; the result printed before the server shuts
    down; its event loop its own (the sequence runs without one until the call is made)."""

    def __init__(
        self,
        pipeline: Pipeline,
        head: HeadStart,
        target: Target,
        whole: float | None,
        *,
        connect_timeout: float,
    ) -> None:
        self.pipeline, self.head, self.target, self.whole = pipeline, head, target, whole
        self.connect_timeout = connect_timeout
        self.fmt: Format = Format.text
        self.output_dir: Path | None = None
        self.detach = False  # the server's shutdown left to its watchdog (--fast-exit)
        self.code = 0  # the exit code of what was printed

    def request(self, pipeline: Pipeline, call: ToolCall, decision: Decision) -> CallRequest:
        request = super().request(pipeline, call, decision)
        spec = self.target.spec
        request.timeout = self.whole if self.whole is not None else float(spec.timeout)
        request.events = self.fmt is Format.json
        return request

    async def perform(self, request: CallRequest) -> CallOutcome:
        """Start the server (a stdio one now: its start-up and our imports of what talks to it
        overlap), connect, call, print before the server's shutdown."""
        target, pipeline = self.target, self.pipeline
        stdio = target.spec.transport == "stdio" and not target.builtin
        launchable = True
        try:
            child = self.head.settle(target) if stdio else None
        except BundlectlError:  # no launch can be made (an unset variable): the call's own
            child, launchable = None, False  # start fails the same way, and its end says so
        if child is not None and self.detach:
            # Once exec has its answer (printed) or its error (a timeout, say), the rest of the
            # server's shutdown is the detached watchdog's: it never holds the user up, and
            # `--timeout` bounds the whole command (a hung server took 2-4 s more to stop).
            child.detach = True
        # Whatever happens before the transport owns the child (Ctrl-C while the SDK imports),
        # the server and everything it started must not outlive us.
        with stop_on_failure(child):
            # what talks to the server loads while it starts (see the module's doc)
            from bundlectl.calls.call import client_capabilities, connect_and_call  # noqa: PLC0415
            from bundlectl.mcpio import runner  # noqa: PLC0415

            if launchable:
                self.head.keep(pipeline, request.decision, target)
            if child is not None:
                preload()
            root = pipeline.resolution.project.root
            options = client_capabilities(root, ask=terminal_confirmer() is not None)

            async def go() -> CallOutcome:
                return await connect_and_call(
                    target,
                    request,
                    child=child,
                    connect_timeout=self.connect_timeout,
                    whole=self.whole,
                    show=self.show,
                    options=options,
                    direct=True,
                )

            try:
                return runner.run(go)
            finally:
                target.close(wait=0 if child is not None and child.detach else 1.0)

    def show(self, outcome: CallOutcome) -> None:
        self.code = _print(outcome, self.fmt, self.output_dir)

    async def present(self, outcome: CallOutcome) -> CallOutcome:
        return outcome


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
        for line in lines:  # a message: the server's words escaped, its lines kept
            err(visible_lines(line.removesuffix("\n")))
        return 1
    for line in lines:  # the result: as it is, but no terminal command on a terminal
        out(terminal_safe(line.removesuffix("\n")))
    return 0


def run_batch(options: ExecOptions, batch: Path) -> int:
    """Run a batch; exit with the code of the first call that did not succeed (0 if none)."""
    from bundlectl.calls.batch import batch_line, read_batch, run_items, write_line  # noqa: PLC0415
    from bundlectl.mcpio import runner  # noqa: PLC0415

    o = options
    pipeline = _pipeline(o.config, yes=o.yes, prompt=False)
    items, targets = read_batch(batch, pipeline, agent=o.agent, quiet=o.quiet)
    codes: list[int] = []

    def emit(item: BatchItem, outcome: CallOutcome | None) -> None:
        data, code = batch_line(item, outcome)
        codes.append(code)
        write_line(data)

    async def go() -> Any:
        return await run_items(
            pipeline, items, targets, emit, connect_timeout=o.connect_timeout, timeout=o.timeout
        )

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
