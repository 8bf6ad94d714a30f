"""`bundlectl serve`: the policy-enforcing MCP gateway (SPEC 7), over stdio or streamable HTTP."""

from __future__ import annotations

from pathlib import Path

from bundlectl import metrics
from bundlectl.calls.audit import AuditLog
from bundlectl.calls.pipeline import Pipeline
from bundlectl.cli.options import ServeMode, ServeTransport
from bundlectl.config import userconfig
from bundlectl.config.project import load_project
from bundlectl.errors import UsageError
from bundlectl.gateway.access import access_for
from bundlectl.gateway.stdio_door import serve_stdio
from bundlectl.mcpio import runner
from bundlectl.output import note
from bundlectl.policy.rules import default_agent
from bundlectl.privacy.tokens import key_from
from bundlectl.resolve.resolved import Resolution, resolve_project


def run(
    config: Path | None,
    *,
    agent: str | None,
    mode: ServeMode = ServeMode.direct,
    transport: ServeTransport = ServeTransport.stdio,
    host: str = "127.0.0.1",
    port: int = 8765,
    stateless: bool = False,
    names: str | None = None,
    unlisted: bool = False,
    with_metrics: bool = False,
) -> int:
    """`unlisted`: serve an agent named with --agent that is not listed under `agents:` (it
    gets `policy.default`); without it such a name — usually a typo in a client's config, which
    the client hides behind an empty tool list — is refused before anything is served."""
    resolution = resolve_project(load_project(config))
    if agent is not None:
        resolution.policy.require_listed([agent], unlisted=unlisted)
    if mode is ServeMode.direct:  # search mode names tools server.tool
        _refuse_clashes(resolution, names)
    settings = resolution.project.config
    if settings.privacy.tokenize and settings.state is not None and settings.state.url:
        key_from()  # the agents' token maps are shared through the store, encrypted with it
    pipeline = Pipeline(resolution, AuditLog(resolution, via="serve"), confirm=None)
    metrics.pending(pipeline.pending_approvals)  # read when metrics are collected, if ever

    if transport is ServeTransport.stdio:
        if "stdout" in userconfig.load().audit.sinks:
            raise UsageError(
                "audit.sinks names stdout, and serve over stdio speaks MCP on stdout: a record "
                "there would break the client's session",
                hint="use the stderr sink for serve over stdio (config.yaml: audit.sinks)",
            )
        who = default_agent(agent)
        resolution.policy.agent(who)  # extends errors and the like fail now, before serving
        _warn_unlisted(resolution, who)

        async def stdio() -> None:
            await serve_stdio(pipeline, who, mode.value, names)

        runner.run(stdio)
        return 0

    # over HTTP only: the token checks, the approvers' page and the HTTP server (35 ms of
    # imports a stdio client would wait for at every start)
    from bundlectl.gateway.http import bind, serve_http  # noqa: PLC0415

    if agent is not None:
        _warn_unlisted(resolution, agent)
    access = access_for(resolution, agent, host)
    sock = bind(host, port)

    async def http() -> None:
        await serve_http(
            pipeline,
            access=access,
            agent=agent,
            sock=sock,
            mode=mode.value,
            stateless=stateless,
            names=names,
            with_metrics=with_metrics,
        )

    if with_metrics:
        try:
            metrics.enable()
        except ImportError:
            raise UsageError(
                "--metrics needs the prometheus-client package",
                hint="pip install 'bundlectl[metrics]'",
            ) from None
    runner.run(http)
    return 0


def _warn_unlisted(resolution: Resolution, agent: str) -> None:
    """A name not under `agents` is served `policy.default` (SPEC 7): say so, since a typo
    in a client's config otherwise shows only as an empty or a full tool list."""
    said = resolution.policy.unlisted(agent)
    if said is not None:
        note(said)


def _refuse_clashes(resolution: Resolution, names: str | None) -> None:
    """Direct mode with names two tools would share (`bare`, two servers with one tool name):
    a client could not tell which it calls, so nothing is served."""
    clashes = resolution.name_clashes(names)
    if not clashes:
        return
    naming = names or resolution.project.config.gateway.names
    shown = "; ".join(
        f"{name!r} would be both {first[0]}.{first[1]} and {second[0]}.{second[1]}"
        for name, first, second in clashes[:5]
    )
    more = f" (and {len(clashes) - 5} more)" if len(clashes) > 5 else ""
    raise UsageError(
        f"gateway names clash with names: {naming}: {shown}{more}",
        hint="use names: prefixed (server__tool), or disable one of the servers",
    )
