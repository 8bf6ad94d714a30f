"""`bundlectl serve`: the policy-enforcing MCP gateway (SPEC 7), over stdio or streamable HTTP."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NoReturn

from bundlectl import metrics
from bundlectl.calls.audit import AuditLog
from bundlectl.calls.pipeline import Pipeline
from bundlectl.cli.options import ServeMode, ServeTransport
from bundlectl.config import userconfig
from bundlectl.config.project import load_project
from bundlectl.errors import UsageError
from bundlectl.gateway.access import access_for
from bundlectl.gateway.downstream import log_line
from bundlectl.gateway.serve_stdio import serve_stdio
from bundlectl.mcpio import runner
from bundlectl.mcpio.child import parent_death_signal
from bundlectl.output import err, note
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
    json_response: bool = False,
    names: str | None = None,
    unlisted: bool = False,
    with_metrics: bool = False,
    workers: int = 1,
) -> int:
    """`unlisted`: serve an agent named with --agent that is not listed under `agents:` (it
    gets `policy.default`); without it such a name — usually a typo in a client's config, which
    the client hides behind an empty tool list — is refused before anything is served.
    `workers`: processes serving one port (`--stateless` over HTTP; see `_supervised`).
    `json_response`: a 2025-11-25 client's request over stateless HTTP answered with one JSON
    body (`gateway.http.serve_http`)."""
    if json_response and (transport is not ServeTransport.streamable_http or not stateless):
        raise UsageError(
            "--json-response answers each request of a stateless HTTP gateway with one JSON "
            "body; a session's client is asked an `ask` rule's question on its call's event "
            "stream, so it needs --transport streamable-http --stateless",
            hint="add --transport streamable-http --stateless, or leave out --json-response",
        )
    resolution = resolve_project(load_project(config))
    if agent is not None:
        resolution.policy.require_listed([agent], unlisted=unlisted)
    if mode is ServeMode.direct:  # search mode names tools server.tool
        _refuse_clashes(resolution, names)
    settings = resolution.project.config
    if settings.privacy.tokenize and settings.state is not None and settings.state.url:
        key_from()  # the agents' token maps are shared through the store, encrypted with it
    if workers > 1:
        _check_workers(resolution, transport=transport, stateless=stateless)

    if transport is ServeTransport.stdio:
        pipeline = _pipeline(resolution)
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
    # With workers each has a socket of its own on the port (the kernel spreads connections
    # over them; one shared socket went to whichever worker woke first, backlog and all).
    claimed = bind(host, port, shared=workers > 1, listen=workers == 1)
    port_claimed = claimed.getsockname()[1]
    if with_metrics:
        try:
            metrics.enable()
        except ImportError:
            raise UsageError(
                "--metrics needs the prometheus-client package",
                hint="pip install 'bundlectl[metrics]'",
            ) from None

    def serve_one() -> int:
        pipeline = _pipeline(resolution)  # its own stores and audit writer in each worker
        sock = claimed
        if workers > 1:  # the supervisor's claim on the port stays with it
            claimed.close()
            sock = bind(host, port_claimed, shared=True)

        async def http() -> None:
            await serve_http(
                pipeline,
                access=access,
                agent=agent,
                sock=sock,
                mode=mode.value,
                stateless=stateless,
                json_response=json_response,
                names=names,
                with_metrics=with_metrics,
            )

        runner.run(http)
        return 0

    if workers > 1:
        return _supervised(workers, serve_one)
    return serve_one()


def _pipeline(resolution: Resolution) -> Pipeline:
    pipeline = Pipeline(resolution, AuditLog(resolution, via="serve"), confirm=None)
    metrics.pending(pipeline.pending_approvals)  # read when metrics are collected, if ever
    return pipeline


def _work(serve_one: Callable[[], int], heard: int, theirs: Iterable[int]) -> NoReturn:
    """A worker: serve until stopped — by a signal or by its supervisor's word on `heard` —
    then leave as the command would. `theirs`: the supervisor's ends of the pipes, which stay
    with it."""
    from bundlectl.cli.error_handler import crash, failure  # noqa: PLC0415
    from bundlectl.cli.process_exit import leave  # noqa: PLC0415
    from bundlectl.errors import BundlectlError  # noqa: PLC0415

    code = 70
    try:
        for fd in theirs:
            os.close(fd)
        runner.obey(heard)
        set_signal = parent_death_signal()  # never outlive a killed supervisor
        if set_signal is not None:
            set_signal()
        code = serve_one()
    except BundlectlError as exc:
        code = failure(exc)
    except KeyboardInterrupt:
        err("interrupted")
        code = 130
    except Exception as exc:
        code = crash(exc)
    finally:
        leave(code)


def _check_workers(resolution: Resolution, *, transport: ServeTransport, stateless: bool) -> None:
    """More than one worker: only over HTTP, only `--stateless` (a session lives in the process
    that opened it, and the next request may reach another), and privacy only with a shared
    store (each worker would have its own token map)."""
    if transport is not ServeTransport.streamable_http or not stateless:
        raise UsageError(
            "--workers serves one port from several processes, and a session lives in the "
            "process that opened it: it needs --transport streamable-http --stateless",
            hint="add --transport streamable-http --stateless, or serve with one worker",
        )
    settings = resolution.project.config
    if settings.privacy.tokenize and (settings.state is None or not settings.state.url):
        raise UsageError(
            "privacy tokenizes values per agent, and each worker would keep its own token map: "
            "a token made by one worker would mean nothing to another",
            hint="share the maps through a store (state.url: redis://...), or serve with one "
            "worker",
        )


def _supervised(workers: int, serve_one: Callable[[], int]) -> int:
    """`workers` processes serving one port, each with a listening socket of its own (the
    kernel spreads the connections over them), its own downstream servers and event loop; state
    they share —
    held calls, quotas, the audit chain — is in the store and the audit file, as between
    replicas. This process only watches them: a signal is passed on to every worker, and when
    one ends on its own the others are stopped (the process manager restarts the gateway).

    A signal is passed on as a word on each worker's pipe, not as the signal: a worker may get
    the signal itself too (Ctrl-C reaches the terminal's whole process group, and a manager
    such as systemd signals every process of the service), and the same stop heard twice must
    not count as the second one that cancels everything (`runner.obey`)."""
    import signal  # noqa: PLC0415 - only with --workers

    words: dict[int, int] = {}  # each worker's pid: our end of its pipe
    for _ in range(workers):
        heard, said = os.pipe()
        pid = os.fork()
        if pid == 0:
            _work(serve_one, heard, (said, *words.values()))
        os.close(heard)
        words[pid] = said
    signalled: list[int] = []

    def forward(number: int) -> None:
        word = f"{signal.Signals(number).name}\n".encode()
        for fd in words.values():
            with contextlib.suppress(OSError):  # that worker has ended
                os.write(fd, word)

    def stop(number: int, _frame: object) -> None:
        signalled.append(number)
        forward(number)

    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, stop)
    code = 0
    while words:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        if pid in words:
            os.close(words.pop(pid))
        if not signalled and not code:  # a worker ended on its own: the gateway is not whole
            ended = os.waitstatus_to_exitcode(status)
            log_line(f"worker {pid} ended ({ended}): stopping the others")
            code = ended if ended > 0 else 1
            forward(signal.SIGTERM)
    for fd in words.values():
        os.close(fd)
    return 130 if signalled else code  # stopped by a signal, as one process would say


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
