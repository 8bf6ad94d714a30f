"""What every session of one gateway process shares: the policy in force (reloaded when the
config or lock changes) and the downstream servers."""

from __future__ import annotations

import contextlib
import json
import weakref
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio
import anyio.lowlevel
import mcp_types as types
from anyio.abc import TaskGroup
from mcp.server.context import HandlerResult
from mcp.server.subscriptions import InMemorySubscriptionBus
from mcp.shared.subscriptions import ResourceUpdated, ToolsListChanged

from bundlectl.calls.pipeline import Pipeline
from bundlectl.config.project import load_project
from bundlectl.errors import BundlectlError, ServerError, UsageError
from bundlectl.gateway.context import (
    LOG_LEVELS,
    MODERN,
    ConnectionKey,
    ExpressContext,
    RequestContext,
    connection_of,
)
from bundlectl.gateway.downstream import Downstream, FileStamp, file_stamp
from bundlectl.gateway.exchange import Exchanger, ExchangeRefused
from bundlectl.gateway.identity import Caller
from bundlectl.gateway.input_rounds import InputRounds
from bundlectl.gateway.personal import PersonalSignIns, SignInNeeded, person_key, signed_in
from bundlectl.gateway.relay import Relay
from bundlectl.mcpio.session import ListedTool, ServerSession
from bundlectl.mcpio.stdio import Tap
from bundlectl.policy.patterns import gateway_name
from bundlectl.privacy.tokenize import Privacy, Tokenizer
from bundlectl.privacy.tokens import SharedTokens, key_from
from bundlectl.resolve.resolved import Resolution, resolve_project
from bundlectl.state.redis import RedisStore

if TYPE_CHECKING:
    from bundlectl.config.models import ToolSpec

