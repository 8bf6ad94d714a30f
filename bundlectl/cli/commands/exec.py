"""`bundlectl exec`: one policy-checked tool call (or a batch of them).

Order of work (SPEC 4.2), each step failing fast with its own exit code: load and validate the
config → resolve the agent's policy → decide (deny: exit 3, nothing started, audited) → `ask`:
confirm on a terminal or require --yes → start/connect the server → check the tool exists →
validate the arguments → call with the timeout → print → audit. The steps live in `bundlectl.calls`
(`pipeline`, `call`); `exec_call` runs them once the project is loaded and renders.

This module is the command's front: it checks the command line and, when the same call was
allowed outright last time and nothing it was decided from has changed, starts the server
before anything else is imported (`calls.early_start`). Nothing imported here loads YAML,
pydantic, an event loop or the MCP SDK; the rest is imported while the server starts.
"""

from __future__ import annotations

import math

from bundlectl.calls.arguments import load_json_args, split_pairs
from bundlectl.calls.early_start import HeadStart
from bundlectl.cli.commands.exec_options import ExecOptions, Parsed
from bundlectl.cli.options import Format
from bundlectl.errors import UsageError
from bundlectl.policy.patterns import parse_tool_name
from bundlectl.policy.rules import default_agent


def run(options: ExecOptions) -> int:
    """One call (or a batch): the command line checked, then the call's server started ahead
    when it may be (`HeadStart`) while the rest is imported."""
    o = options
    for option, value in (("--timeout", o.timeout), ("--connect-timeout", o.connect_timeout)):
        if value is not None and not math.isfinite(value):  # nan passes click's range check
            raise UsageError(f"{option} must be a number of seconds, not {value}")
    if o.batch is not None:
        if o.tool or o.pairs or o.args_json:
            raise UsageError("--batch takes its calls from the file; give no tool or arguments")
        if o.follow_links:
            raise UsageError("--follow-links is for one call; read a batch's links with `read`")
        from bundlectl.cli.commands import exec_call  # noqa: PLC0415 - see the module's doc

        return exec_call.run_batch(o, o.batch)
    if not o.tool:
        raise UsageError(
            "missing SERVER.TOOL", hint="bundlectl exec files.read_file path=README.md"
        )
    if o.follow_links and o.fmt is Format.json:
        raise UsageError(
            "--follow-links prints the linked resources as text",
            hint="with --format json, read each link: bundlectl read SERVER URI --format json",
        )
    server, name = parse_tool_name(o.tool)
    call = Parsed(
        server,
        name,
        split_pairs(list(o.pairs)),
        load_json_args(o.args_json) if o.args_json else {},
        default_agent(o.agent),
    )
    with HeadStart(o.config, call.who, server, name) as head:
        head.start(quiet=o.quiet)
        from bundlectl.cli.commands import exec_call  # noqa: PLC0415 - see the module's doc

        return exec_call.one(head, o, call)
