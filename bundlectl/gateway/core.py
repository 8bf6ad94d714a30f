"""`bundlectl serve`: one MCP server in front of every resolved server, enforcing each agent's
policy at run time (SPEC 7). The transports are `serve_stdio` (one agent) here and
`gateway_http` (many agents, bearer tokens).

Direct mode: `tools/list` holds the tools the agent may call (allow or ask), named
`server__tool`, with their definitions passed through; a denied tool is invisible and calling it
answers exactly as calling a tool that does not exist (the audit log records the real reason).
Every call goes through the pipeline `exec` uses — decide, validate, call with the server's
timeout, audit (`via: serve`) — and every failure comes back as a tool result with `isError` and
a message the model can act on; the gateway never dies of a downstream failure.

The `Hub` holds what all sessions share: the policy (reloaded when the config or the lock
changes; a file that does not load keeps the last good one) and the downstream servers. Each
downstream server is an actor: a task that starts the server on first use, holds its client
session (entered and left in that one task, as the SDK requires) and runs one call at a time; a
server whose connection broke is started again on the next call. A `Gateway` is one agent's view.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import secrets
import sys
import warnings
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.lowlevel
import mcp_types as types
from anyio.abc import TaskGroup, TaskStatus
from mcp.client.subscriptions import ListenNotSupportedError
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.shared.subscriptions import ResourceUpdated, ToolsListChanged

from bundlectl import __version__
from bundlectl.calls.arguments import refuse_constant
from bundlectl.calls.call import CallOutcome, CallRequest, completed, perform
from bundlectl.calls.pipeline import After, Confirmation, Deferred, Pipeline
from bundlectl.catalog import ToolRef, search
from bundlectl.errors import (
    BundlectlError,
    Declined,
    Interrupted,
    PolicyDenied,
    ServerCrashed,
    ServerError,
    Unconfirmable,
)
from bundlectl.gateway.express import Express
from bundlectl.gateway.parking import Parking, unseal
from bundlectl.lockfile import digest_json
from bundlectl.mcpio.connect import Target, classify, connect
from bundlectl.mcpio.session import SdkSession, list_all_tools
from bundlectl.mcpio.stdio import (
    Oversized,
    PipeWriter,
    Tap,
    json_line,
    read_pipe,
    session_message,
)
from bundlectl.models import ToolSpec
from bundlectl.output import err
from bundlectl.patterns import gateway_name
from bundlectl.policy import Decision
from bundlectl.privacy import Privacy
from bundlectl.project import load_project
from bundlectl.resolution import resolve_project

CONNECT_TIMEOUT = 30.0
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
NONCE_MEMORY = 3600.0  # seconds a used confirmation is remembered (longer than the seal's TTL)
PROBE_TIMEOUT = 2.0  # a server that does not answer a ping this long after a timeout is stuck


T = TypeVar("T")


class CallCancelled(Interrupted):
    """The client cancelled the call (`notifications/cancelled`); the server was told so too."""


Job = Callable[[Any], Awaitable[Any]]
# Asks the person at the client whether an `ask` rule's call may go ahead: the answer, or (on
# the 2026-07-28 protocol) the result that asks the client to ask, and to retry with the answer.


class Relay:
    """What a downstream server sends towards the client — progress, log messages, elicitation
    and sampling requests, list changes — goes to the client of the call it belongs to, and to
    no one else.

    The calls in flight on the server are registered per request (`enter`/`leave`), never kept
    in one field of the server: MCP does not say which request a server's log message or
    elicitation belongs to, so it goes to the one client whose calls are in flight. When calls
    of several clients are in flight at once (`concurrency` > 1) it cannot be told whose it is:
    a log message is dropped and a request refused, rather than risk another agent's client
    seeing it. Outside any call (a late message) nothing is forwarded, except by a stdio
    gateway, which has one client. Progress is routed by each call's own token
    (`Gateway._progress`)."""

    def __init__(self, server: str, hub: Hub, owner: str = "") -> None:
        self.server, self.hub = server, hub
        self.owner = owner  # the agent whose process of the server this is ("": shared)
        self.inflight: dict[int, Any] = {}  # the MCP request context of each call in flight
        self.tokens: dict[int, Any] = {}  # the privacy token map of each call in flight
        self.last: Any = None  # the latest call's context (for a gateway with one client)
        self.last_tokens: Any = None
        self._keys = itertools.count(1)
        # Resources clients subscribed to; on a 2026-07-28 server they ride on the listen stream.
        self.watched: set[str] = set()
        self.modern: bool | None = None  # the session's protocol, once the listen was tried
        self.settled = anyio.Event()  # set once `modern` is known for the current session
        self._listening: anyio.CancelScope | None = None

    def enter(self, ctx: Any, tokens: Any = None) -> int:
        """A call of the client request `ctx` is in flight on the server (`tokens`: that
        client's privacy token map, for what the server says meanwhile); `leave` ends it."""
        key = next(self._keys)
        self.inflight[key] = ctx
        self.tokens[key] = tokens
        if self.hub.one_client:
            self.last, self.last_tokens = ctx, tokens
        return key

    def leave(self, key: int) -> None:
        self.inflight.pop(key, None)
        self.tokens.pop(key, None)

    def tokens_of(self, ctx: Any) -> Any:
        """The token map of the call in flight for `ctx` (None: nothing is tokenized)."""
        for key, known in self.inflight.items():
            if known is ctx:
                return self.tokens.get(key)
        return self.last_tokens if ctx is self.last else None

    def current(self) -> tuple[Any, str | None]:
        """The client request a server's message belongs to, or None and why not."""
        contexts = list(self.inflight.values())
        if self.hub.one_client and (contexts or self.last is not None):
            # stdio: one client, whose calls may be on the express lane and the SDK path at
            # once; whatever the server says, during a call or between calls, is that client's.
            return (contexts[-1] if contexts else self.last), None
        if not contexts:
            return None, f"no client's call is in flight on server {self.server!r}"
        if len({_owner(ctx) for ctx in contexts}) > 1:
            return None, (
                f"calls of several clients are in flight on server {self.server!r} at once "
                "(its concurrency is above 1), and MCP does not say whose call this is; set "
                f"servers.{self.server}.concurrency: 1 to let it ask"
            )
        return contexts[-1], None

    def options(self) -> dict[str, Any]:
        """The downstream client's callbacks (each also declares the capability)."""
        return {
            "elicitation_callback": self.elicit,
            "sampling_callback": self.sample,
            "logging_callback": self.log,
            "message_handler": self.message,
        }

    def _refuse(self, what: str, why: str | None) -> types.ErrorData:
        return types.ErrorData(
            code=types.INVALID_REQUEST, message=f"{what} is not available: {why}"
        )

    async def _ask(self, capability: str, request: Any, answer: type) -> Any:
        """A server's request to the client of the call it belongs to: sent on the client's
        session (2025-11-25), or parked for a 2026-07-28 client to answer by retrying
        (`parking.py`)."""
        ctx, why = self.current()
        if ctx is None:
            return self._refuse(capability, why)
        declared = ctx.session.client_capabilities
        if declared is None or getattr(declared, capability) is None:
            why = f"the client behind the bundlectl gateway did not declare {capability}"
            return self._refuse(capability, why)
        if ctx.session.can_send_request:
            return await ctx.session.send_request(request, answer)
        parking = self.hub.parking
        if not parking.holds(ctx):
            return self._refuse(
                capability,
                "the client's request came over stateless HTTP on the 2025-11-25 protocol, "
                "which has no way to send a request back to the client during a call; serve "
                "without --stateless, or use a client on the 2026-07-28 protocol",
            )
        timeout = float(self.hub.downstream(self.server, self.owner).target.spec.timeout)
        reply = await parking.ask(ctx, request, timeout)
        if reply is None:
            if capability == "elicitation":  # nobody answered: as if the user dismissed it
                return types.ElicitResult(action="cancel")
            return self._refuse(capability, f"the client did not answer within {timeout:g} s")
        return reply

    async def elicit(self, context: Any, params: Any) -> Any:
        request = types.ElicitRequest(params=params)
        return await self._ask("elicitation", request, types.ElicitResult)

    async def sample(self, context: Any, params: Any) -> Any:
        request = types.CreateMessageRequest(params=params)
        return await self._ask("sampling", request, types.CreateMessageResult)

    async def log(self, params: Any) -> None:
        ctx, _ = self.current()
        if ctx is None or not self.hub.wants_log(ctx, params.level):
            return
        tokens = self.tokens_of(ctx)
        if tokens is not None:  # what a server logs passes the tokenizer like its results
            params = params.model_copy(update={"data": tokens.value(params.data)})
        logger = f"{self.server}.{params.logger}" if params.logger else self.server
        with warnings.catch_warnings(), contextlib.suppress(Exception):
            warnings.simplefilter("ignore")
            await ctx.session.send_log_message(
                params.level, params.data, logger=logger, related_request_id=ctx.request_id
            )

    async def message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            await self.hub.tools_changed(self.server)
        elif isinstance(message, types.PromptListChangedNotification):
            await self.hub.tell_listeners("send_prompt_list_changed")
        elif isinstance(message, types.ResourceListChangedNotification):
            await self.hub.tell_listeners("send_resource_list_changed")
        elif isinstance(message, types.ResourceUpdatedNotification) and not self.modern:
            await self.hub.resource_updated(self.server, self.owner, str(message.params.uri))

    async def listen(self, client: Any, scope: anyio.CancelScope) -> None:
        """On the 2026-07-28 protocol a server's changes come only to a client that listens for
        them (`subscriptions/listen`): its tool list, and the resources clients subscribed to
        (the stream is opened again when that set changes). Older servers send list changes
        unasked and take `resources/subscribe` requests (`Hub.watch`)."""

        quiet = (MCPError, RuntimeError, TimeoutError)
        with scope:
            try:
                while True:
                    self._listening = anyio.CancelScope()
                    with self._listening, contextlib.suppress(*quiet):
                        async with client.listen(
                            tools_list_changed=True, resource_subscriptions=sorted(self.watched)
                        ) as events:
                            self.modern = True
                            self.settled.set()
                            async for event in events:
                                if isinstance(event, ResourceUpdated):
                                    await self.hub.resource_updated(
                                        self.server, self.owner, event.uri
                                    )
                                else:
                                    await self.hub.tools_changed(self.server)
                            return  # the server ended the stream
                    if not self._listening.cancel_called:
                        return
            except ListenNotSupportedError:
                self.modern = False
            finally:
                self.settled.set()

    async def resubscribe(self, client: Any) -> None:
        """A new session (a start after a crash, a restart after a reload): subscribe again to
        the resources clients watch here. A 2025-11-25 server forgot them with its session; a
        2026-07-28 one is told on the listen stream, which opens with `watched`."""

        with anyio.move_on_after(5):
            await self.settled.wait()
        if self.modern:
            return
        for server, owner, uri in list(self.hub.watchers):
            if (server, owner) == (self.server, self.owner):
                with warnings.catch_warnings(), contextlib.suppress(MCPError):
                    warnings.simplefilter("ignore")
                    await client.subscribe_resource(uri)

    def rewatch(self) -> None:
        """The subscribed resources changed: open the listen stream again with them."""
        if self._listening is not None:
            self._listening.cancel()


WATCH_LIMIT = 10_000  # files looked at per `watch:` of a server, each call: a bound on the cost


def watch_stamp(target: Target) -> tuple[Any, ...]:
    """(path, mtime, size) of every file under the server's `watch:` paths (relative to the
    project root), missing ones included as such: any edit, new or removed file changes it."""
    stamps: list[Any] = []
    for entry in target.spec.watch:
        top = target.root / Path(entry).expanduser()
        if not top.is_dir():
            stamps.append((top, file_stamp(top)))
            continue
        for folder, dirs, files in os.walk(top):
            dirs.sort()
            for name in sorted(files):
                path = Path(folder) / name
                stamps.append((path, file_stamp(path)))
                if len(stamps) >= WATCH_LIMIT:
                    return tuple(stamps)
    return tuple(stamps)


def file_stamp(path: Path | str) -> tuple[int, int, int] | None:
    """What changes when a file is edited or replaced (None: it is not there)."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_mtime_ns, info.st_size, info.st_ino)


@dataclass
class Downstream:
    """One server behind the gateway: started on first use, warm after, one call at a time
    (`concurrency: N`: N at a time); after a crash it is started again on a later call, backing
    off while it keeps failing."""

    target: Target
    relay: Relay | None = None
    _inbox: Any = None  # the actor's job queue while it runs
    _lock: anyio.Lock = field(default_factory=anyio.Lock)
    tools: dict[str, Any] | None = None  # the live tools of the current session, by name
    failures: int = 0  # crashes in a row
    retry_at: float = 0.0  # no new start before this time (anyio clock)
    start_error: BundlectlError | None = None  # why its last start failed (None: it started)
    _slots: anyio.Semaphore = field(init=False)
    _watched: tuple[Any, ...] | None = None  # its `watch:` files when the session started

    def __post_init__(self) -> None:
        self._slots = anyio.Semaphore(max(1, self.target.spec.concurrency))

    @property
    def warm(self) -> bool:
        """Its session is up, its tools are listed, and no file it watches has changed."""
        return self._inbox is not None and self.tools is not None and not self.stale()

    def stale(self) -> bool:
        """A file or folder of its `watch:` changed since its session started."""
        return self._watched is not None and watch_stamp(self.target) != self._watched

    def _alone(self) -> bool:
        """No call but the caller's runs on it (a restart must not cut another call off)."""
        return self._slots.value == max(1, self.target.spec.concurrency) - 1

    def acquire(self) -> bool:
        """Take one of the calls it may take at a time (`concurrency`) if one is free now (the
        express lane does not wait); `release` gives it back."""
        try:
            self._slots.acquire_nowait()
        except anyio.WouldBlock:
            return False
        return True

    def release(self) -> None:
        self._slots.release()

    @property
    def connect_timeout(self) -> float:
        """Starting counts against the server's own timeout too (a server that never answers
        the handshake fails the call in `timeout` seconds, not 30)."""
        return float(min(CONNECT_TIMEOUT, self.target.spec.timeout))

    async def run(self, group: TaskGroup, job: Job, ctx: Any = None, tokens: Any = None) -> Any:
        """Run `job(client)` on this server's session, starting the server when needed;
        `ctx`: the client request it serves (see `Relay`). Cancelling the caller cancels the
        job, so the server gets `notifications/cancelled`."""
        async with self._slots:
            async with self._lock:
                if self._inbox is not None and self.exited():
                    # It died while idle: start it afresh for this call rather than fail it.
                    _log_line(f"server {self.target.name!r} exited while idle; starting it again")
                    await self.stop()
                elif self._inbox is not None and self.stale() and self._alone():
                    _log_line(f"server {self.target.name!r}: a watched file changed; restarting it")
                    await self.stop()
                if self._inbox is None:
                    wait = self.retry_at - anyio.current_time()
                    if wait > 0:
                        raise self._waiting(wait)
                    # Stamped before it starts: an edit while it starts restarts it next time.
                    self._watched = watch_stamp(self.target) if self.target.spec.watch else None
                    try:
                        self._inbox = await group.start(self._actor)
                    except BundlectlError as exc:
                        self._not_started(exc)
                        await self.crashed()
                        raise
                    self.start_error = None
                inbox = self._inbox
            reply_send, reply = anyio.create_memory_object_stream[tuple[Any, Any]](1)
            scope = anyio.CancelScope()
            try:
                await inbox.send((job, reply_send, scope, (ctx, tokens)))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                reply_send.close()  # the actor is gone: as if it died under the call
            try:
                value, error = await reply.receive()
            except anyio.EndOfStream:  # the actor died under the call
                await self.crashed()
                raise ServerCrashed(
                    f"server {self.target.name!r} stopped during the call"
                ) from None
            except anyio.get_cancelled_exc_class():
                scope.cancel()  # the client cancelled: so does the downstream call
                # and its slot is free once the server has stopped working on it.
                with (
                    anyio.CancelScope(shield=True),
                    anyio.move_on_after(5),
                    contextlib.suppress(anyio.EndOfStream),
                ):
                    await reply.receive()
                raise
            finally:
                reply.close()
            if isinstance(error, ServerCrashed):  # the connection is gone: afresh next time
                await self.crashed()
            elif isinstance(error, ServerError):
                await self.stop()
            if error is not None:
                raise error
            return value

    def _waiting(self, wait: float) -> ServerError:
        """The error of a call while the server waits to be started again: the real reason
        when it could not start (it never ran, so it has no log to read)."""
        name = self.target.name
        if self.start_error is not None:
            return ServerError(
                f"server {name!r} could not start {self.failures} time(s) in a row; it is "
                f"tried again in {wait:.1f} s. The last attempt: {self.start_error.message}",
                hint=self.start_error.hint or "fix the server's entry in bundlectl.yaml",
            )
        return ServerError(
            f"server {name!r} crashed {self.failures} time(s) in a row; it is started again "
            f"in {wait:.1f} s",
            hint="try again shortly; its log says why it stopped",
        )

    def _not_started(self, exc: BundlectlError) -> None:
        """Say on stderr (the gateway's log) why the server could not start, once per reason:
        its tools are missing from every list until it starts."""
        if self.start_error is None or self.start_error.message != exc.message:
            _log_line(
                f"server {self.target.name!r} could not start, so its tools are not offered: "
                f"{exc.explained}"
            )
        self.start_error = exc

    def exited(self) -> bool:
        """Whether its stdio process has ended (an HTTP server cannot be asked)."""
        child = self.target.child
        process = getattr(child, "process", None)
        return process is not None and process.poll() is not None

    async def after(self, after: After, group: TaskGroup) -> None:
        """What `Pipeline.finish` said of a call — the one place a server's crashes are counted,
        whichever path the call took: one that answered is sound again; one that broke the call
        is started afresh, after a backoff that grows with each crash in a row; one that did not
        answer in time is checked for being stuck in it (`probe`)."""
        if after is After.KEEP:
            self.failures = 0
        elif after is After.CRASHED:
            await self.crashed()
        elif after is After.RESTART:
            await self.stop()
        else:
            group.start_soon(self.probe, group)

    async def probe(self, group: TaskGroup) -> None:
        """After a call timed out: the server was told to cancel it. One that does not answer a
        ping within `PROBE_TIMEOUT` is still stuck in that call and would hold every later call
        of every agent: it is stopped (the next call starts it afresh). A server busy with
        another call is left alone (that call has its own timeout)."""
        if self._inbox is None or not self.acquire():
            return
        self.release()

        async def ping(client: Any) -> None:
            await client.send_ping()

        try:
            with anyio.fail_after(PROBE_TIMEOUT):
                await self.run(group, ping)
        except (TimeoutError, BundlectlError):
            _log_line(
                f"server {self.target.name!r} did not answer after a call timed out; it is "
                "stopped and started again on the next call"
            )
            await self.stop()

    async def live_tools(self, group: TaskGroup) -> dict[str, Any]:
        """The session's tools, listed once per session (a restart lists them again)."""
        if self.tools is None or self._inbox is None:
            listed = await self.run(group, list_all_tools)
            fresh = {tool.name: tool for tool in listed}
            if self.relay is not None and fresh != self.tools:
                self.relay.hub.changed()
            self.tools = fresh
        return self.tools

    def forget_tools(self) -> None:
        """Its tools changed: list them again before the next call uses them."""
        self.tools = None

    async def crashed(self) -> None:
        self.failures += 1
        backoff = 0.0 if self.failures == 1 else min(30.0, 0.5 * 2 ** (self.failures - 2))
        self.retry_at = anyio.current_time() + backoff
        await self.stop()

    async def stop(self) -> None:
        self.tools = None
        inbox, self._inbox = self._inbox, None
        if inbox is not None:
            await inbox.aclose()

    async def _actor(self, *, task_status: TaskStatus[Any]) -> None:
        send, receive = anyio.create_memory_object_stream[tuple[Any, ...]](1)
        options = self.relay.options() if self.relay is not None else None
        started, tee = False, None
        try:
            async with (
                connect(
                    self.target,
                    connect_timeout=self.connect_timeout,
                    options=options,
                    option=f"servers.{self.target.name}.timeout",
                ) as client,
                anyio.create_task_group() as jobs,
            ):
                tee = self.target.stderr  # this session's copy of the server's stderr
                if self.target.tap is not None:  # calls past the SDK, in this session's protocol
                    self.target.tap.version = client.protocol_version
                task_status.started(send)
                started = True
                listening = anyio.CancelScope()
                if self.relay is not None:
                    self.relay.modern, self.relay.settled = None, anyio.Event()  # a new session
                    jobs.start_soon(self.relay.listen, client, listening)
                    jobs.start_soon(self.relay.resubscribe, client)
                async with receive:
                    async for job, reply, scope, caller in receive:
                        jobs.start_soon(self._one, job, client, reply, scope, caller)
                listening.cancel()  # the inbox closed: the calls in flight finish, then we stop
        except BundlectlError as exc:
            if not started:
                receive.close()
                raise  # the caller that started it says why
            # The calls in flight were answered; the gateway goes on.
            _log_line(f"server {self.target.name!r} stopped: {exc.explained}")
        finally:
            if self._inbox is send:  # ended on its own (the server went away): start afresh
                self._inbox = None
                self.tools = None
            send.close()
            self.target.close(wait=0, tee=tee)

    async def _one(
        self, job: Job, client: Any, reply: Any, scope: anyio.CancelScope, caller: Any
    ) -> None:
        ctx, tokens = caller
        key = self.relay.enter(ctx, tokens) if self.relay is not None and ctx is not None else None
        async with reply:
            try:
                with scope:
                    await reply.send((await job(client), None))
                    return
                await reply.send((None, CallCancelled("the call was cancelled by the client")))
            except BundlectlError as exc:
                await reply.send((None, exc))
            except Exception as exc:  # never let one job take the gateway down
                error = classify(exc, self.target) or ServerCrashed(
                    f"server {self.target.name!r}: {type(exc).__name__}: {exc}"
                )
                await reply.send((None, error))
            finally:
                if key is not None:
                    self.relay.leave(key)  # type: ignore[union-attr]


@dataclass
class Hub:
    """Everything behind the gateway that its sessions share: the policy in force (reloaded
    when the config or the lock changes) and the downstream servers (one actor each, whichever
    agent calls them)."""

    pipeline: Pipeline
    group: TaskGroup
    quiet: bool = True
    log: Callable[[str], None] = lambda line: None
    agents: set[str] = field(default_factory=set)  # served agents: checked again on reload
    # Checks a reloaded resolution before it is applied (HTTP: the agents' tokens) and applies
    # its own part; raising a BundlectlError keeps the last good policy, as a broken file does.
    vet: Callable[[Any], None] | None = None
    # The downstream servers by (server, owner): the agent whose process it is, "" when shared.
    servers: dict[tuple[str, str], Downstream] = field(default_factory=dict)
    _names: dict[str, tuple[str, str]] | None = None  # gateway name → (server, tool)
    ambiguous: set[str] = field(default_factory=set)  # names two tools claim
    pairs: set[tuple[str, str]] = field(default_factory=set)  # every known (server, tool)
    # The client connections to tell when tools change, held weakly: a connection that ended
    # (a closed session, a stateless request) is forgotten with it.
    listeners: weakref.WeakKeyDictionary[Any, None] = field(
        default_factory=weakref.WeakKeyDictionary
    )
    # Privacy token maps (real values, in memory only): per client connection, held weakly so
    # that they go with the session; per agent in stateless mode (no session outlives a
    # request). Never chosen by anything a client sends.
    tokenizers: weakref.WeakKeyDictionary[Any, dict[str, Any]] = field(
        default_factory=weakref.WeakKeyDictionary
    )
    agent_tokenizers: dict[str, Any] = field(default_factory=dict)
    used_nonces: dict[str, float] = field(default_factory=dict)  # confirmations used → until
    # `logging/setLevel` of each client connection (held weakly, as the listeners).
    log_levels: weakref.WeakKeyDictionary[Any, str] = field(
        default_factory=weakref.WeakKeyDictionary
    )
    stateless: bool = False
    one_client: bool = False  # stdio: a single client, so nothing can reach the wrong one
    naming: str | None = None  # `serve --names`; None: the config's `gateway.names`
    bus: Any = None  # 2026-07-28 clients' `subscriptions/listen` streams
    _privacy: tuple[Any, Any] | None = None  # (resolution, its Privacy)
    generation: int = 0  # bumped whenever what an agent can list may have changed
    listings: dict[tuple[str, str, int], Any] = field(default_factory=dict)
    # Subscribed resources: (server, owner, uri) → who to tell, by key (a legacy client's
    # session: its notify function; a 2026-07-28 listen stream: None, told through `bus`).
    watchers: dict[tuple[str, str, str], dict[Any, Any]] = field(default_factory=dict)
    _stamp: tuple[Any, ...] | None = None
    _watched: tuple[str, ...] = ()  # the files `_stamp` stamps (the same ones across reloads)
    _reloading: anyio.Lock = field(default_factory=anyio.Lock)
    _released: set[Any] = field(default_factory=set)  # connections `release_at_end` watches
    # 2026-07-28 clients' calls held while their server asks them something (`parking.py`)
    parking: Parking = field(init=False)

    def __post_init__(self) -> None:
        self.parking = Parking(self.group)
        self._watched = tuple(map(str, self.pipeline.resolution.project.watched_files()))
        self._stamp = self._files()

    @property
    def resolution(self) -> Any:
        return self.pipeline.resolution

    def view(self, agent: str, mode: str = "direct", ctx: Any = None) -> Gateway:
        """Agent `agent`'s view, answering the client request `ctx`."""
        if ctx is not None and not self.stateless:  # who to tell when a server's tools change
            self.listeners[_connection(ctx)] = None
        return Gateway(self, agent, mode, ctx)

    def slot(self, server: str, agent: str) -> tuple[str, str]:
        """Which process of `server` serves `agent`: its own for a stdio server, so nothing the
        server sends outside a call (MCP over stdio says not whose it is) can reach another
        agent; one for every agent over HTTP or SSE and with `share: true`."""
        merged = self.pipeline.resolution.merged.servers.get(server)
        spec = merged.spec if merged is not None else None
        shared = spec is None or spec.transport != "stdio" or spec.share
        return (server, "" if shared else agent)

    def downstream(self, server: str, agent: str) -> Downstream:
        """`agent`'s downstream of `server` (see `slot`), made on first use."""
        key = self.slot(server, agent)
        if key not in self.servers:
            target = self.pipeline.target(server, quiet=self.quiet)
            target.with_parent = True  # no server outlives a gateway that was killed
            downstream = Downstream(target, Relay(server, self, key[1]))
            if target.spec.transport == "stdio" and not target.builtin:
                target.tap = Tap()  # the express lane's way to it (`express.py`)
                target.tap.changed = downstream.forget_tools
            self.servers[key] = downstream
        return self.servers[key]

    def running(self, server: str) -> list[Downstream]:
        """Every process of `server` started so far (one per agent, or the shared one)."""
        return [d for (name, _), d in self.servers.items() if name == server]

    async def tools_changed(self, server: str) -> None:
        """A server said its tools changed: list them again, and tell every client (each sees
        the new list through its agent's policy on its next `tools/list`)."""
        for downstream in self.running(server):
            downstream.tools = None
        self._names = None
        self.changed()
        if self.bus is not None:  # clients listening (2026-07-28)
            await self.bus.publish(ToolsListChanged())
        await self.tell_listeners("send_tool_list_changed")  # older clients: a notification

    async def tell_listeners(self, send: str) -> None:
        """A list-changed notification (`send`: the connection's method) to every 2025-11-25
        client; each sees the change through its agent's policy when it lists again."""
        for connection in list(self.listeners):
            try:
                await getattr(connection, send)()
            except Exception:  # a client that went away
                self.listeners.pop(connection, None)

    async def watch(self, server: str, agent: str, uri: str, key: Any, notify: Any) -> bool:
        """Tell `notify` (None: the listen streams) when the server's resource `uri` changes
        (on `agent`'s process of it); False when the server cannot watch it (no subscriptions,
        unknown resource)."""

        place = (*self.slot(server, agent), uri)
        if place not in self.watchers:
            downstream = self.downstream(server, agent)
            relay = downstream.relay
            assert relay is not None

            async def subscribe(client: Any) -> bool:
                with anyio.move_on_after(5):
                    await relay.settled.wait()  # the listen stream tried: which protocol
                if relay.modern:
                    relay.watched.add(uri)
                    relay.rewatch()
                    return True
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        await client.subscribe_resource(uri)
                except MCPError:
                    return False
                return True

            try:
                if not await downstream.run(self.group, subscribe):
                    return False
            except BundlectlError:
                return False
            self.watchers[place] = {}
        self.watchers[place][key] = notify
        return True

    async def unwatch(self, uri: str, key: Any) -> None:
        """`key` no longer wants to hear about `uri`; the last one out unsubscribes."""
        for place in [place for place in self.watchers if place[2] == uri]:
            self.watchers[place].pop(key, None)
            if self.watchers[place]:
                continue
            del self.watchers[place]
            downstream = self.servers.get(place[:2])
            relay = downstream.relay if downstream is not None else None
            if downstream is None or relay is None:
                continue
            if relay.modern:
                relay.watched.discard(uri)
                relay.rewatch()
                continue

            async def unsubscribe(client: Any) -> None:
                with warnings.catch_warnings(), contextlib.suppress(MCPError):
                    warnings.simplefilter("ignore")
                    await client.unsubscribe_resource(uri)

            with contextlib.suppress(BundlectlError):
                await downstream.run(self.group, unsubscribe)

    def release_at_end(self, connection: Any, key: Any) -> None:
        """When the client `connection` ends — a DELETE of its HTTP session, its idle timeout,
        a closed pipe — what it subscribed to is unsubscribed (the last one out unsubscribes
        downstream), as if it had unsubscribed from each."""
        if key in self._released:
            return
        self._released.add(key)

        async def release() -> None:
            self._released.discard(key)
            for uri in {uri for (_, _, uri), keys in self.watchers.items() if key in keys}:
                await self.unwatch(uri, key)

        stack = getattr(connection, "exit_stack", None)  # the SDK's `Connection` has one
        if stack is not None:
            stack.push_async_callback(release)

    async def resource_updated(self, server: str, owner: str, uri: str) -> None:
        """A server (`owner`'s process of it) said its resource `uri` changed: tell whoever
        subscribed to it there."""
        watchers = self.watchers.get((server, owner, uri), {})
        listening = False
        for key, notify in list(watchers.items()):
            if notify is None:
                listening = True
                continue
            try:
                await notify(uri)
            except Exception:  # a client that went away
                watchers.pop(key, None)
        if listening and self.bus is not None:
            await self.bus.publish(ResourceUpdated(uri=uri))

    def accepted(self, state: str, agent: str, tool: str, arguments: str) -> bool:
        """Whether `state` (the unsealed `requestState` of a confirmation) binds this agent,
        tool and arguments, and was not used before; it is used up now. The SDK's seal makes
        it unforgeable and expire (TTL); the nonce makes it good once. With --stateless
        replicas a nonce is remembered by the replica that saw it only."""
        try:
            bound = json.loads(state)
        except ValueError:
            return False
        if not isinstance(bound, dict) or (bound.get("agent"), bound.get("tool")) != (agent, tool):
            return False
        nonce = bound.get("nonce")
        if bound.get("arguments") != arguments or not isinstance(nonce, str):
            return False
        now = anyio.current_time()
        if len(self.used_nonces) > 10_000:  # forget those whose state has expired anyway
            self.used_nonces = {n: t for n, t in self.used_nonces.items() if t > now}
        if nonce in self.used_nonces:
            return False
        self.used_nonces[nonce] = now + NONCE_MEMORY
        return True

    def log_floor(self, ctx: Any) -> str | None:
        """The lowest level of log message the client of request `ctx` wants, None for none: a
        2026-07-28 client says so on each request (`_meta`), an older one with
        `logging/setLevel`; one that never set a level gets every level, as before."""
        if str(getattr(ctx, "protocol_version", "")) >= MODERN:
            asked = (getattr(ctx, "meta", None) or {}).get(types.LOG_LEVEL_META_KEY)
            return asked if asked in LOG_LEVELS else None
        try:
            floor = self.log_levels.get(_connection(ctx)) if not self.stateless else None
        except TypeError:  # a connection that cannot be weakly referenced: never set a level
            floor = None
        return floor or LOG_LEVELS[0]

    def wants_log(self, ctx: Any, level: str) -> bool:
        """Whether the client of request `ctx` asked for log messages of `level`."""
        floor = self.log_floor(ctx)
        return floor is not None and LOG_LEVELS.index(level) >= LOG_LEVELS.index(floor)

    def privacy(self) -> Any:
        """The privacy settings in force (built once per loaded config)."""
        resolution = self.pipeline.resolution
        if self._privacy is None or self._privacy[0] is not resolution:
            self._privacy = (resolution, Privacy.of(resolution.project.config))
        return self._privacy[1]

    def tokenizer(self, ctx: Any, agent: str) -> Any:
        """The session's token map (in memory only), or None when nothing is tokenized.

        Over HTTP with 2025-11-25 sessions: the session's (its connection's), released with it.
        Where no session outlives a request — `--stateless`, the 2026-07-28 protocol — and
        over stdio (one client per process): the authenticated agent's. A header such as
        `mcp-session-id` never picks one."""
        privacy = self.privacy()
        if privacy is None:
            return None
        sessions = (
            not self.stateless
            and getattr(ctx, "request", None) is not None
            and str(getattr(ctx, "protocol_version", MODERN)) < MODERN
        )
        if not sessions:
            if agent not in self.agent_tokenizers:
                self.agent_tokenizers[agent] = privacy.session()
            return self.agent_tokenizers[agent]
        maps = self.tokenizers.setdefault(_connection(ctx), {})
        if agent not in maps:
            maps[agent] = privacy.session()
        return maps[agent]

    def changed(self) -> None:
        """What agents can list may differ from now on: forget the listings made so far."""
        self.generation += 1
        self.listings.clear()

    def names(self) -> dict[str, tuple[str, str]]:
        """Every known tool by gateway name: the declared catalogs, and the live tools of the
        servers listed so far."""
        if self._names is None:
            self._names = {}
            self.ambiguous, self.pairs = set(), set()
            for server, merged in self.pipeline.resolution.merged.servers.items():
                self.learn(server, merged.spec.tools)
        return self._names

    def name_of(self, server: str, tool: str) -> str:
        """The name a client sees for the server's tool or prompt (`gateway.names`)."""
        naming = self.naming or self.pipeline.resolution.project.config.gateway.names
        return gateway_name(server, tool, naming)

    def learn(self, server: str, tools: Any) -> None:
        names = self.names()
        for tool in tools:
            name, pair = self.name_of(server, tool.name), (server, tool.name)
            if names.get(name, pair) != pair:  # two tools claim one name: neither gets it
                self.ambiguous.add(name)
                self.log(
                    f"tools {names[name][0]}.{names[name][1]} and {server}.{tool.name} both "
                    f"have the gateway name {name!r}; neither is offered under it"
                )
            names[name] = pair
            self.pairs.add(pair)

    def tool_named(self, name: str) -> tuple[str, str] | None:
        """The one (server, tool) a gateway name stands for (None: none, or several)."""
        names = self.names()
        return None if name in self.ambiguous else names.get(name)

    def _files(self) -> tuple[Any, ...]:
        return tuple(map(file_stamp, self._watched))

    def current(self) -> bool:
        """Whether the config and the lock are as they were when last loaded."""
        return self._files() == self._stamp

    async def refresh(self) -> None:
        """Apply an edited config or lock from this request on (SPEC 7 "Reload"): a file that
        does not load keeps the last good policy (and says why in the log); servers whose
        configuration changed are stopped, to start afresh on their next call."""
        if self._files() == self._stamp:
            return
        async with self._reloading:
            stamp = self._files()
            if stamp == self._stamp:
                return
            self._stamp = stamp

            old = self.pipeline.resolution
            try:
                fresh = resolve_project(load_project(old.project.config_path))
                for agent in sorted(self.agents):
                    fresh.policy.agent(agent)
                if self.vet is not None:  # last: it may apply its part once nothing can fail
                    self.vet(fresh)
            except BundlectlError as exc:
                found = [p.render() for p in exc.problems] or [exc.message]
                self.log(
                    "reload failed; the last good policy stays in force (fix the file: the next "
                    "request reads it again): " + "; ".join(found)
                )
                return
            self.pipeline.reload(fresh)
            self._names = None
            self.changed()
            for key, downstream in list(self.servers.items()):
                now = fresh.merged.servers.get(key[0])
                if now is None or now.spec != downstream.target.spec:
                    del self.servers[key]
                    await downstream.stop()
            self.log(f"reloaded {old.project.config_path.name}: policy {fresh.lock.policy_digest}")


@dataclass
class Gateway:
    """One agent's view of every resolved server, and the calls it makes through them."""

    hub: Hub
    agent: str
    mode: str = "direct"  # direct | search
    ctx: Any = None  # the client request this view answers (progress, elicitation, logs)
    # What binds a held call (`parking.py`) when this request's client can answer a server's
    # question only by retrying (2026-07-28); None: it is asked directly, or cannot be.
    binding: dict[str, str] | None = None

    @property
    def listing(self) -> str:
        """Where the agent finds the names it may call."""
        return "search_tools" if self.mode == "search" else "tools/list"

    @property
    def pipeline(self) -> Pipeline:
        return self.hub.pipeline

    async def _offered(self, name: str, spec: Any) -> list[types.Tool]:
        """A server's tools: its declared definitions, or the live ones when it declares none or
        `pin_tools` holds (then a live tool that differs from the lock is withheld)."""
        pinned = self.pipeline.resolution.policy.set.pin_tools
        if spec.tools and not pinned:
            return [_declared(tool) for tool in spec.tools]
        try:
            live = (await self.hub.downstream(name, self.agent).live_tools(self.hub.group)).values()
        except BundlectlError:
            return []  # a server that cannot start offers nothing (its log line says why)
        self.hub.learn(name, live)
        return [tool for tool in live if self.pipeline.unpinned(name, tool) is None]

    async def _catalog(self) -> list[tuple[str, types.Tool]]:
        """(server, tool) for every tool the agent may call (allow or ask)."""
        compiled = self.pipeline.resolution.policy.agent(self.agent)
        usable: list[tuple[str, types.Tool]] = []
        for name, merged in self.pipeline.resolution.merged.servers.items():
            if merged.spec.disabled or not compiled.may_reach(name):
                continue  # never started, connected to or sent a credential for this agent
            offered = await self._offered(name, merged.spec)
            usable.extend((name, tool) for tool in compiled.usable(name, offered, _name))
        return usable

    async def list_tools(self) -> list[types.Tool]:
        """Direct mode: the usable tools, named `server__tool`, definitions passed through."""
        catalog = await self._catalog()
        tools = [
            tool.model_copy(update={"name": self.hub.name_of(server, tool.name)})
            for server, tool in catalog
            if self.hub.name_of(server, tool.name) not in self.hub.ambiguous
        ]
        return sorted(tools, key=lambda t: t.name)

    async def search(
        self, query: str, server: str | None, detail: str, limit: int
    ) -> types.CallToolResult:
        """Search mode's `search_tools`: the usable tools ranked as `bundlectl tools --search`
        ranks them, at the detail asked for."""

        if detail not in DETAILS:
            return _error(f"detail must be one of {', '.join(DETAILS)}, not {detail!r}")
        found = {
            (name, tool.name): tool
            for name, tool in await self._catalog()
            if server is None or name == server
        }
        refs = [
            ToolRef(
                name, tool, ToolSpec(name=tool, description=found[(name, tool)].description or "")
            )
            for name, tool in sorted(found)
        ]
        ranked = [ref for _, ref in search(refs, query)] if query.strip() else refs
        compiled = self.pipeline.resolution.policy.agent(self.agent)
        items = []
        for ref in ranked:
            item = _describe(ref.server, found[(ref.server, ref.tool)], detail)
            rules = compiled.conditional_matching(ref.server, ref.tool)
            if rules and isinstance(item, dict):  # which calls the policy lets through
                item["conditions"] = [
                    f"{r.effect} if {r.condition.describe()}" for r in rules if r.condition
                ]
            items.append(item)
        shown = items[: max(1, limit)]
        payload = {"tools": shown, "more": len(items) - len(shown)}
        text = types.TextContent(type="text", text=json.dumps(payload, ensure_ascii=False))
        return types.CallToolResult(content=[text])

    def _find(self, name: str) -> tuple[str, str] | None:
        """The (server, tool) a name the agent used stands for: `server__tool`, or `server.tool`
        (search mode); None: no configured server has that tool."""
        if "." in name:  # the pair itself, never through a gateway name that may stand for another
            server, _, tool = name.partition(".")
            self.hub.names()
            return (server, tool) if (server, tool) in self.hub.pairs else None
        return self.hub.tool_named(name)

    async def _servers_in_use(self) -> list[str]:
        """The servers whose resources and prompts are the agent's too (`CompiledAgent.opens`:
        a tool allowed outright, not only after confirmation or for some arguments)."""
        compiled = self.pipeline.resolution.policy.agent(self.agent)
        tools: dict[str, list[str]] = {}
        for server, tool in await self._catalog():
            tools.setdefault(server, []).append(tool.name)
        return sorted(server for server, names in tools.items() if compiled.opens(server, names))

    async def _gather(self, method: str, field: str) -> list[tuple[str, Any]]:
        """(server, item) for every item of a paginated list (`resources/list`, ...) of every
        server in use, asked concurrently; a server without the feature adds nothing."""

        found: dict[str, list[Any]] = {}

        async def job(client: Any) -> list[Any]:
            items: list[Any] = []
            cursor = None
            try:
                while True:
                    page = await getattr(client, method)(cursor=cursor)
                    items.extend(getattr(page, field))
                    cursor = page.next_cursor
                    if not cursor:
                        return items
            except MCPError:  # method not found: the server has no such feature
                return items

        async def one(server: str) -> None:
            with contextlib.suppress(BundlectlError):
                downstream = self.hub.downstream(server, self.agent)
                found[server] = await downstream.run(self.hub.group, job)

        servers = await self._servers_in_use()
        async with anyio.create_task_group() as group:
            for server in servers:
                group.start_soon(one, server)
        return [(server, item) for server in servers for item in found.get(server, [])]

    async def list_prompts(self) -> list[types.Prompt]:
        """The prompts of the servers in use, named `server__prompt` (descriptions through the
        tokenizer, as what `prompts/get` returns)."""
        prompts = [
            prompt.model_copy(update={"name": self.hub.name_of(server, prompt.name)})
            for server, prompt in await self._gather("list_prompts", "prompts")
        ]
        return self._tokenized(prompts, "title", "description")

    def _tokenized(self, items: list[T], *fields: str) -> list[T]:
        """Listed items with the text of `fields` tokenized (privacy), as reads of them are."""
        tokens = self.hub.tokenizer(self.ctx, self.agent)
        if tokens is None:
            return items
        return [tokens.listed(item, *fields) for item in items]

    async def get_prompt(self, name: str, arguments: dict[str, str] | None) -> Any:
        listed = await self._gather("list_prompts", "prompts")
        found = [(s, p.name) for s, p in listed if self.hub.name_of(s, p.name) == name]
        if found:
            server, prompt = found[0]

            async def job(client: Any) -> Any:
                return await client.get_prompt(prompt, arguments)

            key = {"name": prompt, "arguments": arguments or {}}
            try:
                downstream = self.hub.downstream(server, self.agent)
                got = await downstream.run(self.hub.group, job, self.ctx)
            except BaseException:
                self.pipeline.audit.access(self.agent, server, "prompts/get", key, "server-error")
                raise
            self.pipeline.audit.access(self.agent, server, "prompts/get", key, "ok")
            tokens = self.hub.tokenizer(self.ctx, self.agent)
            return tokens.prompt(got) if tokens is not None else got
        self.pipeline.audit.access(self.agent, "-", "prompts/get", {"name": name}, "not-found")
        raise _not_found(f"unknown prompt {name!r}; prompts/list shows the prompts you can use")

    async def complete(
        self, ref: Any, argument: dict[str, str], context: dict[str, str] | None
    ) -> types.CompleteResult:
        """Completions for an argument of a prompt (by the name the client sees) or a resource
        template (by its URI template), from the server in use that has it; the answer passes
        the tokenizer like every other text a server sends."""
        if ref.type == "ref/prompt":
            listed = await self._gather("list_prompts", "prompts")
            found = [
                (s, types.PromptReference(name=p.name))
                for s, p in listed
                if self.hub.name_of(s, p.name) == ref.name
            ]
        else:
            listed = await self._gather("list_resource_templates", "resource_templates")
            found = [(s, ref) for s, t in listed if t.uri_template == ref.uri]
        if not found:
            what = f"prompt {ref.name!r}" if ref.type == "ref/prompt" else f"template {ref.uri!r}"
            raise _not_found(f"unknown {what}; nothing to complete")
        server, real = found[0]

        async def job(client: Any) -> types.CompleteResult:
            result: types.CompleteResult = await client.complete(real, argument, context)
            return result

        result: types.CompleteResult = await self.hub.downstream(server, self.agent).run(
            self.hub.group, job, self.ctx
        )
        tokens = self.hub.tokenizer(self.ctx, self.agent)
        if tokens is None:
            return result
        values = [tokens.text(value) for value in result.completion.values]
        completion = result.completion.model_copy(update={"values": values})
        return result.model_copy(update={"completion": completion})

    async def list_resources(self) -> list[types.Resource]:
        found = [item for _, item in await self._gather("list_resources", "resources")]
        return self._tokenized(found, "uri", "name", "title", "description")

    async def list_resource_templates(self) -> list[types.ResourceTemplate]:
        found = await self._gather("list_resource_templates", "resource_templates")
        return self._tokenized([item for _, item in found], "name", "title", "description")

    async def read_resource(self, uri: str) -> Any:
        """The resource from the server in use that lists it, or else from the first that can
        read it (a URI made from a template). A listed URI that was tokenized is read by its
        real value, from the server that listed it only (no token is put back elsewhere)."""

        listed = await self._gather("list_resources", "resources")
        tokens = self.hub.tokenizer(self.ctx, self.agent)
        real = tokens.restore(uri) if tokens is not None else uri
        owners = [server for server, item in listed if str(item.uri) == real]
        uri = real if owners else uri
        candidates = owners or await self._servers_in_use()

        async def job(client: Any) -> Any:
            try:
                return await client.read_resource(uri)
            except MCPError:
                return None

        for server in candidates:
            try:
                downstream = self.hub.downstream(server, self.agent)
                result = await downstream.run(self.hub.group, job, self.ctx)
            except BundlectlError:
                continue
            if result is not None:
                self.pipeline.audit.access(self.agent, server, "resources/read", {"uri": uri}, "ok")
                tokens = self.hub.tokenizer(self.ctx, self.agent)
                return tokens.read(result) if tokens is not None else result
        self.pipeline.audit.access(self.agent, "-", "resources/read", {"uri": uri}, "not-found")
        raise _not_found(f"unknown resource {uri!r}; resources/list shows what you can read")

    async def subscribe(self, uri: str, key: Any, notify: Any, ctx: Any = None) -> None:
        """Watch a resource of a server in use: the one that lists it, or else the first that
        can watch it (a URI made from a template); until the client of request `ctx`
        unsubscribes or its connection ends."""
        listed = await self._gather("list_resources", "resources")
        owners = [server for server, item in listed if str(item.uri) == uri]
        for server in owners or await self._servers_in_use():
            if await self.hub.watch(server, self.agent, uri, key, notify):
                if ctx is not None:
                    self.hub.release_at_end(_connection(ctx), key)
                return
        raise _not_found(f"unknown resource {uri!r}; resources/list shows what you can read")

    def _log_meta(self) -> dict[str, Any] | None:
        """The call's `_meta` for the server: the log level the client wants (a 2026-07-28
        server sends log messages only to requests that ask; older ones ignore the key)."""
        floor = self.hub.log_floor(self.ctx) if self.ctx is not None else None
        return None if floor is None else {types.LOG_LEVEL_META_KEY: floor}

    def _progress(self) -> Any:
        """The downstream server's progress, passed on to the client when it asked for it."""
        ctx = self.ctx
        if ctx is None or ctx.meta is None or ctx.meta.get("progress_token") is None:
            return None

        tokens = self.hub.tokenizer(ctx, self.agent)

        async def report(progress: float, total: float | None, message: str | None) -> None:
            if tokens is not None and message is not None:
                message = tokens.text(message)
            with contextlib.suppress(Exception):
                await ctx.session.report_progress(progress, total, message)

        return report

    async def call_tool(
        self, name: str, arguments: dict[str, Any], confirm: Confirmation | None = None
    ) -> types.CallToolResult:
        """One call through the pipeline, by `server__tool` (direct mode) or `server.tool`
        (search mode's `call_tool`); every failure is a result the model can act on.

        `confirm` asks the person at the client about an `ask` rule (an MCP elicitation); without
        it such a call is refused.
        """
        unknown = f"unknown tool {name!r}; {self.listing} shows the tools you can call"
        found = self._find(name)
        if found is None:
            await self._catalog()  # servers without declared tools: learn their live names
            found = self._find(name)
        if found is None:
            return _error(self._not_started(name) or unknown)
        server, tool = found
        try:
            decision = self.pipeline.judge(
                self.agent,
                server,
                tool,
                interactive=True,
                arguments=self._received(server, tool, arguments),
            )
        except BundlectlError as exc:  # arguments refused at the door (NaN)
            return _error(exc.explained)
        try:
            admitted = await self.pipeline.admission(decision, arguments, confirm)
        except Unconfirmable:
            return _error(
                f"{name} needs a person's confirmation ({decision.reason}), and this client "
                "cannot ask for it (no elicitation support); ask the user to run it with "
                "`bundlectl exec`"
            )
        except Declined:
            return _error(f"the user did not confirm {name}; it was not called")
        except PolicyDenied:
            if self._listed(decision):
                return _error(_refused_arguments(name, decision, self._policy_of(decision)))
            return _error(unknown)  # audited with the reason; said as for no such tool
        if isinstance(admitted, Deferred):
            return admitted.answer  # type: ignore[no-any-return]  # the client asks, then retries
        decision = admitted
        perform = functools.partial(self._perform, decision, server, tool, arguments)
        if self.binding is not None:  # its server may ask the client: it can answer by a retry
            return await self.hub.parking.start(self.ctx, self.binding, perform)  # type: ignore[return-value]
        return await perform()

    def _listed(self, decision: Decision) -> bool:
        """Whether the agent is offered the tool (`tools/list`): some call of it may pass, so a
        refusal on its arguments may say so (SPEC 7)."""
        compiled = self.pipeline.resolution.policy.agent(self.agent)
        return decision.conditional and (
            compiled.decide(decision.server, decision.tool, interactive=True).effect != "deny"
        )

    def _policy_of(self, decision: Decision) -> list[str]:
        """The conditions under which the agent's own grants let it call the tool."""
        compiled = self.pipeline.resolution.policy.agent(self.agent)
        return [
            rule.condition.describe()
            for rule in compiled.conditional_matching(decision.server, decision.tool)
            if rule.effect != "deny" and rule.condition is not None
        ]

    def _received(self, server: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """The arguments as `server.tool` will receive them: the real values behind the agent's
        privacy tokens for a `detokenize` tool (the conditions judge those, SPEC 10)."""
        tokens = self.hub.tokenizer(self.ctx, self.agent)
        if tokens is None or not self.hub.privacy().gets_real_values(server, tool):
            return arguments
        restored: dict[str, Any] = tokens.restore(arguments)
        return restored

    def _not_started(self, name: str) -> str | None:
        """Why a name is not among the tools, when it names a server the agent may reach that
        could not start (`server__tool`, or `server.tool` in search mode)."""
        compiled = self.pipeline.resolution.policy.agent(self.agent)
        for (server, owner), downstream in self.hub.servers.items():
            error = downstream.start_error
            if owner not in ("", self.agent):
                continue
            if error is None or not name.startswith((f"{server}__", f"{server}.")):
                continue
            if compiled.may_reach(server):
                return (
                    f"server {server!r} could not start, so {name!r} is not available: "
                    f"{error.explained}"
                )
        return None

    async def _perform(
        self, decision: Decision, server: str, tool: str, arguments: dict[str, Any]
    ) -> types.CallToolResult:
        """An admitted call, performed and finished (audit, restart)."""
        tokens = self.hub.tokenizer(self.ctx, self.agent)  # None: nothing is tokenized
        # Every message back to the agent has the real values it may have been given turned
        # back into tokens (a server's or a validator's error may quote them).
        shown = tokens.conceal if tokens is not None else _same
        downstream = self.hub.downstream(server, self.agent)
        restore = tokens is not None and self.hub.privacy().gets_real_values(server, tool)
        request = CallRequest(
            self.agent,
            server,
            tool,
            decision,
            [],
            arguments,
            float(downstream.target.spec.timeout),
            check=self.pipeline.pin_check(server),
            progress=self._progress(),
            restore=tokens.restore if restore and tokens is not None else None,
            meta=self._log_meta(),
        )
        raised: list[BaseException] = []  # a failure `Downstream.run` has already counted

        async def on_the_server() -> CallOutcome:
            try:
                tools = await downstream.live_tools(self.hub.group)

                async def call(client: Any) -> CallOutcome:
                    return await perform(SdkSession(client), request, downstream.target, tools)

                done: CallOutcome = await downstream.run(self.hub.group, call, self.ctx, tokens)
                return done
            except BundlectlError as exc:
                raised.append(exc)
                raise

        outcome, after = await completed(self.pipeline, request, on_the_server)
        if not raised:
            await downstream.after(after, self.hub.group)
        if outcome.error is not None:
            return _error(shown(outcome.error.explained))
        assert outcome.result is not None
        result: types.CallToolResult = outcome.result.as_model()
        return tokens.result(result) if tokens is not None else result


def _refused_arguments(name: str, decision: Decision, grants: list[str]) -> str:
    """What the model reads when a tool it is offered is refused on these arguments: that the
    arguments were refused, and what its own rules allow — never another agent's rules, the
    rule's file or the values it sent (SPEC 7)."""
    rule = decision.rule
    if rule is not None and rule.effect == "deny":
        return f"{name}: these arguments are refused by the policy; the call was not made"
    allowed = "; or ".join(grants) or "other arguments"
    return (
        f"{name}: these arguments are refused by the policy, which allows this tool only "
        f"with: {allowed}; the call was not made"
    )


def _name(tool: types.Tool) -> str:
    return tool.name


def _same(text: str) -> str:
    return text


DETAILS = ("name", "summary", "full")


def _describe(server: str, tool: types.Tool, detail: str) -> Any:
    """One search result: the qualified name, with the first line of the description
    (`summary`) or the whole definition (`full`)."""
    name = f"{server}.{tool.name}"
    if detail == "name":
        return name
    item: dict[str, Any] = {"name": name}
    description = (tool.description or "").strip()
    if detail == "summary":
        item["description"] = description.splitlines()[0] if description else ""
        return item
    item["description"] = description
    item["input_schema"] = tool.input_schema
    if tool.output_schema:
        item["output_schema"] = tool.output_schema
    if tool.annotations:
        item["annotations"] = tool.annotations.model_dump(by_alias=True, exclude_none=True)
    return item


def search_mode_tools() -> list[types.Tool]:
    """Search mode's whole `tools/list`: find tools, then call them by name."""
    search_schema = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "Words to match; empty lists all."},
            "server": {"type": "string", "description": "Only this server's tools."},
            "detail": {"type": "string", "enum": list(DETAILS), "default": "summary"},
            "limit": {"type": "integer", "minimum": 1, "default": 20},
        },
    }
    call_schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "server.tool, as search_tools names it."},
            "arguments": {"type": "object", "description": "The tool's arguments."},
        },
        "required": ["name"],
    }
    return [
        types.Tool(
            name="search_tools",
            description="Find the tools you may call: name only, a summary, or full schemas.",
            input_schema=search_schema,
            annotations=types.ToolAnnotations(read_only_hint=True),
        ),
        types.Tool(
            name="call_tool",
            description="Call a tool found with search_tools, by its server.tool name.",
            input_schema=call_schema,
        ),
    ]