# Who a resource's watcher is (a legacy client's session, a listen stream) and how it is told:
# a legacy session's `send_resource_updated`, or None for a listen stream (told through `bus`).
WatcherKey = object
Notify = Callable[[str], Awaitable[None]] | None

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
    _names: dict[str, tuple[str, str]] | None = None  # gateway name → (server, tool)
    ambiguous: set[str] = field(default_factory=set)  # names two tools claim
    pairs: set[tuple[str, str]] = field(default_factory=set)  # every known (server, tool)
    # The client connections to tell when tools change, held weakly: a connection that ended
    # (a closed session, a stateless request) is forgotten with it.
    listeners: weakref.WeakKeyDictionary[ConnectionKey, None] = field(
        default_factory=weakref.WeakKeyDictionary
    )
    # Privacy token maps (real values, in memory only): per client connection, held weakly so
    # that they go with the session; per agent in stateless mode (no session outlives a
    # request). Never chosen by anything a client sends.
    tokenizers: weakref.WeakKeyDictionary[ConnectionKey, dict[str, Tokenizer]] = field(
        default_factory=weakref.WeakKeyDictionary
    )
    agent_tokenizers: dict[str, Tokenizer] = field(default_factory=dict)
    used_nonces: dict[str, float] = field(default_factory=dict)  # confirmations used → until
    # `logging/setLevel` of each client connection (held weakly, as the listeners).
    log_levels: weakref.WeakKeyDictionary[ConnectionKey, str] = field(
        default_factory=weakref.WeakKeyDictionary
    )
    stateless: bool = False
    one_client: bool = False  # stdio: a single client, so nothing can reach the wrong one
    naming: str | None = None  # `serve --names`; None: the config's `gateway.names`
    # 2026-07-28 clients' listen streams
    bus: InMemorySubscriptionBus = field(default_factory=InMemorySubscriptionBus)
    _privacy: tuple[Resolution, Privacy | None] | None = None  # (resolution, its Privacy)
    generation: int = 0  # bumped whenever what an agent can list may have changed
    exchanger: Exchanger = field(default_factory=Exchanger)  # tokens made for callers
    # people's own sign-ins to servers with `auth.per_person` (`serve` over HTTP)
    personal: PersonalSignIns | None = None
    # tool definitions whose descriptions were withheld from clients (#60), audited once each
    withheld: set[tuple[str | None, ...]] = field(default_factory=set)
    listings: dict[tuple[str, str, int], HandlerResult] = field(default_factory=dict)
    # Subscribed resources: (server, owner, uri) → who to tell, by key (a legacy client's
    # session: its notify function; a 2026-07-28 listen stream: None, told through `bus`).
    watchers: dict[tuple[str, str, str], dict[WatcherKey, Notify]] = field(default_factory=dict)
    _stamp: tuple[FileStamp, ...] | None = None
    _watched: tuple[str, ...] = ()  # the files `_stamp` stamps (the same ones across reloads)
    _reloading: anyio.Lock = field(default_factory=anyio.Lock)
    _released: set[WatcherKey] = field(default_factory=set)  # what `release_at_end` watches
    # 2026-07-28 clients' calls held while their server asks them something (`input_rounds.py`)
    input_rounds: InputRounds = field(init=False)

    def __post_init__(self) -> None:
        self.input_rounds = InputRounds(self.group)
        self._watched = tuple(map(str, self.pipeline.resolution.project.watched_files()))
        self._stamp = self._files()

    @property
    def resolution(self) -> Resolution:
        return self.pipeline.resolution

    def listening(self, ctx: RequestContext) -> None:
        """The client of request `ctx` is told when a server's tools change (a session's
        connection, held weakly; a stateless request has none to tell)."""
        if not self.stateless:
            self.listeners[connection_of(ctx)] = None

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
            relay = Relay(server, self, key[1], timeout=float(target.spec.timeout))
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
        self._names = None
        self.changed()
        await self.bus.publish(ToolsListChanged())  # clients listening (2026-07-28)
        await self.tell_listeners("send_tool_list_changed")  # older clients: a notification

    async def tell_listeners(self, send: str) -> None:
        """A list-changed notification (`send`: the connection's method) to every 2025-11-25
        client; each sees the change through its agent's policy when it lists again."""
        for connection in list(self.listeners):
            try:
                await getattr(connection, send)()
            except Exception:  # a client that went away
                self.listeners.pop(connection, None)

    async def watch(
        self, server: str, agent: str, uri: str, key: WatcherKey, notify: Notify
    ) -> bool:
        """Tell `notify` (None: the listen streams) when the server's resource `uri` changes
        (on `agent`'s process of it); False when the server cannot watch it (no subscriptions,
        unknown resource)."""

        place = (*self.slot(server, agent), uri)
        if place not in self.watchers:
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
            self.watchers[place] = {}
        self.watchers[place][key] = notify
        return True

    async def unwatch(self, uri: str, key: WatcherKey) -> None:
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
        if listening:
            await self.bus.publish(ResourceUpdated(uri=uri))

    def watched(self) -> Iterable[tuple[str, str, str]]:
        """Every resource a client watches: (server, owner, uri)."""
        return self.watchers.keys()

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

    def log_floor(self, ctx: RequestContext) -> str | None:
        """The lowest level of log message the client of request `ctx` wants, None for none: a
        2026-07-28 client says so on each request (`_meta`), an older one with
        `logging/setLevel`; one that never set a level gets every level, as before."""
        if str(getattr(ctx, "protocol_version", "")) >= MODERN:
            asked = (getattr(ctx, "meta", None) or {}).get(types.LOG_LEVEL_META_KEY)
            return asked if asked in LOG_LEVELS else None
        try:
            floor = self.log_levels.get(connection_of(ctx)) if not self.stateless else None
        except TypeError:  # a connection that cannot be weakly referenced: never set a level
            floor = None
        return floor or LOG_LEVELS[0]

    def wants_log(self, ctx: RequestContext, level: str) -> bool:
        """Whether the client of request `ctx` asked for log messages of `level`."""
        floor = self.log_floor(ctx)
        return floor is not None and LOG_LEVELS.index(level) >= LOG_LEVELS.index(floor)

    def privacy(self) -> Privacy | None:
        """The privacy settings in force (built once per loaded config)."""
        resolution = self.pipeline.resolution
        if self._privacy is None or self._privacy[0] is not resolution:
            self._privacy = (resolution, Privacy.of(resolution.project.config))
        return self._privacy[1]

    def tokenizer(self, ctx: RequestContext | None, agent: str) -> Tokenizer | None:
        """The session's token map (in memory only), or None when nothing is tokenized.

        Over HTTP with 2025-11-25 sessions: the session's (its connection's), released with it.
        Where no session outlives a request — `--stateless`, the 2026-07-28 protocol — and
        over stdio (one client per process): the authenticated agent's. A header such as
        `mcp-session-id` never picks one."""
        privacy = self.privacy()
        if privacy is None:
            return None
        if (
            self.stateless
            or ctx is None
            or isinstance(ctx, ExpressContext)  # stdio: one client
            or ctx.request is None  # not over HTTP
            or ctx.protocol_version >= MODERN
        ):
            if agent not in self.agent_tokenizers:
                shared = self._shared_tokens(agent, privacy.ttl)
                self.agent_tokenizers[agent] = privacy.session(shared)
            return self.agent_tokenizers[agent]
        maps = self.tokenizers.setdefault(connection_of(ctx), {})
        if agent not in maps:
            maps[agent] = privacy.session()
        return maps[agent]

    def _shared_tokens(self, agent: str, ttl: float) -> SharedTokens | None:
        """An agent's token map in the shared state store (`state.url`: Redis), so replicas
        resolve each other's tokens; None: the map stays in this process's memory."""
        project = self.pipeline.resolution.project
        state = project.config.state
        if state is None or state.url is None:
            return None
        try:
            secret = key_from()
        except UsageError as exc:  # checked when serve started: the config changed since
            self.log(f"privacy token maps stay in memory: {exc.message}")
            return None
        store = self.pipeline.store()
        assert isinstance(store, RedisStore)  # what state.url opens
        return SharedTokens(store, secret, f"{project.root}\x1f{agent}", ttl)

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

    def learn(self, server: str, tools: Iterable[ToolSpec | ListedTool]) -> None:
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

    def _files(self) -> tuple[FileStamp, ...]:
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
