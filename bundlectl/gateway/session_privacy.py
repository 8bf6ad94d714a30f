"""Privacy at the gateway (`privacy:`): the settings in force, and the token maps (real values,
in memory only) of each client session or agent."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

from bundlectl.calls.pipeline import Pipeline
from bundlectl.errors import UsageError
from bundlectl.gateway.request_context import (
    MODERN,
    ConnectionKey,
    RequestContext,
    StdioCallContext,
    connection_of,
)
from bundlectl.privacy.tokenize import Privacy, Tokenizer
from bundlectl.privacy.tokens import SharedTokens, key_from
from bundlectl.resolve.resolved import Resolution
from bundlectl.state.redis import RedisStore


@dataclass
class SessionPrivacy:
    """The token maps of one gateway process: per client connection, held weakly so that they
    go with the session; per agent where no session outlives a request. Never chosen by
    anything a client sends."""

    pipeline: Pipeline  # the config in force, and the state store replicas share
    stateless: bool = False
    log: Callable[[str], None] = lambda line: None
    tokenizers: weakref.WeakKeyDictionary[ConnectionKey, dict[str, Tokenizer]] = field(
        default_factory=weakref.WeakKeyDictionary
    )
    agent_tokenizers: dict[str, Tokenizer] = field(default_factory=dict)
    _settings: tuple[Resolution, Privacy | None] | None = None  # (resolution, its Privacy)

    def settings(self) -> Privacy | None:
        """The privacy settings in force (built once per loaded config)."""
        resolution = self.pipeline.resolution
        if self._settings is None or self._settings[0] is not resolution:
            self._settings = (resolution, Privacy.of(resolution.project.config))
        return self._settings[1]

    def tokenizer(self, ctx: RequestContext | None, agent: str) -> Tokenizer | None:
        """The session's token map (in memory only), or None when nothing is tokenized.

        Over HTTP with 2025-11-25 sessions: the session's (its connection's), released with it.
        Where no session outlives a request — `--stateless`, the 2026-07-28 protocol — and
        over stdio (one client per process): the authenticated agent's. A header such as
        `mcp-session-id` never picks one."""
        privacy = self.settings()
        if privacy is None:
            return None
        if (
            self.stateless
            or ctx is None
            or isinstance(ctx, StdioCallContext)  # stdio: one client
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