def _declared(spec: Any) -> types.Tool:
    annotations = spec.annotations or None
    return types.Tool(
        name=spec.name,
        title=spec.title,
        description=spec.description or None,
        input_schema=spec.input_schema,
        output_schema=spec.output_schema,
        annotations=types.ToolAnnotations(**annotations) if annotations else None,
    )


@contextlib.contextmanager
def _as_protocol_error() -> Iterator[None]:
    """Our errors as JSON-RPC errors with our message (prompts and resources have no error
    results; the SDK would say only "internal error")."""

    try:
        yield
    except BundlectlError as exc:
        raise MCPError(code=types.INTERNAL_ERROR, message=exc.explained) from None


def _not_found(message: str) -> Exception:
    """A JSON-RPC error for an unknown prompt or resource (those have no error results)."""
    return MCPError(code=types.INVALID_PARAMS, message=message)


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=message)], is_error=True
    )


def mcp_server(
    hub: Hub,
    mode: str,
    agent_of: Callable[[Any], str],
    *,
    codec: Any = None,
    seen: Callable[[Any], None] | None = None,
) -> Any:
    """The gateway as an MCP server: `agent_of(ctx)` says whose view a request gets;
    `seen(ctx)` hears of every request it serves (the express lane learns the client's
    connection).

    `codec` seals the 2026-07-28 protocol's `requestState` (the pending confirmation of an
    `ask` rule) with keys every replica of a stateless deployment shares
    (`gateway_http.StateKeys`); None: a key of this process only.
    """

    if hub.bus is None:
        hub.bus = InMemorySubscriptionBus()

    async def view(ctx: Any) -> Gateway:
        if seen is not None:
            seen(ctx)
        await hub.refresh()
        return hub.view(agent_of(ctx), mode, ctx)

    async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        if mode == "search":
            return types.ListToolsResult(tools=search_mode_tools())
        return types.ListToolsResult(tools=await (await view(ctx)).list_tools())

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> Any:
        gateway = await view(ctx)
        arguments = dict(params.arguments or {})
        if _answers_by_retry(ctx):
            resumed = await _held(gateway, params, arguments)
            if resumed is not None:
                return resumed
        confirm = _elicitation(ctx, gateway, params)
        if mode != "search":
            return await gateway.call_tool(params.name, arguments, confirm)
        return await _search_mode_call(gateway, params.name, arguments, confirm)

    async def on_list_prompts(ctx: Any, params: Any) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=await (await view(ctx)).list_prompts())

    async def on_get_prompt(ctx: Any, params: types.GetPromptRequestParams) -> Any:
        with _as_protocol_error():
            return await (await view(ctx)).get_prompt(params.name, params.arguments)

    async def on_completion(ctx: Any, params: types.CompleteRequestParams) -> Any:
        """`completion/complete` for the prompts and templates of the servers in use."""
        context = params.context.arguments if params.context is not None else None
        argument = {"name": params.argument.name, "value": params.argument.value}
        with _as_protocol_error():
            return await (await view(ctx)).complete(params.ref, argument, context)

    async def on_list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=await (await view(ctx)).list_resources())

    async def on_list_resource_templates(ctx: Any, params: Any) -> Any:
        templates = await (await view(ctx)).list_resource_templates()
        return types.ListResourceTemplatesResult(resource_templates=templates)

    async def on_read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> Any:
        with _as_protocol_error():
            return await (await view(ctx)).read_resource(str(params.uri))

    async def on_subscribe_resource(ctx: Any, params: types.SubscribeRequestParams) -> Any:
        session = ctx.session
        with _as_protocol_error():
            await (await view(ctx)).subscribe(
                str(params.uri), _session_key(session), session.send_resource_updated, ctx
            )
        return types.EmptyResult()

    async def on_set_logging_level(ctx: Any, params: types.SetLevelRequestParams) -> Any:
        """The client's log level, applied by the gateway to what it forwards (downstream
        servers are shared by every client, so their own level is left as it is)."""
        if not hub.stateless:
            hub.log_levels[_connection(ctx)] = params.level
        return types.EmptyResult()

    async def on_unsubscribe_resource(ctx: Any, params: types.UnsubscribeRequestParams) -> Any:
        await hub.unwatch(str(params.uri), _session_key(ctx.session))
        return types.EmptyResult()

    # logging/setLevel is deprecated from 2026-07-28 (SEP-2577); 2025-11-25 clients use it.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        server: Any = Server(
            "bundlectl",
            version=__version__,
            instructions="The tools this agent may call, under bundlectl's policy.",
            on_list_tools=on_list_tools,
            on_call_tool=on_call_tool,
            on_list_prompts=on_list_prompts,
            on_get_prompt=on_get_prompt,
            on_completion=on_completion,
            on_list_resources=on_list_resources,
            on_list_resource_templates=on_list_resource_templates,
            on_read_resource=on_read_resource,
            # A stateless request has no stream an update could come back on: subscriptions
            # are neither declared nor taken (a 2026-07-28 client's listen stream still works).
            on_subscribe_resource=None if hub.stateless else on_subscribe_resource,
            on_unsubscribe_resource=None if hub.stateless else on_unsubscribe_resource,
            on_set_logging_level=on_set_logging_level,
            on_subscriptions_listen=_Listen(ListenHandler(hub.bus), hub, view),
        )
    security = (
        RequestStateSecurity(codec=codec) if codec is not None else RequestStateSecurity.ephemeral()
    )
    server.middleware.append(RequestStateBoundary(security, default_audience="bundlectl"))
    server.middleware.append(_ListingCache(hub, agent_of))
    # Declare the list changes the gateway sends (2025-11-25; on 2026-07-28 the SDK derives
    # them from `subscriptions/listen`).
    sent = not hub.stateless  # nothing reaches a stateless 2025-11-25 client unasked
    changes = NotificationOptions(prompts_changed=sent, resources_changed=sent, tools_changed=sent)
    server.create_initialization_options = functools.partial(
        Server.create_initialization_options, server, changes
    )
    return server


