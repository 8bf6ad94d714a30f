"""Command-line entry point: parse, dispatch to `bundlectl.commands.*`, map errors to exit codes.

Command bodies import their implementation lazily so that `--help` and the commands that do not
talk to servers never pay for what they do not use (above all, the MCP SDK).
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from bundlectl import __version__, completion, paths
from bundlectl.clients import NAMES as CLIENT_NAMES
from bundlectl.clients import check_client_name
from bundlectl.options import (
    CodegenLang,
    Detail,
    ExportVia,
    FailLevel,
    Format,
    GatewayNames,
    LintFormat,
    MatrixFormat,
    Names,
    ServeMode,
    ServeTransport,
)
from bundlectl.output import err

app = typer.Typer(
    name="bundlectl",
    help="Manage bundles of MCP servers and the per-agent tool policy that governs them.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
registry_app = typer.Typer(
    help="Publish and list bundles in the user registry.", no_args_is_help=True
)
app.add_typer(registry_app, name="registry")
policy_app = typer.Typer(
    help="Check, explain and review what each agent may call.", no_args_is_help=True
)
app.add_typer(policy_app, name="policy")
approvals_app = typer.Typer(
    help="Approve or deny calls held for a person's approval (policy.approvals).",
    no_args_is_help=True,
)
app.add_typer(approvals_app, name="approvals")
auth_app = typer.Typer(
    help="Sign in to remote servers that use OAuth, see and remove sign-ins.",
    no_args_is_help=True,
)
app.add_typer(auth_app, name="auth")
audit_app = typer.Typer(
    help="Read the audit log: filter it, sum it up, check its hash chain.",
    invoke_without_command=True,
)
app.add_typer(audit_app, name="audit")
limits_app = typer.Typer(help="See how much of each quota (limits:) is used.", no_args_is_help=True)
app.add_typer(limits_app, name="limits")


@dataclass
class Invocation:
    """What one run of the CLI was asked for before the command: carried in typer's context
    (never written to os.environ, so nothing leaks into the next in-process `main()`)."""

    config: Path | None = None  # `bundlectl -c FILE COMMAND`
    debug: bool = False
    fast_exit: bool = False  # the console script leaves with os._exit (see `entry`)


def _invocation(ctx: typer.Context) -> Invocation:
    found = ctx.find_object(Invocation)
    return found if found is not None else Invocation()


def _config(ctx: typer.Context, value: Path | None) -> Path | None:
    """A command's --config: its own -c, else the one before the command, else
    $BUNDLECTL_CONFIG, else None (the nearest bundlectl.yaml upwards)."""
    source = ctx.get_parameter_source("config")  # typer vendors click: compare by name
    given = source is not None and source.name == "COMMANDLINE"
    root = _invocation(ctx).config
    return value if given or root is None else root


ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-c",
        envvar="BUNDLECTL_CONFIG",
        dir_okay=False,
        callback=_config,
        help="Path to bundlectl.yaml (default: nearest one upwards).",
    ),
]
FormatOpt = Annotated[Format, typer.Option("--format", help="Output format.")]
DryRunOpt = Annotated[
    bool, typer.Option("--dry-run", help="Show what would change; write nothing.")
]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"bundlectl {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            dir_okay=False,
            help="Path to bundlectl.yaml, for every command (also after the command).",
        ),
    ] = None,
    debug: Annotated[
        bool, typer.Option("--debug", envvar="BUNDLECTL_DEBUG", help="Show tracebacks for errors.")
    ] = False,
    no_user_config: Annotated[
        bool,
        typer.Option(
            "--no-user-config",
            envvar="BUNDLECTL_NO_USER_CONFIG",
            help="Ignore the user-level bundlectl.yaml (for CI: only the project counts).",
        ),
    ] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    paths.use_user_config(not no_user_config)
    invocation = _invocation(ctx)
    invocation.debug = debug
    invocation.config = config  # `bundlectl -c FILE cmd` works like `bundlectl cmd -c FILE`


@app.command()
def init(
    config: ConfigOpt = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> int:
    """Write a commented bundlectl.yaml with secure defaults (and its lock)."""
    from bundlectl.commands import init as cmd

    return cmd.run(config, force=force)


@app.command("list")
def list_(
    installed: Annotated[
        bool, typer.Option("--installed", help="Only bundles in the lock.")
    ] = False,
    config: ConfigOpt = None,
    fmt: FormatOpt = Format.text,
) -> int:
    """List the bundles available in every registry."""
    from bundlectl.commands import listing

    return listing.run(config, installed=installed, fmt=fmt)


@app.command()
def show(
    requirement: Annotated[
        str,
        typer.Argument(
            metavar="NAME[SPEC]",
            help="A bundle, optionally with a version spec.",
            autocompletion=completion.bundles,
        ),
    ],
    config: ConfigOpt = None,
    fmt: FormatOpt = Format.text,
) -> int:
    """Show one bundle: versions, servers, tools, inputs, dependencies, agent defaults."""
    from bundlectl.commands import show as cmd

    return cmd.run(config, requirement, fmt=fmt)


@app.command()
def install(
    requirements: Annotated[
        list[str],
        typer.Argument(
            metavar="REQ...",
            help="Bundles, e.g. basic 'github>=1,<2'.",
            autocompletion=completion.bundles,
        ),
    ],
    dry_run: DryRunOpt = False,
    config: ConfigOpt = None,
    fmt: FormatOpt = Format.text,
) -> int:
    """Add bundles to bundlectl.yaml, resolve, and write the lock."""
    from bundlectl.commands import install as cmd

    return cmd.install(config, requirements, dry_run=dry_run, fmt=fmt)


@app.command()
def remove(
    names: Annotated[list[str], typer.Argument(metavar="NAME...", help="Bundles to remove.")],
    dry_run: DryRunOpt = False,
    config: ConfigOpt = None,
    fmt: FormatOpt = Format.text,
) -> int:
    """Remove bundles from bundlectl.yaml (refused while another bundle requires one)."""
    from bundlectl.commands import install as cmd

    return cmd.remove(config, names, dry_run=dry_run, fmt=fmt)


@app.command()
def lock(
    names: Annotated[
        list[str] | None,
        typer.Argument(metavar="[NAME...]", help="With --upgrade: only these bundles."),
    ] = None,
    check: Annotated[bool, typer.Option("--check", help="Exit 1 when the lock is stale.")] = False,
    upgrade: Annotated[
        bool,
        typer.Option("--upgrade", help="Ignore the lock's pins (of NAME... only, when given)."),
    ] = False,
    config: ConfigOpt = None,
    fmt: FormatOpt = Format.text,
) -> int:
    """Re-resolve and write bundlectl.lock (pins kept unless --upgrade)."""
    from bundlectl.commands import install as cmd

    return cmd.lock(config, names or [], check=check, upgrade=upgrade, fmt=fmt)


@app.command()
def resolve(
    agent: Annotated[
        list[str] | None,
        typer.Option(
            "--agent",
            "-a",
            help="Only these agents' rules (repeatable).",
            autocompletion=completion.agents,
        ),
    ] = None,
    config: ConfigOpt = None,
    fmt: FormatOpt = Format.text,
) -> int:
    """Print the effective servers (secrets as references) and each agent's rules."""
    from bundlectl.commands import resolve as cmd

    return cmd.run(config, agents=agent or [], fmt=fmt)


