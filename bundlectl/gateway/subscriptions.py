"""Who hears what the servers say outside a call's result: the client connections told when a
list changes, the resources clients watch (and how each watcher is told), and the log levels
clients asked for."""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

import mcp_types as types
from mcp.server.subscriptions import InMemorySubscriptionBus
from mcp.shared.subscriptions import ResourceUpdated

from bundlectl.gateway.request_context import (
    LOG_LEVELS,
    MODERN,
    ConnectionKey,
    RequestContext,
    connection_of,
)

# Who a resource's watcher is (a legacy client's session, a listen stream) and how it is told:
# a legacy session's `send_resource_updated`, or None for a listen stream (told through `bus`).
WatcherKey = object
Notify = Callable[[str], Awaitable[None]] | None


@dataclass
class Subscriptions:
    """The client connections and watchers of one gateway process (see the module)."""

    stateless: bool = False  # no session outlives a request: no connection to tell later
    # The client connections to tell when lists change, held weakly: a connection that ended
    # (a closed session, a stateless request) is forgotten with it.
    listeners: weakref.WeakKeyDictionary[ConnectionKey, None] = field(
        default_factory=weakref.WeakKeyDictionary
    )
    # 2026-07-28 clients' listen streams
    bus: InMemorySubscriptionBus = field(default_factory=InMemorySubscriptionBus)
    # Subscribed resources: (server, owner, uri) → who to tell, by key (a legacy client's
    # session: its notify function; a 2026-07-28 listen stream: None, told through `bus`).
    watchers: dict[tuple[str, str, str], dict[WatcherKey, Notify]] = field(default_factory=dict)
    # `logging/setLevel` of each client connection (held weakly, as the listeners).
    log_levels: weakref.WeakKeyDictionary[ConnectionKey, str] = field(
        default_factory=weakref.WeakKeyDictionary
    )

    def listening(self, ctx: RequestContext) -> None:
        """The client of request `ctx` is told when a list changes (a session's connection,
        held weakly; a stateless request has none to tell)."""
        if not self.stateless:
            self.listeners[connection_of(ctx)] = None

    async def tell_listeners(self, send: str) -> None:
        """A list-changed notification (`send`: the connection's method) to every 2025-11-25
        client; each sees the change through its agent's policy when it lists again."""
        for connection in list(self.listeners):
            try:
                await getattr(connection, send)()
            except Exception:  # a client that went away
                self.listeners.pop(connection, None)

    def watched(self) -> Iterable[tuple[str, str, str]]:
        """Every resource a client watches: (server, owner, uri)."""
        return self.watchers.keys()

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

    def set_level(self, ctx: RequestContext, level: str) -> None:
        """`logging/setLevel` of a 2025-11-25 session (a stateless request has no session)."""
        if not self.stateless:
            self.log_levels[connection_of(ctx)] = level

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