def _connection(ctx: Any) -> Any:
    """The client connection a request context belongs to (the SDK's `Connection`; for a call
    on the express lane, the connection the lane learnt, else the lane itself)."""
    lane = getattr(ctx, "lane", None)
    if lane is not None:
        return lane.connection if lane.connection is not None else lane
    return getattr(ctx.session, "_connection", ctx.session)


def _owner(ctx: Any) -> Any:
    """Which client connection a request context belongs to (the express lane's calls: the
    lane, which is one stdio client)."""
    lane = getattr(ctx, "lane", None)
    return ("lane", id(lane)) if lane is not None else _session_key(ctx.session)


def _session_key(session: Any) -> int:
    """One key per client connection (a session object may be made per request)."""
    return id(getattr(session, "_connection", session))


class _Listen:
    """`subscriptions/listen` (2026-07-28 clients): the SDK's handler, given only the resources
    the agent may read, each watched on its server for as long as the stream is open."""

    def __init__(self, inner: Any, hub: Hub, view: Callable[[Any], Awaitable[Gateway]]) -> None:
        self.inner, self.hub, self.view = inner, hub, view

    async def __call__(self, ctx: Any, params: Any) -> Any:
        wanted = list(params.notifications.resource_subscriptions or [])
        key = ("listen", id(ctx), ctx.request_id)
        honored: list[str] = []
        if wanted:
            gateway = await self.view(ctx)
            for uri in wanted:
                with contextlib.suppress(Exception):
                    await gateway.subscribe(uri, key, None)
                    honored.append(uri)
            notifications = params.notifications.model_copy(
                update={"resource_subscriptions": honored or None}
            )
            params = params.model_copy(update={"notifications": notifications})
        try:
            return await self.inner(ctx, params)
        finally:
            with anyio.CancelScope(shield=True):
                for uri in honored:
                    await self.hub.unwatch(uri, key)