@app.command()
def schema(
    out: Annotated[
        Path, typer.Option("--out", file_okay=False, help="Folder to write the schemas to.")
    ] = Path("schemas"),
    check: Annotated[bool, typer.Option("--check", help="Exit 1 when the files differ.")] = False,
) -> int:
    """Write the JSON Schemas of bundle manifests, config and lock (generated from the models)."""
    from bundlectl.commands import schema as cmd

    return cmd.run(out, check=check)


@registry_app.command("add")
def registry_add(
    path: Annotated[Path, typer.Argument(metavar="PATH", help="A bundle manifest file.")],
    fmt: FormatOpt = Format.text,
) -> int:
    """Publish a manifest into the user registry (name + version are immutable)."""
    from bundlectl.commands import registry as cmd

    return cmd.add(path, fmt=fmt)


@registry_app.command("build")
def registry_build(
    folder: Annotated[
        Path,
        typer.Argument(
            metavar="FOLDER", file_okay=False, help="A registry folder: <name>/<version>.yaml."
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option("--out", file_okay=False, help="Write the index and manifests here."),
    ] = None,
    fmt: FormatOpt = Format.text,
) -> int:
    """Write index.json for a folder of manifests, to serve it as a remote registry."""
    from bundlectl.commands import registry as cmd

    return cmd.build(folder, into=out, fmt=fmt)


@registry_app.command("list")
def registry_list(
    config: ConfigOpt = None,
    fmt: FormatOpt = Format.text,
) -> int:
    """List the registries in precedence order, with their bundles."""
    from bundlectl.commands import registry as cmd

    return cmd.list_sources(config, fmt=fmt)


ApprovalIdArg = Annotated[
    str, typer.Argument(metavar="ID", help="The approval request's id (approvals list).")
]


@approvals_app.command("list")
def approvals_list(
    everything: Annotated[
        bool, typer.Option("--all", help="Every request kept (7 days), not only pending ones.")
    ] = False,
    config: ConfigOpt = None,
    fmt: FormatOpt = Format.text,
) -> int:
    """List the calls waiting for a person's approval."""
    from bundlectl.commands import approvals as cmd

    return cmd.list_requests(config, everything=everything, fmt=fmt)


@approvals_app.command("show")
def approvals_show(
    approval_id: ApprovalIdArg, config: ConfigOpt = None, fmt: FormatOpt = Format.text
) -> int:
    """Show one held call: who, which tool, which rule asked, and its arguments."""
    from bundlectl.commands import approvals as cmd

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
    from bundlectl.commands import approvals as cmd

    return cmd.decide(config, approval_id, approve=True, duration=duration, once=once)


@approvals_app.command("deny")
def approvals_deny(
    approval_id: ApprovalIdArg,
    reason: Annotated[str | None, typer.Option("--reason", help="Why: the caller is told.")] = None,
    config: ConfigOpt = None,
) -> int:
    """Deny a held call; the caller is told who denied it, and why."""
    from bundlectl.commands import approvals as cmd

    return cmd.decide(config, approval_id, approve=False, reason=reason)


RemoteArg = Annotated[
    str,
    typer.Argument(
        metavar="SERVER", help="A remote server of the project.", autocompletion=completion.servers
    ),
]


@auth_app.command("login")
def auth_login(
    server: RemoteArg,
    no_browser: Annotated[
        bool, typer.Option("--no-browser", help="Print the sign-in URL; do not open a browser.")
    ] = False,
    timeout: Annotated[
        float,
        typer.Option("--timeout", min=5, max=3600, help="Seconds to wait for the browser."),
    ] = 300.0,
    config: ConfigOpt = None,
) -> int:
    """Sign in to a remote server with OAuth (a browser and a loopback redirect)."""
    from bundlectl.commands import auth as cmd

    return cmd.login(config, server, browser=not no_browser, wait=timeout)


@auth_app.command("status")
def auth_status(config: ConfigOpt = None, fmt: FormatOpt = Format.text) -> int:
    """Show each remote server's sign-in: scopes and expiry, never a token."""
    from bundlectl.commands import auth as cmd

    return cmd.status(config, fmt=fmt)


@auth_app.command("logout")
def auth_logout(server: RemoteArg, config: ConfigOpt = None) -> int:
    """Remove a server's kept sign-in (tokens and client registration)."""
    from bundlectl.commands import auth as cmd

    return cmd.logout(config, server)


AuditFileOpt = Annotated[
    Path | None,
    typer.Option("--file", dir_okay=False, help="The log to read (default: the audit log)."),
]
SinceOpt = Annotated[
    str | None, typer.Option("--since", metavar="DURATION", help="Only the last 30m, 1h, 7d...")
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
    file: AuditFileOpt = None,
    fmt: Annotated[
        MatrixFormat, typer.Option("--format", help="Output format.")
    ] = MatrixFormat.text,
) -> int | None:
    """The audit log's records, filtered (`audit summary`, `audit verify`: see below)."""
    if ctx.invoked_subcommand is not None:
        return None
    from bundlectl.commands import audit as cmd

    code = cmd.query(file, agent=agent, tool=tool, outcome=outcome, since=since, fmt=fmt)
    raise typer.Exit(code)


@audit_app.command("summary")
def audit_summary(
    agent: Annotated[str | None, typer.Option("--agent", "-a", help="Only this agent.")] = None,
    since: SinceOpt = None,
    file: AuditFileOpt = None,
    fmt: FormatOpt = Format.text,
) -> int:
    """Calls per agent and tool: how many, how they ended, their median time."""
    from bundlectl.commands import audit as cmd

    return cmd.summary(file, agent=agent, since=since, fmt=fmt)


@audit_app.command("verify")
def audit_verify(
    file: Annotated[
        Path | None,
        typer.Argument(metavar="[FILE]", dir_okay=False, help="The log (default: the audit log)."),
    ] = None,
    fmt: FormatOpt = Format.text,
) -> int:
    """Check the log's hash chain; the first broken or missing record is named by line (exit 1)."""
    from bundlectl.commands import audit as cmd

    return cmd.verify(file, fmt=fmt)


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
    from bundlectl.commands import limits as cmd

    return cmd.status(config, agent=agent, fmt=fmt)


AgentOpt = Annotated[
    str,
    typer.Option(
        "--agent",
        "-a",
        help="The agent whose policy applies.",
        autocompletion=completion.agents,
    ),
]
# The agent that makes calls (exec, serve): also from $BUNDLECTL_AGENT.
CallerOpt = Annotated[
    str | None,
    typer.Option(
        "--agent",
        "-a",
        envvar="BUNDLECTL_AGENT",
        help="The agent making the calls (default: 'default', governed by policy.default).",
        autocompletion=completion.agents,
    ),
]
UnlistedOpt = Annotated[
    bool,
    typer.Option(
        "--unlisted",
        help="Accept an agent not listed under agents: (it gets what policy.default gives).",
    ),
]
InteractiveOpt = Annotated[
    bool, typer.Option("--interactive", help="Decide as if a human could confirm `ask` rules.")
]


PolicyArgsOpt = Annotated[
    str | None,
    typer.Option(
        "--args",
        metavar="JSON|@FILE|-",
        help="Decide a call with these arguments (a JSON object), checking the rules' "
        "argument conditions.",
    ),
]


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
    from bundlectl.commands import policy as cmd

    return cmd.check(
        config, agent, tools, interactive=interactive, fmt=fmt, unlisted=unlisted, args=args
    )


@policy_app.command("explain")
def policy_explain(
    tool: Annotated[str, typer.Argument(metavar="SERVER.TOOL", autocompletion=completion.tools)],
    agent: AgentOpt,
    interactive: InteractiveOpt = False,
    unlisted: UnlistedOpt = False,
    args: PolicyArgsOpt = None,
    config: ConfigOpt = None,
    fmt: FormatOpt = Format.text,
) -> int:
    """Why an agent may or may not call a tool: the deciding rule and where it is written.

    Also the rules it beat, `extends`, defaults, and the rules with argument conditions (with
    --args: whether each held)."""
    from bundlectl.commands import policy as cmd

    return cmd.explain_one(
        config, agent, tool, interactive=interactive, fmt=fmt, unlisted=unlisted, args=args
    )


@policy_app.command("matrix")
def policy_matrix(
    agent: Annotated[
        list[str] | None,
        typer.Option(
            "--agent",
            "-a",
            help="Only these agents (repeatable).",
            autocompletion=completion.agents,
        ),
    ] = None,
    unlisted: UnlistedOpt = False,
    config: ConfigOpt = None,
    fmt: Annotated[MatrixFormat, typer.Option("--format", help="Output format.")] = (
        MatrixFormat.text
    ),
) -> int:
    """Agents x tools with the effect in each cell, for review in pull requests."""
    from bundlectl.commands import policy as cmd

    return cmd.matrix(config, agent or [], fmt=fmt, unlisted=unlisted)


@app.command()
def tools(
    agent: Annotated[
        str | None,
        typer.Option(
            "--agent",
            "-a",
            help="Only what this agent may call (allow or ask).",
            autocompletion=completion.agents,
        ),
    ] = None,
    server: Annotated[
        str | None,
        typer.Option("--server", "-s", help="Only this server's tools."),
    ] = None,
    search: Annotated[
        str | None,
        typer.Option("--search", "-q", help="Rank by relevance of name and description."),
    ] = None,
    detail: Annotated[
        Detail | None,
        typer.Option(
            "--detail",
            help="name, summary (adds the description) or full (adds the schema). "
            "[default: summary]",
        ),
    ] = None,
    live: Annotated[
        bool,
        typer.Option(
            "--live", help="Ask the servers and show where they differ from the declared catalog."
        ),
    ] = False,
    record: Annotated[
        bool,
        typer.Option(
            "--record",
            help="With --live: write what the project's own servers offer as their tools: "
            "catalog in bundlectl.yaml (comments kept) and relock.",
        ),
    ] = False,
    names: Annotated[
        Names | None,
        typer.Option(
            "--names",
            help="qualified (server.tool) or gateway (as `serve` names them). [default: qualified]",
        ),
    ] = None,
    unlisted: UnlistedOpt = False,
    config: ConfigOpt = None,
    fmt: FormatOpt = Format.text,
) -> int:
    """The tool catalog, filtered by policy: ask only for the tools and detail you need."""
    from bundlectl.commands import tools as cmd

    if live or record:
        given = {"--agent": agent, "--search": search, "--detail": detail, "--names": names}
        cmd.refuse_with_live([flag for flag, value in given.items() if value is not None], record)
        return cmd.run_live_command(config, server=server, fmt=fmt, record=record)
    return cmd.run(
        config,
        agent=agent,
        server=server,
        query=search,
        detail=detail or Detail.summary,
        fmt=fmt,
        names=names or Names.qualified,
        unlisted=unlisted,
    )


@app.command("exec")
def exec_(
    tool: Annotated[
        str | None,
        typer.Argument(
            metavar="SERVER.TOOL",
            help="The tool to call, e.g. files.read_file.",
            autocompletion=completion.tools,
        ),
    ] = None,
    arguments: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[KEY=VALUE...]", help="Arguments, typed by the tool's input schema."
        ),
    ] = None,
    agent: CallerOpt = None,
    args_json: Annotated[
        str | None,
        typer.Option("--args", help="Arguments as a JSON object, @FILE, or - for standard input."),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout",
            min=1,
            max=3600,
            help="Seconds for the whole call, connecting included, 1-3600 "
            "(default: the server's timeout).",
        ),
    ] = None,
    connect_timeout: Annotated[
        float,
        typer.Option(
            "--connect-timeout", min=1, max=3600, help="Seconds allowed to start and connect."
        ),
    ] = 30.0,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Confirm `ask` rules.")] = False,
    no_wait: Annotated[
        bool,
        typer.Option(
            "--no-wait",
            help="A call held for an approver (policy.approvals): exit 75 with its id at once.",
        ),
    ] = False,
    output_dir: Annotated[
        Path | None,
        typer.Option(
            "--output-dir", file_okay=False, help="Where images, audio and blobs are saved."
        ),
    ] = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Send the server's stderr to a log file.")
    ] = False,
    batch: Annotated[
        Path | None,
        typer.Option("--batch", dir_okay=False, help="JSON lines of {agent, tool, arguments}."),
    ] = None,
    follow_links: Annotated[
        bool,
        typer.Option(
            "--follow-links",
            help="Read the resources a result links to (resource_link), as `bundlectl read`.",
        ),
    ] = False,
    config: ConfigOpt = None,
    fmt: FormatOpt = Format.text,
    *,
    ctx: typer.Context,
) -> int:
    """Make one policy-checked tool call (or a batch): denied calls start nothing."""
    from bundlectl.commands import exec as cmd

    return cmd.run(
        config,
        tool,
        arguments or [],
        agent=agent,
        args_json=args_json,
        timeout=timeout,
        connect_timeout=connect_timeout,
        yes=yes,
        fmt=fmt,
        output_dir=output_dir,
        quiet=quiet,
        batch=batch,
        fast_exit=_invocation(ctx).fast_exit,
        follow_links=follow_links,
        wait=not no_wait,
    )


