"""One downstream server of the gateway: an actor task that starts it, holds its session and
runs its calls; crashes counted and backed off in one place (`Downstream.after`)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import anyio
import anyio.lowlevel
import mcp_types as types
from anyio.abc import TaskGroup, TaskStatus
from anyio.streams.memory import MemoryObjectSendStream

from bundlectl import metrics
from bundlectl.calls.confirm import AfterCall
from bundlectl.errors import (
    BundlectlError,
    ServerCrashed,
    ServerError,
)
from bundlectl.gateway.server_messages import Job, Relay
from bundlectl.mcpio.connect import classify, connect
from bundlectl.mcpio.pipe_session import PipeSession
from bundlectl.mcpio.session import SdkSession, ServerSession
from bundlectl.mcpio.target import Target
from bundlectl.output import err, visible

if TYPE_CHECKING:
    from bundlectl.gateway.request_context import RequestContext
    from bundlectl.privacy.tokenize import Tokenizer

CONNECT_TIMEOUT = 30.0


PROBE_TIMEOUT = 2.0  # a server that does not answer a ping this long after a timeout is stuck


T = TypeVar("T")


WATCH_LIMIT = 10_000  # files looked at per `watch:` of a server, each call: a bound on the cost


def watch_stamp(target: Target) -> tuple[tuple[Path, FileStamp], ...]:
    """(path, mtime, size) of every file under the server's `watch:` paths (relative to the
    project root), missing ones included as such: any edit, new or removed file changes it."""
    stamps: list[tuple[Path, FileStamp]] = []
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


# What changes when a file is edited or replaced (None: it is not there).
FileStamp = tuple[int, int, int] | None


def file_stamp(path: Path | str) -> FileStamp:
    """What changes when a file is edited or replaced (None: it is not there)."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_mtime_ns, info.st_size, info.st_ino)


def file_stamps(paths: tuple[str, ...], before: tuple[FileStamp, ...]) -> tuple[FileStamp, ...]:
    """`file_stamp` of each path, where one that was not there `before` is first looked for
    with access(2): a stat of a missing file raises an exception, which cost each warm call of
    the gateway more than the look (every request looks; most projects have no local rules and
    no user-level file)."""
    return tuple(
        file_stamp(path) if was is not None or os.access(path, os.F_OK) else None
        for path, was in zip(paths, before, strict=True)
    )


