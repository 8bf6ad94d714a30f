"""The commands that talk to servers: tools, exec, read, prompt, serve, codegen, server.

Command bodies import their implementation lazily so that `--help` and the commands that do not
talk to servers never pay for what they do not use (above all, the MCP SDK).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bundlectl.cli import completion
from bundlectl.cli.app import (
    AskTimeoutOpt,
    CallerOpt,
    ConfigOpt,
    FormatOpt,
    SavedOpt,
    UnlistedOpt,
    app,
    invocation_of,
)
from bundlectl.cli.options import (
    CodegenLang,
    Detail,
    Format,
    GatewayNames,
    Names,
    ServeMode,
    ServeTransport,
)


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
    from bundlectl.cli.commands import tools as cmd

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
    from bundlectl.cli.commands import exec as cmd
    from bundlectl.cli.commands.exec_options import ExecOptions

    return cmd.run(
        ExecOptions(
            config,
            tool,
            tuple(arguments or []),
            agent=agent,
            args_json=args_json,
            timeout=timeout,
            connect_timeout=connect_timeout,
            yes=yes,
            fmt=fmt,
            output_dir=output_dir,
            quiet=quiet,
            batch=batch,
            fast_exit=invocation_of(ctx).fast_exit,
            follow_links=follow_links,
            wait=not no_wait,
        )
    )


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
    from bundlectl.cli.commands import resources as cmd

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
    from bundlectl.cli.commands import resources as cmd

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
    json_response: Annotated[
        bool,
        typer.Option(
            "--json-response",
            help="streamable-http --stateless: answer a 2025-11-25 client's request with one "
            "JSON body, not an event stream (less CPU a call; no progress or log messages during "
            "it).",
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
    workers: Annotated[
        int,
        typer.Option(
            "--workers",
            min=1,
            max=256,
            help="streamable-http --stateless: processes serving the port (each with its own "
            "servers; shared state in the store, as between replicas).",
        ),
    ] = 1,
    config: ConfigOpt = None,
) -> int:
    """Serve the resolved servers' tools over MCP, each agent's policy enforced per call.

    One agent over stdio, or many over streamable HTTP with bearer tokens."""
    from bundlectl.cli.commands import serve as cmd

    return cmd.run(
        config,
        agent=agent,
        mode=mode,
        transport=transport,
        host=host,
        port=port,
        stateless=stateless,
        json_response=json_response,
        names=names.value if names else None,
        unlisted=unlisted,
        with_metrics=with_metrics,
        workers=workers,
    )


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
    from bundlectl.cli.commands import codegen as cmd

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
    from bundlectl.cli.commands import server as cmd

    if root is None and config is not None:  # the project of that config
        root = config.resolve().parent
    return cmd.run(name, root=root, transport=transport, host=host, port=port, unprotect=unprotect)