# `read` and `prompt`: one request to one server
AskTimeoutOpt = Annotated[
    float,
    typer.Option("--timeout", min=1, max=3600, help="Seconds for the whole request, 1-3600."),
]
SavedOpt = Annotated[
    Path | None,
    typer.Option("--output-dir", file_okay=False, help="Where binary contents are saved."),
]


@app.command()
def read(
    server: Annotated[
        str,
        typer.Argument(
            metavar="SERVER", help="The server to read from.", autocompletion=completion.servers
        ),
    ],
    uri: Annotated[
        str | None,
        typer.Argument(metavar="[URI]", help="The resource's URI (none: list what it offers)."),
    ] = None,
    agent: CallerOpt = None,
    timeout: AskTimeoutOpt = 60.0,
    output_dir: SavedOpt = None,
    config: ConfigOpt = None,
    fmt: FormatOpt = Format.text,
) -> int:
    """Read a server's resource, if the agent may use the server: text printed, binary saved."""
    from bundlectl.commands import resources as cmd

    if uri is None:
        return cmd.run_list(
            config, server=server, kind="resources", agent=agent, fmt=fmt, timeout=timeout
        )
    return cmd.run_read(
        config,
        server=server,
        uri=uri,
        agent=agent,
        fmt=fmt,
        output_dir=output_dir,
        timeout=timeout,
    )