@dataclass
class Downstream:
    """One server behind the gateway: started on first use, warm after, one call at a time
    (`concurrency: N`: N at a time); after a crash it is started again on a later call, backing
    off while it keeps failing."""

    target: Target
    relay: Relay | None = None
    _inbox: MemoryObjectSendStream[None] | None = None  # open while its actor holds a session
    # Both taken on every call: taken at once when free (`fast_acquire`), where anyio's default
    # yields to the event loop even then (one more loop turn each; waiters still go first).
    _lock: anyio.Lock = field(default_factory=lambda: anyio.Lock(fast_acquire=True))
    tools: dict[str, types.Tool] | None = None  # the live tools of the session, by name
    failures: int = 0  # crashes in a row
    retry_at: float = 0.0  # no new start before this time (anyio clock)
    start_error: BundlectlError | None = None  # why its last start failed (None: it started)
    _slots: anyio.Semaphore = field(init=False)
    _watched: tuple[tuple[Path, FileStamp], ...] | None = None  # its `watch:` files at start
    session: ServerSession | None = None  # the session while its actor holds it
    # calls in flight on each session (by id): an old session ends once its own have finished
    _calls: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._slots = anyio.Semaphore(max(1, self.target.spec.concurrency), fast_acquire=True)

    @property
    def listed(self) -> bool:
        """Its session is up and its tools are listed (a call starts nothing first)."""
        return self._inbox is not None and self.tools is not None

    @property
    def warm(self) -> bool:
        """Its session is up, its tools are listed, and no file it watches has changed."""
        return self.listed and not self.stale()

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

    async def run(
        self,
        group: TaskGroup,
        job: Job[T],
        ctx: RequestContext | None = None,
        tokens: Tokenizer | None = None,
    ) -> T:
        """Run `job(session)` on this server's session, in the caller's task, starting the
        server when needed; `ctx`: the client request it serves (see `Relay`). Cancelling the
        caller cancels the job, so the server gets `notifications/cancelled`."""
        async with self._slots:
            session = await self._session(group)
            if session is None:  # its actor ended between the start and now: as a crash
                await self.crashed()
                raise ServerCrashed(f"server {self.target.name!r} stopped before the call")
            self._calls[id(session)] = self._calls.get(id(session), 0) + 1
            key = None
            if self.relay is not None and ctx is not None:
                key = self.relay.enter(ctx, tokens)
            try:
                value, error = await job(session), None
            except BundlectlError as exc:
                error = exc
            except Exception as exc:  # never let one job take the gateway down
                error = classify(exc, self.target) or ServerCrashed(
                    f"server {self.target.name!r}: {type(exc).__name__}: {exc}"
                )
            finally:
                if self.relay is not None and key is not None:
                    self.relay.leave(key)
                left = self._calls.get(id(session), 1) - 1
                if left:
                    self._calls[id(session)] = left
                else:
                    self._calls.pop(id(session), None)
            if isinstance(error, ServerCrashed):  # the connection is gone: afresh next time
                await self.crashed()
            elif isinstance(error, ServerError):
                await self.stop()
            if error is not None:
                raise error
            return value

    async def _session(self, group: TaskGroup) -> ServerSession | None:
        """Its session: started now when it is not up (or its process died, or a watched file
        changed while nothing else ran on it)."""
        if self._up() and not self._lock.locked():  # nothing to do: no turn of the lock
            return self.session
        async with self._lock:
            if self._inbox is not None and self.exited():
                # It died while idle: start it afresh for this call rather than fail it.
                log_line(f"server {self.target.name!r} exited while idle; starting it again")
                await self.stop()
            elif self._inbox is not None and self.stale() and self._alone():
                log_line(f"server {self.target.name!r}: a watched file changed; restarting it")
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
        return self.session

    def _up(self) -> bool:
        """Its session is up and may take this call as it is: its process runs, and no file
        it watches changed (or other calls run on it, which a restart would cut off)."""
        return (
            self._inbox is not None
            and not self.exited()
            and not (self._watched is not None and self._alone() and self.stale())
        )

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
            log_line(
                f"server {self.target.name!r} could not start, so its tools are not offered: "
                f"{exc.explained}"
            )
        self.start_error = exc

    def exited(self) -> bool:
        """Whether its stdio process has ended (an HTTP server cannot be asked)."""
        child = self.target.child
        process = getattr(child, "process", None)
        return process is not None and process.poll() is not None

    def kept(self, after: AfterCall) -> bool:
        """Whether the server is kept as it is after the call (it answered): then it is sound
        again, its crashes in a row forgotten."""
        if after is not AfterCall.KEEP:
            return False
        self.failures = 0
        return True

    async def after(self, after: AfterCall, group: TaskGroup) -> None:
        """What `Pipeline.finish` said of a call — the one place a server's crashes are counted,
        whichever path the call took: one that answered is sound again; one that broke the call
        is started afresh, after a backoff that grows with each crash in a row; one that did not
        answer in time is checked for being stuck in it (`probe`)."""
        if self.kept(after):
            return
        if after in (AfterCall.CRASHED, AfterCall.RESTART):
            metrics.restarted(self.target.name, after.value)
        if after is AfterCall.CRASHED:
            await self.crashed()
        elif after is AfterCall.RESTART:
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

        async def ping(session: ServerSession) -> None:
            await session.ping()

        try:
            with anyio.fail_after(PROBE_TIMEOUT):
                await self.run(group, ping)
        except (TimeoutError, BundlectlError):
            log_line(
                f"server {self.target.name!r} did not answer after a call timed out; it is "
                "stopped and started again on the next call"
            )
            await self.stop()

    async def live_tools(self, group: TaskGroup) -> dict[str, types.Tool]:
        """The session's tools, listed once per session (a restart lists them again)."""
        if self.tools is None or self._inbox is None:
            listed = await self.run(group, _listed_tools)
            fresh = {tool.name: tool for tool in listed}
            if self.relay is not None and fresh != self.tools:
                self.relay.listings_changed()
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

    async def _actor(self, *, task_status: TaskStatus[MemoryObjectSendStream[None]]) -> None:
        send, receive = anyio.create_memory_object_stream[None](1)
        options = self.relay.options() if self.relay is not None else None
        started, tee, mine = False, None, None
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
                # what the calls ask of the server goes through it (tool calls over its pipes)
                tap = self.target.tap
                session = (
                    SdkSession(client)
                    if tap is None
                    else PipeSession(client, tap, self.target, lambda: self.tools)
                )
                self.session = mine = session
                tee = self.target.stderr  # this session's copy of the server's stderr
                if self.target.tap is not None:  # calls past the SDK, in this session's protocol
                    self.target.tap.version = session.protocol_version
                listening = anyio.CancelScope()
                if self.relay is not None:  # before any call: they may wait for the listen
                    self.relay.modern, self.relay.settled = None, anyio.Event()  # a new session
                    jobs.start_soon(self.relay.listen, session, listening)
                    jobs.start_soon(self.relay.resubscribe, session)
                task_status.started(send)
                started = True
                async with receive:
                    async for _ in receive:
                        pass  # nothing is sent: the inbox stands for the session until closed
                while self._calls.get(id(session)):  # its calls in flight finish, then it stops
                    await anyio.sleep(0.01)
                listening.cancel()
        except BundlectlError as exc:
            if not started:
                receive.close()
                raise  # the caller that started it says why
            # The calls in flight were answered; the gateway goes on.
            log_line(f"server {self.target.name!r} stopped: {exc.explained}")
        finally:
            if self.session is mine:  # (a restart's new session may have taken its place)
                self.session = None
            if self._inbox is send:  # ended on its own (the server went away): start afresh
                self._inbox = None
                self.tools = None
            send.close()
            self.target.close(wait=0, tee=tee)


def log_line(line: str) -> None:
    """The gateway's own log: stderr, which MCP clients keep as the server's log. A line may
    quote what a server said (an error, the tail of its stderr): each of its lines is shown
    through `output.visible` and says it is the gateway's."""
    for part in line.split("\n"):
        err(f"bundlectl serve: {visible(part)}")


async def _listed_tools(session: ServerSession) -> list[types.Tool]:
    return await session.tools()
