"""`bundlectl exec`: one policy-checked tool call (or a batch of them).

Order of work (SPEC 4.2), each step failing fast with its own exit code: load and validate the
config → resolve the agent's policy → decide (deny: exit 3, nothing started, audited) → `ask`:
confirm on a terminal or require --yes → start/connect the server → check the tool exists →
validate the arguments → call with the timeout → print → audit. The steps live in `bundlectl.calls`
(`pipeline`, `call`); `exec_call` runs them once the project is loaded and renders.

This module is the command's front: it checks the command line and, when the same call was
allowed outright last time and nothing it was decided from has changed, starts the server
before anything else is imported (`calls.headstart`). Nothing imported here loads YAML,
pydantic, an event loop or the MCP SDK; the rest is imported while the server starts.
"""

from __future__ import annotations

import math
from pathlib import Path

from bundlectl.calls.arguments import load_json_args, split_pairs
from bundlectl.calls.headstart import HeadStart
from bundlectl.cli.options import Format
from bundlectl.errors import UsageError
from bundlectl.policy.patterns import parse_tool_name
from bundlectl.policy.rules import default_agent


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
        from bundlectl.cli.commands import exec_call  # noqa: PLC0415 - see the module's doc

        return exec_call.run_batch(
            config,
            batch,
            yes=yes,
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
    who = default_agent(agent)
    with HeadStart(config, who, server, name) as head:
        head.start(quiet=quiet)
        from bundlectl.cli.commands import exec_call  # noqa: PLC0415 - see the module's doc

        return exec_call.one(
            head,
            config,
            server=server,
            name=name,
            split=split,
            base=base,
            agent=agent,
            who=who,
            timeout=timeout,
            connect_timeout=connect_timeout,
            yes=yes,
            fmt=fmt,
            output_dir=output_dir,
            quiet=quiet,
            fast_exit=fast_exit,
            follow_links=follow_links,
            wait=wait,
        )