@app.command()
def prompt(
    server: Annotated[
        str,
        typer.Argument(
            metavar="SERVER", help="The server of the prompt.", autocompletion=completion.servers
        ),
    ],
    name: Annotated[
        str | None,
        typer.Argument(metavar="[NAME]", help="The prompt's name (none: list its prompts)."),
    ] = None,
    arguments: Annotated[
        list[str] | None,
        typer.Argument(metavar="[KEY=VALUE...]", help="The prompt's arguments (strings)."),
    ] = None,
    agent: CallerOpt = None,
    timeout: AskTimeoutOpt = 60.0,
    output_dir: SavedOpt = None,
    config: ConfigOpt = None,
    fmt: FormatOpt = Format.text,
) -> int:
    """Get a server's prompt, filled in, if the agent may use the server: its messages printed."""
    from bundlectl.commands import resources as cmd

    if name is None:
        return cmd.run_list(
            config, server=server, kind="prompts", agent=agent, fmt=fmt, timeout=timeout
        )
    return cmd.run_prompt(
        config,
        server=server,
        name=name,
        arguments=arguments or [],
        agent=agent,
        fmt=fmt,
        output_dir=output_dir,
        timeout=timeout,
    )


@app.command()
def serve(
    agent: CallerOpt = None,
    mode: Annotated[
        ServeMode,
        typer.Option(
            "--mode", help="direct (every tool listed) or search (search_tools and call_tool)."
        ),
    ] = ServeMode.direct,
    transport: Annotated[
        ServeTransport,
        typer.Option(
            "--transport", help="stdio (one client) or streamable-http (many, bearer tokens)."
        ),
    ] = ServeTransport.stdio,
    host: Annotated[
        str, typer.Option("--host", help="streamable-http: the address to listen on.")
    ] = "127.0.0.1",
    port: Annotated[
        int,
        typer.Option("--port", min=0, max=65535, help="streamable-http: the port (0: any free)."),
    ] = 8765,
    stateless: Annotated[
        bool,
        typer.Option(
            "--stateless", help="streamable-http: no session state, for replicas behind a balancer."
        ),
    ] = False,
    names: Annotated[
        GatewayNames | None,
        typer.Option(
            "--names",
            help="direct mode's tool and prompt names: prefixed (server__tool) or bare (the "
            "servers' own; refused when two servers share one). Default: gateway.names.",
        ),
    ] = None,
    unlisted: UnlistedOpt = False,
    with_metrics: Annotated[
        bool,
        typer.Option(
            "--metrics",
            help="streamable-http: Prometheus metrics at GET /metrics (its own token: "
            "BUNDLECTL_METRICS_TOKEN).",
        ),
    ] = False,
    config: ConfigOpt = None,
) -> int:
    """Serve the resolved servers' tools over MCP, each agent's policy enforced per call.

    One agent over stdio, or many over streamable HTTP with bearer tokens."""
    from bundlectl.commands import serve as cmd

    return cmd.run(
        config,
        agent=agent,
        mode=mode,
        transport=transport,
        host=host,
        port=port,
        stateless=stateless,
        names=names.value if names else None,
        unlisted=unlisted,
        with_metrics=with_metrics,
    )