class _ListingCache:
    """Server middleware: an agent's `tools/list` answer, as the SDK put it on the wire, is kept
    until what the agent can list may have changed (a reload, a server's new tools), so a
    client that lists often (every turn, for some) pays for building, validating and
    serializing thousands of tool definitions once."""

    def __init__(self, hub: Hub, agent_of: Callable[[Any], str]) -> None:
        self.hub, self.agent_of = hub, agent_of

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        if ctx.method != "tools/list" or (ctx.params or {}).get("cursor"):
            return await call_next(ctx)
        await self.hub.refresh()
        key = (self.agent_of(ctx), ctx.protocol_version, self.hub.generation)
        cached = self.hub.listings.get(key)
        if cached is None:
            generation = self.hub.generation
            cached = await call_next(ctx)
            if self.hub.generation == generation:  # nothing changed while it was built
                self.hub.listings[key] = cached
        return cached


async def serve_stdio(
    pipeline: Pipeline, agent: str, mode: str = "direct", names: str | None = None
) -> None:
    """Serve the agent over stdin/stdout until the client closes them (or a stop signal)."""
    async with anyio.create_task_group() as group:
        hub = Hub(pipeline, group, log=_log_line, agents={agent}, one_client=True, naming=names)
        async with _stdio() as (read, writer, express_to):
            # Warm calls of direct mode skip the SDK on both sides (`express.py`).
            lane = Express(hub, agent, group, writer) if mode == "direct" else None
            express_to(lane)
            server = mcp_server(hub, mode, lambda ctx: agent, seen=lane.seen if lane else None)
            await server.run(read, writer.queue, server.create_initialization_options())
        group.cancel_scope.cancel()  # the client is gone: stop every downstream server


