"""The commands that check and review the policy: policy, lint, approvals, limits, audit.

Command bodies import their implementation lazily so that `--help` and the commands that do not
talk to servers never pay for what they do not use (above all, the MCP SDK).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bundlectl.cli import completion
from bundlectl.cli.app import (
    AgentOpt,
    AgentsOpt,
    ApprovalIdArg,
    AuditFileOpt,
    ConfigOpt,
    FormatOpt,
    InteractiveOpt,
    PolicyArgsOpt,
    SinceOpt,
    UnlistedOpt,
    app,
    approvals_app,
    audit_app,
    limits_app,
    policy_app,
)
from bundlectl.cli.options import (
    CedarFormat,
    DiffFormat,
    FailLevel,
    Format,
    LintFormat,
    MatrixFormat,
)


@approvals_app.command("list")
def approvals_list(
    everything: Annotated[
        bool, typer.Option("--all", help="Every request kept (7 days), not only pending ones.")
    ] = False,
    config: ConfigOpt = None,
    fmt: FormatOpt = Format.text,
) -> int:
    """List the calls waiting for a person's approval."""
    from bundlectl.cli.commands import approvals as cmd

    return cmd.list_requests(config, everything=everything, fmt=fmt)


@approvals_app.command("show")
def approvals_show(
    approval_id: ApprovalIdArg, config: ConfigOpt = None, fmt: FormatOpt = Format.text
) -> int:
    """Show one held call: who, which tool, which rule asked, and its arguments."""
    from bundlectl.cli.commands import approvals as cmd

    return cmd.show(config, approval_id, fmt=fmt)


@approvals_app.command("approve")
def approvals_approve(
    approval_id: ApprovalIdArg,
    once: Annotated[
        bool, typer.Option("--once", help="Let this call through once (the default).")
    ] = False,
    duration: Annotated[
        str | None,
        typer.Option(
            "--for",
            metavar="DURATION",
            help="Let the same call (agent, tool, arguments) through for a while: 30m, 8h, 1d.",
        ),
    ] = None,
    config: ConfigOpt = None,
) -> int:
    """Approve a held call: exactly that agent, tool and arguments."""
    from bundlectl.cli.commands import approvals as cmd

    return cmd.decide(config, approval_id, approve=True, duration=duration, once=once)


@approvals_app.command("deny")
def approvals_deny(
    approval_id: ApprovalIdArg,
    reason: Annotated[str | None, typer.Option("--reason", help="Why: the caller is told.")] = None,
    config: ConfigOpt = None,
) -> int:
    """Deny a held call; the caller is told who denied it, and why."""
    from bundlectl.cli.commands import approvals as cmd

    return cmd.decide(config, approval_id, approve=False, reason=reason)


@approvals_app.command("ui")
def approvals_ui(
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="0 picks a free one.")] = 0,
    no_browser: Annotated[
        bool, typer.Option("--no-browser", help="Print the page's URL; do not open a browser.")
    ] = False,
    config: ConfigOpt = None,
) -> int:
    """Open the approvers' page for this project (loopback, a one-time sign-in link)."""
    from bundlectl.cli.commands import approvals as cmd

    return cmd.ui(config, port=port, browser=not no_browser)


# The user's audit log holds the records of every project they work in.
ProjectFilterOpt = Annotated[
    Path | None,
    typer.Option(
        "--project",
        file_okay=False,
        help="Only the records of the project in this folder (`--project .`: this one).",
    ),
]


@audit_app.callback()
def audit_records(
    ctx: typer.Context,
    agent: Annotated[str | None, typer.Option("--agent", "-a", help="Only this agent.")] = None,
    tool: Annotated[
        str | None, typer.Option("--tool", help="Only tools matching this server.tool pattern.")
    ] = None,
    outcome: Annotated[
        str | None,
        typer.Option("--outcome", help="Only these outcomes: ok, denied, tool-error, ... (a,b)."),
    ] = None,
    since: SinceOpt = None,
    project: ProjectFilterOpt = None,
    file: AuditFileOpt = None,
    fmt: Annotated[
        MatrixFormat, typer.Option("--format", help="Output format.")
    ] = MatrixFormat.text,
) -> int | None:
    """The audit log's records, filtered (`audit summary`, `audit verify`: see below)."""
    if ctx.invoked_subcommand is not None:
        return None
    from bundlectl.cli.commands import audit as cmd

    code = cmd.query(
        file, agent=agent, tool=tool, outcome=outcome, since=since, fmt=fmt, project=project
    )
    raise typer.Exit(code)