@app.command(name="export")
def export_(
    client: Annotated[
        str,
        typer.Argument(
            metavar="CLIENT",
            help=f"One of: {', '.join(CLIENT_NAMES)}.",
            autocompletion=completion.clients,
        ),
    ],
    agent: CallerOpt = None,
    via: Annotated[
        ExportVia,
        typer.Option(
            "--via",
            help="direct (servers + the client's tool filter), gateway (bundlectl serve), or "
            "auto (direct when exact).",
        ),
    ] = ExportVia.auto,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", dir_okay=False, help="Write here instead."),
    ] = None,
    check: Annotated[
        bool, typer.Option("--check", help="Exit 1 when the file differs (for CI).")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print a unified diff; write nothing.")
    ] = False,
    live: Annotated[
        bool,
        typer.Option(
            "--live",
            help="Ask the servers the agent may use in part for the tools they really have "
            "(starts them; built-in servers need not be asked), so a direct export lists them "
            "exactly rather than trusting a declared catalog.",
        ),
    ] = False,
    absolute: Annotated[
        bool,
        typer.Option(
            "--absolute",
            help="A gateway entry names this bundlectl and the config by absolute path (for a "
            "client that will not find `bundlectl` on its PATH); the file is then this "
            "machine's, not portable.",
        ),
    ] = False,
    unlisted: UnlistedOpt = False,
    config: ConfigOpt = None,
    fmt: FormatOpt = Format.text,
) -> int:
    """Write an agent's servers and tool policy into a client's config file (merged in place)."""
    from bundlectl.commands import export as cmd

    check_client_name(client)
    return cmd.run(
        config,
        client,
        agent=agent,
        via=via,
        output=output,
        check=check,
        dry_run=dry_run,
        live=live,
        unlisted=unlisted,
        absolute=absolute,
        fmt=fmt,
    )


