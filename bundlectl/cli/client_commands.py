"""The commands between bundlectl and the clients and remote servers: export, import, auth.

Command bodies import their implementation lazily so that `--help` and the commands that do not
talk to servers never pay for what they do not use (above all, the MCP SDK).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bundlectl.cli import completion
from bundlectl.cli.app import (
    CallerOpt,
    ConfigOpt,
    FormatOpt,
    RemoteArg,
    UnlistedOpt,
    app,
    auth_app,
)
from bundlectl.cli.options import (
    ExportVia,
    Format,
)
from bundlectl.clients import NAMES as CLIENT_NAMES
from bundlectl.clients import check_client_name


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
    from bundlectl.cli.commands import auth as cmd

    return cmd.login(config, server, browser=not no_browser, wait=timeout)


@auth_app.command("status")
def auth_status(config: ConfigOpt = None, fmt: FormatOpt = Format.text) -> int:
    """Show each remote server's sign-in: scopes and expiry, never a token."""
    from bundlectl.cli.commands import auth as cmd

    return cmd.status(config, fmt=fmt)


@auth_app.command("logout")
def auth_logout(server: RemoteArg, config: ConfigOpt = None) -> int:
    """Remove a server's kept sign-in (tokens and client registration)."""
    from bundlectl.cli.commands import auth as cmd

    return cmd.logout(config, server)


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
    from bundlectl.cli.commands import export as cmd

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
    record: Annotated[
        bool,
        typer.Option(
            "--record",
            help="Start each imported server and write its live tools as its catalog "
            "(as tools --live --record).",
        ),
    ] = False,
    config: ConfigOpt = None,
) -> int:
    """Bring a client's config file, an agix config.yaml or a server.json into bundlectl.yaml.

    A server in the file named like one the project already has (a bundle's, such as the
    built-in files server) but defined differently is refused unless --replace names it.
    """
    from bundlectl.cli.commands import importer as cmd

    check_client_name(fmt, what="format", also=("agix", "server-json"))
    return cmd.run(
        config, fmt, source, agent=agent, dry_run=dry_run, replace=replace or [], record=record
    )