def _sdk_line(message: Any) -> bytes:
    data: str = message.message.model_dump_json(by_alias=True, exclude_unset=True)
    return data.encode() + b"\n"


def _invalid_message(exc: Exception) -> str:
    """What makes a JSON value no JSON-RPC message, in a few words (pydantic's first error)."""
    errors = getattr(exc, "errors", None)
    first = errors()[0] if callable(errors) and errors() else None
    if first is None:
        return str(exc).splitlines()[0]
    where = ".".join(str(p) for p in first.get("loc", ()) if not isinstance(p, int) or p)
    return f"{where}: {first.get('msg')}" if where else str(first.get("msg"))


def _log_line(line: str) -> None:
    """The gateway's own log: stderr, which MCP clients keep as the server's log."""
    err(f"bundlectl serve: {line}")


def _answers_by_retry(ctx: Any) -> bool:
    """Whether the client of request `ctx` answers a server's elicitation or sampling by
    retrying its call (2026-07-28, declared) rather than on its session."""
    if ctx.session.can_send_request or ctx.protocol_version < MODERN:
        return False
    declared = ctx.session.client_capabilities
    return declared is not None and (
        declared.elicitation is not None or declared.sampling is not None
    )


async def _held(
    gateway: Gateway, params: types.CallToolRequestParams, arguments: dict[str, Any]
) -> Any:
    """A 2026-07-28 client's call, whose server's questions are answered by retries: the
    call is bound to its agent, tool and arguments (`Gateway.binding`); a retry with answers
    resumes the held call (its next question or its result). None: a new call."""
    binding = {"agent": gateway.agent, "tool": params.name, "arguments": digest_json(arguments)}
    gateway.binding = binding
    held = unseal(params.request_state)
    if held is None:
        return None
    responses = dict(params.input_responses or {})
    answer = await gateway.hub.parking.resume(held, binding, responses)
    if answer is not None:
        return answer
    return _error(
        f"{params.name}: the call these answers belong to is no longer waiting (it ended, or "
        "another gateway process holds it); call the tool again"
    )