@app.command(name="import")
def import_(
    fmt: Annotated[
        str,
        typer.Argument(
            metavar="FORMAT",
            help=f"One of: {', '.join(CLIENT_NAMES)}, agix, server-json.",
            autocompletion=completion.formats,
        ),
    ],
    source: Annotated[
        str,
        typer.Argument(
            metavar="FILE",
            help="The client's config file (server-json: a file or an https:// URL).",
        ),
    ],
    agent: Annotated[
        str | None,
        typer.Option("--agent", "-a", help="Name of the agent the file's tool filter becomes."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print a unified diff; write nothing.")
    ] = False,
    replace: Annotated[
        list[str] | None,
        typer.Option(
            "--replace",
            metavar="SERVER",
            help="Let the file's server of this name replace the project's (repeatable).",
        ),
    ] = None,
    config: ConfigOpt = None,
) -> int:
    """Bring a client's config file, an agix config.yaml or a server.json into bundlectl.yaml.

    A server in the file named like one the project already has (a bundle's, such as the
    built-in files server) but defined differently is refused unless --replace names it.
    """
    from bundlectl.commands import importer as cmd

    check_client_name(fmt, what="format", also=("agix", "server-json"))
    return cmd.run(config, fmt, source, agent=agent, dry_run=dry_run, replace=replace or [])


@app.command()
def codegen(
    agent: CallerOpt = None,
    out: Annotated[
        Path,
        typer.Option("--out", file_okay=False, help="Folder to write the package into."),
    ] = Path("codegen"),
    lang: Annotated[
        CodegenLang, typer.Option("--lang", help="python or typescript.")
    ] = CodegenLang.python,
    check: Annotated[
        bool, typer.Option("--check", help="Exit 1 when the files differ (for CI).")
    ] = False,
    live: Annotated[
        bool,
        typer.Option("--live", help="Ask servers that declare no tool catalog for their tools."),
    ] = False,
    unlisted: UnlistedOpt = False,
    config: ConfigOpt = None,
) -> int:
    """Write the tools an agent may call as typed functions (code mode)."""
    from bundlectl.commands import codegen as cmd

    return cmd.run(
        config,
        agent=agent,
        out=out,
        check=check,
        lang=lang.value,
        live=live,
        unlisted=unlisted,
    )


@app.command()
def server(
    name: Annotated[str, typer.Argument(metavar="NAME", help="files or review.")],
    root: Annotated[
        Path | None,
        typer.Option(
            "--root", file_okay=False, help="Folder to work in (default: the project root)."
        ),
    ] = None,
    transport: Annotated[
        str, typer.Option("--transport", help="stdio, sse or streamable-http.")
    ] = "stdio",
    host: Annotated[str, typer.Option("--host", help="Address for HTTP transports.")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="Port for HTTP transports.")
    ] = 8000,
    unprotect: Annotated[
        list[str] | None,
        typer.Option(
            "--unprotect",
            metavar="PATH",
            help="files: let this policy file, registry or .git path be written (repeatable).",
        ),
    ] = None,
    config: ConfigOpt = None,
) -> int:
    """Run a built-in MCP server (files, review) for any MCP client.

    The files server never writes the project's bundlectl.yaml, bundlectl.lock,
    bundlectl.local.yaml, project registries or .git unless --unprotect names the path.
    """
    from bundlectl.commands import server as cmd

    if root is None and config is not None:  # the project of that config
        root = config.resolve().parent
    return cmd.run(name, root=root, transport=transport, host=host, port=port, unprotect=unprotect)


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
    config: ConfigOpt = None,
) -> int:
    """Validate and analyse config, manifests and lock, with rule ids and positions."""
    from bundlectl.commands import lint as cmd

    return cmd.run(
        targets or [],
        config=config,
        fmt=fmt,
        output=output,
        fail_level=fail_level,
        select=select or [],
        ignore=ignore or [],
        exit_zero=exit_zero,
    )


