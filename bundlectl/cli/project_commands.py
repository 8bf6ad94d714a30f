"""The commands that read and change the project: init, list, show, install, remove, lock,
resolve, schema, registry.

Command bodies import their implementation lazily so that `--help` and the commands that do not
talk to servers never pay for what they do not use (above all, the MCP SDK).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bundlectl.cli import completion
from bundlectl.cli.app import (
    ConfigOpt,
    DryRunOpt,
    FormatOpt,
    RegistryTimeoutOpt,
    app,
    pins_app,
    registry_app,
)
from bundlectl.cli.options import (
    Format,
    SearchFrom,
)

RefreshOpt = Annotated[
    bool,
    typer.Option(
        "--refresh",
        help="Ask remote registries for their index again, however fresh the cached one "
        "(otherwise it is kept 5 minutes).",
    ),
]


def _registry_timeout(seconds: float, *, refresh: bool = False) -> None:
    """What `--timeout` gives each request to a remote registry in this command; `refresh`:
    every remote index is asked for again, however fresh the cached one."""
    from bundlectl.config.remote_index import REQUESTS

    REQUESTS.timeout = seconds
    REQUESTS.revalidate = refresh
    REQUESTS.revalidated.clear()


@app.command()
def init(
    config: ConfigOpt = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> int:
    """Write a commented bundlectl.yaml with secure defaults (and its lock)."""
    from bundlectl.cli.commands import init as cmd

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
    from bundlectl.cli.commands import listing

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
    from bundlectl.cli.commands import show as cmd

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
    timeout: RegistryTimeoutOpt = 20.0,
    refresh: RefreshOpt = False,
    config: ConfigOpt = None,
    fmt: FormatOpt = Format.text,
) -> int:
    """Add bundles to bundlectl.yaml, resolve, and write the lock."""
    from bundlectl.cli.commands import install as cmd

    _registry_timeout(timeout, refresh=refresh)
    return cmd.install(config, requirements, dry_run=dry_run, fmt=fmt)


@app.command()
def remove(
    names: Annotated[list[str], typer.Argument(metavar="NAME...", help="Bundles to remove.")],
    dry_run: DryRunOpt = False,
    timeout: RegistryTimeoutOpt = 20.0,
    config: ConfigOpt = None,
    fmt: FormatOpt = Format.text,
) -> int:
    """Remove bundles from bundlectl.yaml (refused while another bundle requires one)."""
    from bundlectl.cli.commands import install as cmd

    _registry_timeout(timeout)
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
        typer.Option(
            "--upgrade",
            help="Ignore the lock's pins (of NAME... only, when given); remote registries' "
            "indexes are asked for again.",
        ),
    ] = False,
    timeout: RegistryTimeoutOpt = 20.0,
    refresh: RefreshOpt = False,
    config: ConfigOpt = None,
    fmt: FormatOpt = Format.text,
) -> int:
    """Re-resolve and write bundlectl.lock (pins kept unless --upgrade).

    Its policy digest covers the rules, policy.*, and who may act as each agent (docs/config.md)."""
    from bundlectl.cli.commands import install as cmd

    _registry_timeout(timeout, refresh=refresh or upgrade)
    return cmd.lock(config, names or [], check=check, upgrade=upgrade, fmt=fmt)


@pins_app.command("update")
def pins_update(
    dry_run: DryRunOpt = False,
    timeout: RegistryTimeoutOpt = 20.0,
    config: ConfigOpt = None,
    fmt: FormatOpt = Format.text,
) -> int:
    """Record the tool definitions approved on this machine in bundlectl.yaml, and re-lock.

    Moves bundlectl.local.yaml's pins into policy.pins: the change to commit for review."""
    from bundlectl.cli.commands import install as cmd

    _registry_timeout(timeout)
    return cmd.pins_update(config, dry_run=dry_run, fmt=fmt)


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
    from bundlectl.cli.commands import resolve as cmd

    return cmd.run(config, agents=agent or [], fmt=fmt)


@app.command()
def schema(
    out: Annotated[
        Path, typer.Option("--out", file_okay=False, help="Folder to write the schemas to.")
    ] = Path("schemas"),
    check: Annotated[bool, typer.Option("--check", help="Exit 1 when the files differ.")] = False,
) -> int:
    """Write the JSON Schemas of bundle manifests, config and lock (generated from the models)."""
    from bundlectl.cli.commands import schema as cmd

    return cmd.run(out, check=check)


@registry_app.command("add")
def registry_add(
    path: Annotated[Path, typer.Argument(metavar="PATH", help="A bundle manifest file.")],
    fmt: FormatOpt = Format.text,
) -> int:
    """Publish a manifest into the user registry (name + version are immutable)."""
    from bundlectl.cli.commands import registry as cmd

    return cmd.add(path, fmt=fmt)


@registry_app.command("catalog")
def registry_catalog(
    path: Annotated[Path, typer.Argument(metavar="MANIFEST", help="A bundle manifest file.")],
    server: Annotated[
        list[str] | None,
        typer.Option("--server", help="Only this server of the manifest (repeatable)."),
    ] = None,
) -> int:
    """Start a manifest's servers and write the tools they offer into it as `tools:` catalogs."""
    from bundlectl.cli.commands import registry as cmd

    return cmd.catalog(path, servers=server or [])


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
    from bundlectl.cli.commands import registry as cmd

    return cmd.build(folder, into=out, fmt=fmt)


@registry_app.command("push")
def registry_push(
    folder: Annotated[
        Path,
        typer.Argument(
            metavar="FOLDER", file_okay=False, help="A registry folder: <name>/<version>.yaml."
        ),
    ],
    reference: Annotated[
        str,
        typer.Argument(metavar="oci://HOST/REPOSITORY", help="The OCI repository to publish to."),
    ],
    fmt: FormatOpt = Format.text,
) -> int:
    """Publish a folder of manifests to an OCI registry (published versions are immutable)."""
    from bundlectl.cli.commands import registry as cmd

    return cmd.push(folder, reference, fmt=fmt)


@registry_app.command("search")
def registry_search(
    query: Annotated[str, typer.Argument(metavar="QUERY", help="Part of a name to look for.")],
    where: Annotated[
        SearchFrom,
        typer.Option(
            "--from",
            help="registries: the project's bundles (names and descriptions); mcp-registry: "
            "servers of the official MCP Registry, or of --url.",
        ),
    ] = SearchFrom.registries,
    url: Annotated[
        str | None,
        typer.Option("--url", help="An MCP Registry's base URL (with --from mcp-registry)."),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", help="Show at most this many.")] = 20,
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds to wait for the registry's answer.")
    ] = 20.0,
    config: ConfigOpt = None,
    fmt: FormatOpt = Format.text,
) -> int:
    """Find bundles in the project's registries, or servers in the MCP Registry."""
    from bundlectl.cli.commands import registry as cmd

    return cmd.search(
        query, where=where.value, url=url, limit=limit, timeout=timeout, config=config, fmt=fmt
    )


@registry_app.command("list")
def registry_list(
    config: ConfigOpt = None,
    fmt: FormatOpt = Format.text,
) -> int:
    """List the registries in precedence order, with their bundles."""
    from bundlectl.cli.commands import registry as cmd

    return cmd.list_sources(config, fmt=fmt)