@audit_app.command("summary")
def audit_summary(
    agent: Annotated[str | None, typer.Option("--agent", "-a", help="Only this agent.")] = None,
    since: SinceOpt = None,
    project: ProjectFilterOpt = None,
    file: AuditFileOpt = None,
    fmt: FormatOpt = Format.text,
    html: Annotated[
        Path | None,
        typer.Option(
            "--html",
            dir_okay=False,
            help="Also write a page: calls, denials, errors and held approvals per agent and "
            "day as charts, and the tools denied most.",
        ),
    ] = None,
) -> int:
    """Calls per agent and tool: how many, how they ended, their median time."""
    from bundlectl.cli.commands import audit as cmd

    return cmd.summary(file, agent=agent, since=since, fmt=fmt, html=html, project=project)


@audit_app.command("verify")
def audit_verify(
    file: Annotated[
        Path | None,
        typer.Argument(metavar="[FILE]", dir_okay=False, help="The log (default: the audit log)."),
    ] = None,
    key: Annotated[
        str | None,
        typer.Option(
            "--key",
            help="The verification key `audit seal --init` printed (or @FILE holding it): "
            "every seal is checked too.",
        ),
    ] = None,
    fmt: FormatOpt = Format.text,
) -> int:
    """Check the hash chain (and with --key the seals); the first bad record is named by line.

    With --key, a sealed log's past epochs cannot be rewritten unnoticed (docs/security.md)."""
    from bundlectl.cli.commands import audit as cmd

    return cmd.verify(file, fmt=fmt, key=key)


@audit_app.command("seal")
def audit_seal(
    init: Annotated[
        bool,
        typer.Option(
            "--init",
            help="Start sealing the log: a sealing key kept 0600 in the user state folder, and "
            "the verification key printed once, for the auditor to keep elsewhere.",
        ),
    ] = False,
    every: Annotated[
        str | None,
        typer.Option(
            "--every", metavar="DURATION", help="With --init: the epoch's length (default 15m)."
        ),
    ] = None,
    file: Annotated[
        Path | None,
        typer.Argument(metavar="[FILE]", dir_okay=False, help="The log (default: the audit log)."),
    ] = None,
) -> int:
    """Seal the audit log forward-securely (--init), or seal it now.

    Each epoch ends with a seal; the key evolves one way (see docs/security.md)."""
    from bundlectl.cli.commands import audit as cmd

    return cmd.seal(file, init=init, every=every)


@limits_app.command("status")
def limits_status(
    agent: Annotated[
        str | None,
        typer.Option(
            "--agent",
            "-a",
            help="Only this agent (listed or not).",
            autocompletion=completion.agents,
        ),
    ] = None,
    config: ConfigOpt = None,
    fmt: FormatOpt = Format.text,
) -> int:
    """Show each quota's use in its current window, per agent, and when it resets."""
    from bundlectl.cli.commands import limits as cmd

    return cmd.status(config, agent=agent, fmt=fmt)


@policy_app.command("check")
def policy_check(
    tools: Annotated[
        list[str], typer.Argument(metavar="SERVER.TOOL...", autocompletion=completion.tools)
    ],
    agent: AgentOpt,
    interactive: InteractiveOpt = False,
    unlisted: UnlistedOpt = False,
    args: PolicyArgsOpt = None,
    config: ConfigOpt = None,
    fmt: FormatOpt = Format.text,
) -> int:
    """Decide each tool for an agent; exit 3 when any is denied.

    Example: bundlectl policy check -a docs files.write_file --args '{"path": "docs/a.md"}'
    """
    from bundlectl.cli.commands import policy as cmd

    return cmd.check(
        config, agent, tools, interactive=interactive, fmt=fmt, unlisted=unlisted, args=args
    )


@policy_app.command("explain")
def policy_explain(
    tool: Annotated[
        str | None,
        typer.Argument(metavar="SERVER.TOOL", autocompletion=completion.tools, show_default=False),
    ] = None,
    agent: Annotated[
        str | None,
        typer.Option(
            "--agent",
            "-a",
            help="The agent whose policy applies.",
            autocompletion=completion.agents,
        ),
    ] = None,
    interactive: InteractiveOpt = False,
    unlisted: UnlistedOpt = False,
    args: PolicyArgsOpt = None,
    claims: Annotated[
        str | None,
        typer.Option(
            "--claims",
            metavar="JSON|@FILE",
            help="Which agent a token with these claims stands for at the gateway, and why.",
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            metavar="FILE|-",
            help="As --claims, from a JWT access token (its signature is not checked here).",
        ),
    ] = None,
    config: ConfigOpt = None,
    fmt: FormatOpt = Format.text,
) -> int:
    """Why an agent may or may not call a tool: the deciding rule and where it is written.

    Also the rules it beat, `extends`, defaults, and the rules with argument conditions (with
    --args: whether each held)."""
    from bundlectl.cli.commands import policy as cmd

    return cmd.explain_one(
        config,
        agent,
        tool,
        interactive=interactive,
        fmt=fmt,
        unlisted=unlisted,
        args=args,
        claims=claims,
        token=token,
    )