def main(argv: list[str] | None = None, *, fast_exit: bool = False) -> int:
    """Run the CLI and return its exit code; every expected failure ends in a message."""
    # pydantic scans every installed distribution for plugins on first use (~20 ms); bundlectl
    # uses none. Users can still opt in by setting the variable themselves.
    if os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__") == "__all__":
        _no_pydantic_plugins()
    from bundlectl.errors import BundlectlError

    invocation = Invocation(fast_exit=fast_exit)
    args = _root_flags_first(sys.argv[1:] if argv is None else argv)
    if fast_exit and _command_name(args) not in _LONG_RUNNING:
        # The cyclic garbage collector finds next to nothing to free in a command that reads
        # files and prints, yet on 3,000 agents it took a quarter of the time (collections
        # triggered by millions of new objects); the process ends right after the command.
        gc.disable()
    try:
        run = _narrowed(args)
        result = run(args=args, prog_name="bundlectl", standalone_mode=False, obj=invocation)
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        return 130
    except typer.TyperException as exc:  # usage errors from parsing: exit 2, no traceback
        show = getattr(exc, "show", None)
        if callable(show):
            show()
        else:
            err(f"error: {exc.format_message()}")
        return exc.exit_code
    except BundlectlError as exc:
        from bundlectl import error_handler

        return error_handler.failure(exc, debug=_debug(invocation))
    except KeyboardInterrupt:
        err("interrupted")
        return 130
    except Exception as exc:
        from bundlectl import error_handler

        return error_handler.crash(exc, debug=_debug(invocation))
    return result if isinstance(result, int) else 0


