"""What clients are shown of the servers' tools: each tool's gateway name (`gateway.names`), the
listings made for each agent (made afresh when anything they show may have changed), and the
tool definitions whose descriptions were withheld."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mcp.server.context import HandlerResult

from bundlectl.mcpio.session import ListedTool
from bundlectl.policy.patterns import gateway_name
from bundlectl.resolve.resolved import Resolution

if TYPE_CHECKING:
    from bundlectl.config.models import ToolSpec


@dataclass
class Listings:
    """Every known tool by gateway name — the declared catalogs, and the live tools of the
    servers listed so far — and the listings made of them."""

    resolution: Callable[[], Resolution]  # the config in force, as reloaded
    log: Callable[[str], None] = lambda line: None
    naming: str | None = None  # `serve --names`; None: the config's `gateway.names`
    ambiguous: set[str] = field(default_factory=set)  # names two tools claim
    pairs: set[tuple[str, str]] = field(default_factory=set)  # every known (server, tool)
    # tool definitions whose descriptions were withheld from clients (#60), audited once each
    withheld: set[tuple[str | None, ...]] = field(default_factory=set)
    # the listings made: (agent, protocol, generation) → the answer
    made: dict[tuple[str, str, int], HandlerResult] = field(default_factory=dict)
    generation: int = 0  # bumped whenever what an agent can list may have changed
    _names: dict[str, tuple[str, str]] | None = None  # gateway name → (server, tool)

    def changed(self) -> None:
        """What agents can list may differ from now on: forget the listings made so far."""
        self.generation += 1
        self.made.clear()

    def forget(self) -> None:
        """The tools themselves may differ (a server's list changed, a reload): learn their
        names again, and make the listings afresh."""
        self._names = None
        self.changed()

    def known(self) -> dict[str, tuple[str, str]]:
        """Every known tool by gateway name."""
        if self._names is None:
            self._names = {}
            self.ambiguous, self.pairs = set(), set()
            for server, merged in self.resolution().merged.servers.items():
                self.learn(server, merged.spec.tools)
        return self._names

    def name_of(self, server: str, tool: str) -> str:
        """The name a client sees for the server's tool or prompt (`gateway.names`)."""
        naming = self.naming or self.resolution().project.config.gateway.names
        return gateway_name(server, tool, naming)

    def learn(self, server: str, tools: Iterable[ToolSpec | ListedTool]) -> None:
        names = self.known()
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
        names = self.known()
        return None if name in self.ambiguous else names.get(name)
