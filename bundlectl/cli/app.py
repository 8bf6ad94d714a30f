"""The typer app: its command groups, the root options, and the option types the commands share.

Command bodies import their implementation lazily so that `--help` and the commands that do not
talk to servers never pay for what they do not use (above all, the MCP SDK).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from bundlectl import __version__
from bundlectl.cli import completion
from bundlectl.cli.options import (
    Format,
)
from bundlectl.config import paths

app = typer.Typer(
    name="bundlectl",
    help="Manage bundles of MCP servers and the per-agent tool policy that governs them.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)


registry_app = typer.Typer(
    help="Publish and list bundles: the user registry, static indexes, OCI registries.",
    no_args_is_help=True,
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


pins_app = typer.Typer(
    help="Record changed tool definitions approved on this machine for review (policy.pins).",
    no_args_is_help=True,
)


app.add_typer(pins_app, name="pins")


@dataclass
class Invocation:
    """What one run of the CLI was asked for before the command: carried in typer's context
    (never written to os.environ, so nothing leaks into the next in-process `main()`)."""

    config: Path | None = None  # `bundlectl -c FILE COMMAND`
    debug: bool = False
    fast_exit: bool = False  # the console script leaves with os._exit (see `entry`)


def invocation_of(ctx: typer.Context) -> Invocation:
    found = ctx.find_object(Invocation)
    return found if found is not None else Invocation()


def _config(ctx: typer.Context, value: Path | None) -> Path | None:
    """A command's --config: its own -c, else the one before the command, else
    $BUNDLECTL_CONFIG, else None (the nearest bundlectl.yaml upwards)."""
    source = ctx.get_parameter_source("config")  # typer vendors click: compare by name
    given = source is not None and source.name == "COMMANDLINE"
    root = invocation_of(ctx).config
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


def _finite(value: float) -> float:
    if not math.isfinite(value):  # nan passes click's range check
        raise typer.BadParameter(f"{value} is not a number of seconds")
    return value


# The commands that resolve (and so may fetch a remote registry's index and manifests)
RegistryTimeoutOpt = Annotated[
    float,
    typer.Option(
        "--timeout",
        min=0.1,
        max=3600,
        callback=_finite,
        help="Seconds each request to a remote registry may take, 0.1-3600.",
    ),
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
    invocation = invocation_of(ctx)
    invocation.debug = debug
    invocation.config = config  # `bundlectl -c FILE cmd` works like `bundlectl cmd -c FILE`


ApprovalIdArg = Annotated[
    str, typer.Argument(metavar="ID", help="The approval request's id (approvals list).")
]


RemoteArg = Annotated[
    str,
    typer.Argument(
        metavar="SERVER", help="A remote server of the project.", autocompletion=completion.servers
    ),
]


AuditFileOpt = Annotated[
    Path | None,
    typer.Option("--file", dir_okay=False, help="The log to read (default: the audit log)."),
]


SinceOpt = Annotated[
    str | None, typer.Option("--since", metavar="DURATION", help="Only the last 30m, 1h, 7d...")
]


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


AgentsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--agent",
        "-a",
        help="Only these agents (repeatable).",
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


# `read` and `prompt`: one request to one server
AskTimeoutOpt = Annotated[
    float,
    typer.Option("--timeout", min=1, max=3600, help="Seconds for the whole request, 1-3600."),
]


SavedOpt = Annotated[
    Path | None,
    typer.Option("--output-dir", file_okay=False, help="Where binary contents are saved."),
]