_ROOT_VALUES = ("-c", "--config")  # root options that take a value
_ROOT_FLAGS = ("--no-user-config",)  # root flags also accepted after the command


def _root_flags_first(args: list[str]) -> list[str]:
    """`bundlectl lint --no-user-config` as `bundlectl --no-user-config lint`: a CI line reads
    naturally either way (before any `--`, after which everything is an argument)."""
    end = args.index("--") if "--" in args else len(args)
    flags = [a for a in args[:end] if a in _ROOT_FLAGS]
    if not flags:
        return args
    rest = [a for a in args[:end] if a not in _ROOT_FLAGS]
    return [*dict.fromkeys(flags), *rest, *args[end:]]


def _with_epilogs() -> None:
    """Each command's `--help` ends with examples and its exit codes (`helptext.HELP`)."""
    from typer.main import get_command_name

    from bundlectl import helptext

    groups = [(app, "")] + [(g.typer_instance, f"{g.name} ") for g in app.registered_groups]
    for group, prefix in groups:
        if group is None:
            continue
        for info in group.registered_commands:
            name = info.name or get_command_name(info.callback.__name__ if info.callback else "")
            info.epilog = helptext.epilog(prefix + name)


_with_epilogs()


def _narrowed(args: list[str]) -> typer.Typer:
    """The app with only the command that runs: typer builds (and evaluates the annotations of)
    every command's parameters on each run, ~15 ms for all of them, ~1 ms for one. Without a
    known command name (root `--help`, a typo) the whole app, so help and suggestions list all."""
    import copy

    from typer.main import get_command_name

    name = _command_name(args)
    if name is None:
        return app
    commands = [
        info
        for info in app.registered_commands
        if (info.name or get_command_name(info.callback.__name__ if info.callback else "")) == name
    ]
    groups = [info for info in app.registered_groups if info.name == name]
    if not commands and not groups:
        return app
    narrow = copy.copy(app)
    narrow.registered_commands, narrow.registered_groups = commands, groups
    return narrow


def _no_pydantic_plugins() -> None:
    """With plugins disabled, pydantic's plugin loader answers "none", but importing it imports
    `importlib.metadata` first (~10 ms, a tenth of a command's start-up). A module with the same
    answer stands in for it (tests/test_cli.py checks that pydantic still asks it)."""
    name = "pydantic.plugin._loader"
    if name not in sys.modules:
        import types

        loader = types.ModuleType(name, "pydantic plugins: disabled by bundlectl")
        loader.get_plugins = tuple  # type: ignore[attr-defined]
        sys.modules[name] = loader


def _command_name(args: list[str]) -> str | None:
    """The command word of a command line (after the root options), if there is one."""
    position = 0
    while position < len(args) and args[position].startswith("-"):
        position += 2 if args[position] in _ROOT_VALUES else 1
    return args[position] if position < len(args) else None


# Commands that may run for hours (a gateway, a built-in server, a batch of calls): the
# collector stays on.
_LONG_RUNNING = frozenset({"serve", "server", "exec"})


def _debug(invocation: Invocation) -> bool:
    # --debug, or $BUNDLECTL_DEBUG when the command line failed before it was read.
    return invocation.debug or os.environ.get("BUNDLECTL_DEBUG", "") not in ("", "0")


def entry() -> None:
    """The `bundlectl` console script: `main()`, then a fast exit.

    Tearing down the interpreter — every module, the pydantic models (the MCP SDK alone has
    ~1,500) — takes 40-100 ms for a command that reads a manifest and about 0.3 s after
    talking to a server, and achieves nothing for a finished command. Everything bundlectl
    writes is closed or unbuffered by then (files are written atomically and closed, the audit
    log with `os.write`, a server's stderr copy is closed by the call), so once stdout and
    stderr are flushed we leave at once.
    """
    code = main(fast_exit=True)
    notify = sys.modules.get("bundlectl.calls.notify")
    if notify is not None:  # announcements of approval requests still being sent
        notify.finish()
    telemetry = sys.modules.get("bundlectl.telemetry")
    if telemetry is not None:  # spans still buffered
        telemetry.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    if "logging" in sys.modules:
        import logging

        logging.shutdown()
    os._exit(code)