_NO_FIELDS: dict[str, Any] = {"type": "object", "properties": {}}
MODERN = "2026-07-28"  # the protocol with input-required results instead of server requests


def _elicitation(
    ctx: Any, gateway: Gateway, params: types.CallToolRequestParams
) -> Confirmation | None:
    """A confirmer that asks the client's user with an MCP elicitation, when the client declared
    it can elicit: a request sent back to the client (2025-11-25 sessions), or, on the 2026-07-28
    protocol, an InputRequiredResult that the client answers by retrying the call with the
    answer and the `requestState` we gave it (sealed and checked by the SDK: it cannot be forged
    or moved to another tool or agent)."""
    capabilities = ctx.session.client_capabilities
    if capabilities is None or capabilities.elicitation is None:
        return None

    # What the sealed state binds: the agent, the tool, the exact arguments, and a nonce that
    # makes one acceptance good for one call (a replayed acceptance is refused).
    def digest() -> str:  # only when a confirmation is made or answered, not on every call
        return digest_json(dict(params.arguments or {}))

    if params.request_state is not None and params.input_responses is not None:
        reply = params.input_responses.get("confirm")
        if gateway.hub.accepted(params.request_state, gateway.agent, params.name, digest()):
            accepted = isinstance(reply, types.ElicitResult) and reply.action == "accept"

            async def answered(
                pipeline: Pipeline, decision: Decision, arguments: Mapping[str, Any]
            ) -> bool:
                return accepted

            return answered
    if not ctx.session.can_send_request and ctx.protocol_version < MODERN:
        return None  # a stateless HTTP session on the old protocol: no way back to the client

    async def confirm(
        pipeline: Pipeline, decision: Decision, arguments: Mapping[str, Any]
    ) -> bool | Deferred:
        downstream = gateway.hub.servers.get(gateway.hub.slot(decision.server, gateway.agent))
        live = (downstream.tools if downstream is not None else None) or {}
        schema = getattr(live.get(decision.tool), "input_schema", None)
        question = pipeline.question(decision, arguments, schema)
        question += "\nAllow it?"
        if ctx.session.can_send_request:
            answer = await ctx.session.elicit_form(
                question, _NO_FIELDS, related_request_id=ctx.request_id
            )
            return bool(answer.action == "accept")
        request = types.ElicitRequest(
            params=types.ElicitRequestFormParams(message=question, requested_schema=_NO_FIELDS)
        )
        bound = {"agent": gateway.agent, "tool": params.name, "arguments": digest()}
        state = json.dumps({**bound, "nonce": secrets.token_hex(12)})
        return Deferred(
            types.InputRequiredResult(input_requests={"confirm": request}, request_state=state)
        )

    return confirm