@policy_app.command("diff")
def policy_diff(
    base: Annotated[
        str | None,
        typer.Argument(
            metavar="[BASE]",
            help="A git revision (default: the merge base with the default branch) or the path "
            "of another project.",
        ),
    ] = None,
    agent: AgentsOpt = None,
    config: ConfigOpt = None,
    fmt: Annotated[DiffFormat, typer.Option("--format", help="Output format.")] = (DiffFormat.text),
) -> int:
    """What a change does to who may do what, against a git revision or another project.

    Per agent the tools gained and lost, with the deciding rule and its line on each side, then
    changes to identities, quotas, the sandbox and servers."""
    from bundlectl.cli.commands import policy_diff as cmd

    return cmd.diff(config, base, fmt=fmt.value, agents=agent or [])


@policy_app.command("replay")
def policy_replay(
    file: Annotated[
        Path | None,
        typer.Argument(
            metavar="[AUDIT_LOG]",
            dir_okay=False,
            help="The log to replay (default: this machine's audit log).",
        ),
    ] = None,
    agent: AgentsOpt = None,
    config: ConfigOpt = None,
    fmt: FormatOpt = Format.text,
) -> int:
    """The calls an audit log records, decided again under the working policy.

    Counted per agent and tool with the rule that decides them now; calls a rule with argument
    conditions names are listed as needing their arguments (the log keeps no values)."""
    from bundlectl.cli.commands import policy_replay as cmd

    return cmd.run(config, file, agents=agent or [], fmt=fmt)


@policy_app.command("export")
def policy_export(
    fmt: Annotated[
        CedarFormat, typer.Option("--format", help="The policy language.")
    ] = CedarFormat.cedar,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            file_okay=False,
            help="Write policies.cedar, schema.cedarschema.json and entities.json here "
            "(default: the policies on stdout).",
        ),
    ] = None,
    config: ConfigOpt = None,
) -> int:
    """The policy in Cedar: a schema, the catalog's entities and policies that decide as bundlectl.

    Refused, naming each rule, when a rule has argument conditions or a `?` in its pattern:
    Cedar cannot say those exactly."""
    from bundlectl.cli.commands import policy_export as cmd

    del fmt  # cedar, the only one yet
    return cmd.run(config, out)


@policy_app.command("matrix")
def policy_matrix(
    agent: AgentsOpt = None,
    unlisted: UnlistedOpt = False,
    config: ConfigOpt = None,
    fmt: Annotated[MatrixFormat, typer.Option("--format", help="Output format.")] = (
        MatrixFormat.text
    ),
) -> int:
    """Agents x tools with the effect in each cell, for review in pull requests."""
    from bundlectl.cli.commands import policy as cmd

    return cmd.matrix(config, agent or [], fmt=fmt, unlisted=unlisted)


@app.command()
def lint(
    targets: Annotated[
        list[Path] | None,
        typer.Argument(
            metavar="[PATH...]",
            help="Projects, bundlectl.yaml files, manifests or registry folders.",
        ),
    ] = None,
    fmt: Annotated[LintFormat, typer.Option("--format", help="Output format.")] = LintFormat.text,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", dir_okay=False, help="Write to a file.")
    ] = None,
    fail_level: Annotated[
        FailLevel, typer.Option("--fail-level", help="Exit 1 at this severity or above.")
    ] = FailLevel.error,
    select: Annotated[
        list[str] | None,
        typer.Option(
            "--select", help="Only these rule ids or prefixes.", autocompletion=completion.rule_ids
        ),
    ] = None,
    ignore: Annotated[
        list[str] | None,
        typer.Option(
            "--ignore", help="Skip these rule ids or prefixes.", autocompletion=completion.rule_ids
        ),
    ] = None,
    exit_zero: Annotated[
        bool, typer.Option("--exit-zero", help="Always exit 0 when lint could run.")
    ] = False,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="Every warning is an error (the scored description rules among them).",
        ),
    ] = False,
    environment: Annotated[
        bool,
        typer.Option(
            "--env",
            help="Also check that the variables the bundles need are set here (BCL302); "
            "without it lint reads the project alone, the same on every machine.",
        ),
    ] = False,
    config: ConfigOpt = None,
) -> int:
    """Validate and analyse config, manifests and lock, with rule ids and positions."""
    from bundlectl.cli.commands import lint as cmd

    return cmd.run(
        targets or [],
        config=config,
        fmt=fmt,
        output=output,
        fail_level=fail_level,
        select=select or [],
        ignore=ignore or [],
        exit_zero=exit_zero,
        environment=environment,
        strict=strict,
    )
