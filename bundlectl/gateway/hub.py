"""What every session of one gateway process shares: the policy in force (reloaded when the
config or lock changes) and the downstream servers."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio
import anyio.lowlevel
from anyio.abc import TaskGroup
from mcp.shared.subscriptions import ToolsListChanged

from bundlectl.calls.pipeline import Pipeline
from bundlectl.config.project import load_project
from bundlectl.config.settings import seconds
from bundlectl.errors import BundlectlError, ServerError
from bundlectl.gateway.downstream import Downstream, FileStamp, file_stamp, file_stamps
from bundlectl.gateway.exchange import Exchanger, ExchangeRefused
from bundlectl.gateway.identity import Caller
from bundlectl.gateway.input_rounds import InputRounds
from bundlectl.gateway.listings import Listings
from bundlectl.gateway.personal import PersonalSignIns, SignInNeeded, person_key, signed_in
from bundlectl.gateway.request_context import (
    ConnectionKey,
)
from bundlectl.gateway.server_messages import Relay
from bundlectl.gateway.session_privacy import SessionPrivacy
from bundlectl.gateway.subscriptions import Notify, Subscriptions, WatcherKey
from bundlectl.gateway.tasks import Tasks
from bundlectl.mcpio.session import ServerSession
from bundlectl.mcpio.stdio import Tap
from bundlectl.resolve.resolved import Resolution, resolve_project

if TYPE_CHECKING:
    pass

NONCE_MEMORY = 3600.0  # seconds a used confirmation is remembered (longer than the seal's TTL)


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
    vet: Callable[[Resolution], None] | None = None
    # The downstream servers by (server, owner): the agent whose process it is, "" when shared.
    servers: dict[tuple[str, str], Downstream] = field(default_factory=dict)
    used_nonces: dict[str, float] = field(default_factory=dict)  # confirmations used → until
    stateless: bool = False
    one_client: bool = False  # stdio: a single client, so nothing can reach the wrong one
    naming: str | None = None  # `serve --names`; None: the config's `gateway.names`
    exchanger: Exchanger = field(default_factory=Exchanger)  # tokens made for callers
    # people's own sign-ins to servers with `auth.per_person` (`serve` over HTTP)
    personal: PersonalSignIns | None = None
    _stamp: tuple[FileStamp, ...] = ()
    _watched: tuple[str, ...] = ()  # the files `_stamp` stamps (the same ones across reloads)
    _reloading: anyio.Lock = field(default_factory=anyio.Lock)
    _released: set[WatcherKey] = field(default_factory=set)  # what `release_at_end` watches
    # What clients are shown of the tools: gateway names, listings made, descriptions withheld
    listings: Listings = field(init=False)
    # Who hears what servers say outside a call: list changes, watched resources, log levels
    subscriptions: Subscriptions = field(init=False)
    privacy: SessionPrivacy = field(init=False)  # `privacy:` in force, and the token maps
    # 2026-07-28 clients' calls held while their server asks them something (`input_rounds.py`)
    input_rounds: InputRounds = field(init=False)
    tasks: Tasks = field(init=False)  # calls held for a person or a slow server (`tasks.py`)

    def __post_init__(self) -> None:
        self.listings = Listings(lambda: self.pipeline.resolution, self.log, self.naming)
        self.subscriptions = Subscriptions(self.stateless)
        self.privacy = SessionPrivacy(self.pipeline, self.stateless, self.log)
        self.input_rounds = InputRounds(self.group)
        self.tasks = Tasks(self.group, self.pipeline.store, self._held_for)
        self._watched = tuple(map(str, self.pipeline.resolution.project.watched_files()))
        self._stamp = tuple(map(file_stamp, self._watched))

    def _held_for(self) -> float:
        """How long a call may wait for an approver (`approvals.ttl`; 0: approvals are off)."""
        approvals = self.pipeline.approvals
        return seconds(approvals.ttl) if approvals is not None else 0.0

    @property
    def resolution(self) -> Resolution:
        return self.pipeline.resolution

    def slot(self, server: str, agent: str, caller: Caller | None = None) -> tuple[str, str]:
        """Which process or session of `server` serves `agent`: its own for a stdio server, so
        nothing the server sends outside a call (MCP over stdio says not whose it is) can reach
        another agent; one for every agent over HTTP or SSE and with `share: true`; one per
        person for a server that takes calls on behalf of people (`auth.exchange`)."""
        merged = self.pipeline.resolution.merged.servers.get(server)
        spec = merged.spec if merged is not None else None
        if (
            spec is not None
            and spec.auth is not None
            and (spec.auth.exchange is not None or spec.auth.per_person)
        ):
            return (server, f"{caller.issuer} {caller.subject}" if caller is not None else "")
        shared = spec is None or spec.transport != "stdio" or spec.share
        return (server, "" if shared else agent)

    async def on_behalf(self, server: str, agent: str, caller: Caller | None) -> Downstream:
        """`agent`'s downstream of `server` for the person `caller`: for a server with
        `auth.exchange`, a session of that person's, carrying a token exchanged for them (kept
        until it expires, then the session starts afresh with a new one); for any other server,
        `downstream`."""
        merged = self.pipeline.resolution.merged.servers.get(server)
        auth = merged.spec.auth if merged is not None else None
        if auth is not None and auth.per_person:
            return self._signed_in(server, agent, caller)
        if auth is None or auth.exchange is None:
            return self.downstream(server, agent)
        if caller is None:
            raise ExchangeRefused(
                f"server {server!r} takes calls only on behalf of a person, and this request "
                "came with no verified identity token (a static agent token, or stdio)",
                hint="call it with a token of one of gateway.auth.issuers",
            )
        token = await self.exchanger.token(server, auth, caller)
        downstream = self.downstream(server, agent, caller)
        if downstream.target.bearer != token:
            if downstream.target.bearer is not None:
                await downstream.stop()  # its token expired: a session with the new one
            downstream.target.bearer = token
        return downstream

    def _signed_in(self, server: str, agent: str, caller: Caller | None) -> Downstream:
        """A session of the person `caller` with a server they sign in to themselves
        (`auth.per_person`, `personal.py`); SignInNeeded when they have not yet."""
        if caller is None:
            raise ServerError(
                f"server {server!r} takes calls only from a person signed in to it, and this "
                "request came with no verified identity token (a static agent token, or stdio)",
                hint="call it with a token of one of gateway.auth.issuers",
            )
        downstream = self.downstream(server, agent, caller)
        downstream.target.person = person_key(caller)
        if not signed_in(downstream.target):
            raise SignInNeeded(server, caller)
        return downstream

    def downstream(self, server: str, agent: str, caller: Caller | None = None) -> Downstream:
        """`agent`'s downstream of `server` (see `slot`), made on first use."""
        key = self.slot(server, agent, caller)
        if key not in self.servers:
            # its own agent's process (`slot`): that agent's rules say where it may write
            agents = [agent] if key[1] == agent else None
            target = self.pipeline.target(server, quiet=self.quiet, agents=agents)
            target.with_parent = True  # no server outlives a gateway that was killed
            relay = Relay(
                server,
                key[1],
                self.subscriptions,
                self.input_rounds,
                tools_changed=self.tools_changed,
                listings_changed=self.listings.changed,
                one_client=self.one_client,
                timeout=float(target.spec.timeout),
            )
            downstream = Downstream(target, relay)
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
        self.listings.forget()
        told = self.subscriptions
        await told.bus.publish(ToolsListChanged())  # clients listening (2026-07-28)
        await told.tell_listeners("send_tool_list_changed")  # older clients: a notification

    async def watch(
        self, server: str, agent: str, uri: str, key: WatcherKey, notify: Notify
    ) -> bool:
        """Tell `notify` (None: the listen streams) when the server's resource `uri` changes
        (on `agent`'s process of it); False when the server cannot watch it (no subscriptions,
        unknown resource)."""

        place = (*self.slot(server, agent), uri)
        if place not in self.subscriptions.watchers:
            downstream = self.downstream(server, agent)
            relay = downstream.relay
            assert relay is not None

            async def subscribe(session: ServerSession) -> bool:
                with anyio.move_on_after(5):
                    await relay.settled.wait()  # the listen stream tried: which protocol
                if relay.modern:
                    relay.watched.add(uri)
                    relay.rewatch()
                    with anyio.move_on_after(5):  # honoured once the server listens for it
                        await relay.opened.wait()
                    return True
                return await session.subscribe(uri)

            try:
                if not await downstream.run(self.group, subscribe):
                    return False
            except BundlectlError:
                return False
            self.subscriptions.watchers[place] = {}
        self.subscriptions.watchers[place][key] = notify
        return True

    async def unwatch(self, uri: str, key: WatcherKey) -> None:
        """`key` no longer wants to hear about `uri`; the last one out unsubscribes."""
        for place in [place for place in self.subscriptions.watchers if place[2] == uri]:
            self.subscriptions.watchers[place].pop(key, None)
            if self.subscriptions.watchers[place]:
                continue
            del self.subscriptions.watchers[place]
            downstream = self.servers.get(place[:2])
            relay = downstream.relay if downstream is not None else None
            if downstream is None or relay is None:
                continue
            if relay.modern:
                relay.watched.discard(uri)
                relay.rewatch()
                continue

            async def unsubscribe(session: ServerSession) -> None:
                await session.unsubscribe(uri)

            with contextlib.suppress(BundlectlError):
                await downstream.run(self.group, unsubscribe)

    def release_at_end(self, connection: ConnectionKey, key: WatcherKey) -> None:
        """When the client `connection` ends — a DELETE of its HTTP session, its idle timeout,
        a closed pipe — what it subscribed to is unsubscribed (the last one out unsubscribes
        downstream), as if it had unsubscribed from each."""
        if key in self._released:
            return
        self._released.add(key)

        async def release() -> None:
            self._released.discard(key)
            watchers = self.subscriptions.watchers
            for uri in {uri for (_, _, uri), keys in watchers.items() if key in keys}:
                await self.unwatch(uri, key)

        stack = getattr(connection, "exit_stack", None)  # the SDK's `Connection` has one
        if stack is not None:
            stack.push_async_callback(release)

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

    def _files(self) -> tuple[FileStamp, ...]:
        return file_stamps(self._watched, self._stamp)

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
            self.listings.forget()
            for key, downstream in list(self.servers.items()):
                now = fresh.merged.servers.get(key[0])
                if now is None or now.spec != downstream.target.spec:
                    del self.servers[key]
                    await downstream.stop()
            self.log(f"reloaded {old.project.config_path.name}: policy {fresh.lock.policy_digest}")