async def _search_mode_call(
    gateway: Gateway, name: str, arguments: dict[str, Any], confirm: Confirmation | None
) -> types.CallToolResult:
    """Search mode's two tools; any other name is unknown, as in direct mode."""
    if name == "search_tools":
        query, server = arguments.get("query", ""), arguments.get("server")
        detail, limit = arguments.get("detail", "summary"), arguments.get("limit", 20)
        if not isinstance(query, str) or not (server is None or isinstance(server, str)):
            return _error("query and server are strings")
        if not isinstance(limit, int) or not isinstance(detail, str):
            return _error("limit is an integer and detail one of name, summary, full")
        return await gateway.search(query, server, detail, limit)
    if name == "call_tool":
        target, inner = arguments.get("name"), arguments.get("arguments") or {}
        if not isinstance(target, str) or "." not in target or not isinstance(inner, dict):
            return _error("call_tool takes name (server.tool, from search_tools) and arguments")
        return await gateway.call_tool(target, inner, confirm)
    return _error(f"unknown tool {name!r}; use search_tools, then call_tool")


async def _quietly_send(stream: Any, message: Any) -> None:
    with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
        await stream.send(message)


@asynccontextmanager
async def _stdio() -> AsyncIterator[tuple[Any, PipeWriter, Callable[[Express | None], None]]]:
    """Our stdin and stdout as the SDK's message streams, and a way to hand the express lane
    the messages it takes: each line is offered to it as soon as it is read, and the lane
    posts its lines to the same writer (`PipeWriter.post`).

    The SDK's own stdio server reads stdin in a worker thread that cannot be cancelled, so a
    SIGTERM would wait for the client's next line; here the event loop reads it (a daemon thread
    when stdin is a file, simply abandoned), and the shutdown goes ahead at once.
    """

    read_send, read = anyio.create_memory_object_stream[Any](16)
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    writer = PipeWriter(stdout, _sdk_line)
    lane: list[Express | None] = [None]

    count = itertools.count(1)

    def parse(raw: bytes | bytearray) -> Any:
        """The SDK's message, or None: the express lane took it, or it is no JSON-RPC message
        (then the client gets the error JSON-RPC prescribes, and our log says why; the SDK
        would drop it without a word)."""
        number, parsed = next(count), None
        try:
            if isinstance(raw, Oversized):
                raise ValueError(f"the message is {raw.size:,} bytes, over the limit")
            parsed = json.loads(raw, parse_constant=refuse_constant)
            express = lane[0]
            if express is not None and express.take(parsed):
                return None
            return session_message(parsed)
        except (ValueError, RecursionError) as exc:
            json_error = parsed is None
            if isinstance(exc, RecursionError):
                exc = ValueError("it nests too deeply")
            why = str(exc).splitlines()[0] if json_error else _invalid_message(exc)
            code = types.PARSE_ERROR if json_error else types.INVALID_REQUEST
            what = "Parse error" if json_error else "Invalid Request"
            key = parsed.get("id") if isinstance(parsed, dict) else None
            key = key if isinstance(key, str | int) and not isinstance(key, bool) else None
            error = {"code": code, "message": f"{what}: {why}"}
            writer.post(json_line({"jsonrpc": "2.0", "id": key, "error": error}))
            _log_line(
                f"message {number} from the client is not JSON-RPC 2.0 ({why}); it was answered "
                "with an error and ignored — the client must send one JSON-RPC message per line"
            )
            return None

    async def reader() -> None:
        async with read_send:
            async for message in await read_pipe(stdin, parse):
                await read_send.send(message)

    def express_to(express: Express | None) -> None:
        lane[0] = express
        if express is not None:

            def to_sdk(message: dict[str, Any]) -> None:
                group.start_soon(_quietly_send, read_send, session_message(message))

            express.to_sdk = to_sdk

    async with anyio.create_task_group() as group:
        group.start_soon(writer.run)
        group.start_soon(reader)
        try:
            yield read, writer, express_to
        finally:
            writer.queue.close()
            group.cancel_scope.cancel()
