"""What a downstream server sends towards the client during a call (progress, logs,
elicitation and sampling requests, list changes), routed to the client of that call."""

from __future__ import annotations

import contextlib
import itertools
import warnings
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal, TypeVar

import anyio
import anyio.lowlevel
import mcp_types as types
from mcp.client.subscriptions import ListenNotSupportedError
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp.shared.subscriptions import PromptsListChanged, ResourceUpdated
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from bundlectl.errors import (
    Interrupted,
)
from bundlectl.gateway.relayed import missing
from bundlectl.gateway.request_context import RequestContext, owner_of
from bundlectl.mcpio.session import ServerSession

if TYPE_CHECKING:
    from mcp.client.session import ClientRequestContext, IncomingMessage

    from bundlectl.gateway.input_rounds import InputRounds
    from bundlectl.gateway.subscriptions import Subscriptions
    from bundlectl.privacy.tokenize import Tokenizer

T = TypeVar("T")
Answer = TypeVar("Answer", types.ElicitResult, types.CreateMessageResult)


class CallCancelled(Interrupted):
    """The client cancelled the call (`notifications/cancelled`); the server was told so too."""


Job = Callable[[ServerSession], Awaitable[T]]  # work on a server's session


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
    (`AgentView._progress`)."""

    def __init__(
        self,
        server: str,
        owner: str,
        subscriptions: Subscriptions,
        rounds: InputRounds,
        *,
        tools_changed: Callable[[str], Awaitable[None]],
        listings_changed: Callable[[], None],
        one_client: bool = False,
        timeout: float = 60.0,
    ) -> None:
        self.server = server
        self.owner = owner  # the agent whose process of the server this is ("": shared)
        self.subscriptions = subscriptions  # who hears what the server says outside a call
        self.rounds = rounds  # where a 2026-07-28 client's call waits while it is asked
        self.tools_changed = tools_changed  # the server said its tools changed
        self.listings_changed = listings_changed  # its live tools differ from those listed
        self.one_client = one_client  # stdio: one client, whose everything the server says is
        # How long a client has to answer a question held for its retry: a second less than
        # the server's `timeout` (at most a fifth less), so that a server whose question went
        # unanswered (as dismissed) can still answer the call in time.
        self.timeout = max(timeout - 1.0, timeout * 0.8)
        self.inflight: dict[int, RequestContext] = {}  # the request of each call in flight
        self.tokens: dict[int, Tokenizer | None] = {}  # the token map of each call in flight
        self.last: RequestContext | None = None  # the latest call's (a gateway with one client)
        self.last_tokens: Tokenizer | None = None
        self._keys = itertools.count(1)
        # Resources clients subscribed to; on a 2026-07-28 server they ride on the listen stream.
        self.watched: set[str] = set()
        self.modern: bool | None = None  # the session's protocol, once the listen was tried
        self.settled = anyio.Event()  # set once `modern` is known for the current session
        self._listening: anyio.CancelScope | None = None
        self.opened = anyio.Event()  # the listen stream is open with the `watched` resources

    def enter(self, ctx: RequestContext, tokens: Tokenizer | None = None) -> int:
        """A call of the client request `ctx` is in flight on the server (`tokens`: that
        client's privacy token map, for what the server says meanwhile); `leave` ends it."""
        key = next(self._keys)
        self.inflight[key] = ctx
        self.tokens[key] = tokens
        if self.one_client:
            self.last, self.last_tokens = ctx, tokens
        return key

    def leave(self, key: int) -> None:
        self.inflight.pop(key, None)
        self.tokens.pop(key, None)

    def tokens_of(self, ctx: RequestContext) -> Tokenizer | None:
        """The token map of the call in flight for `ctx` (None: nothing is tokenized)."""
        for key, known in self.inflight.items():
            if known is ctx:
                return self.tokens.get(key)
        return self.last_tokens if ctx is self.last else None

    def current(self) -> tuple[RequestContext | None, str | None]:
        """The client request a server's message belongs to, or None and why not."""
        contexts = list(self.inflight.values())
        if self.one_client and (contexts or self.last is not None):
            # stdio: one client, whose calls may be on the express lane and the SDK path at
            # once; whatever the server says, during a call or between calls, is that client's.
            return (contexts[-1] if contexts else self.last), None
        if not contexts:
            return None, f"no client's call is in flight on server {self.server!r}"
        if len({owner_of(ctx) for ctx in contexts}) > 1:
            return None, (
                f"calls of several clients are in flight on server {self.server!r} at once "
                "(its concurrency is above 1), and MCP does not say whose call this is; set "
                f"servers.{self.server}.concurrency: 1 to let it ask"
            )
        return contexts[-1], None

    def options(self) -> dict[str, object]:
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

    async def _ask(
        self,
        capability: Literal["elicitation", "sampling"],
        request: types.ElicitRequest | types.CreateMessageRequest,
        answer: type[Answer],
        context: ClientRequestContext,
    ) -> object:
        """A server's request to the client of the call it belongs to: sent on the client's
        session (2025-11-25), or parked for a 2026-07-28 client to answer by retrying
        (`input_rounds.py`). What the client answered, an error, or None: no answer in time."""
        ctx, why = self.current()
        if ctx is None:
            return self._refuse(capability, why)
        declared = ctx.session.client_capabilities
        if declared is None or getattr(declared, capability) is None:
            # The server needs what the client did not declare: the client's request is refused
            # as such (-32021; `relayed.protocol_error`), not as if the tool had failed.
            return missing(capability)
        if ctx.session.can_send_request:
            # On the stream of the call it belongs to (the transport's rule for a request
            # related to a client's request): a stateful client need not have opened its
            # standalone stream, and one that has not yet would never see it.
            related = ServerMessageMetadata(related_request_id=ctx.request_id)
            return await ctx.session.send_request(request, answer, metadata=related)
        rounds = self.rounds
        if not rounds.holds(ctx):
            return self._refuse(
                capability,
                "the client's request came over stateless HTTP on the 2025-11-25 protocol, "
                "which has no way to send a request back to the client during a call; serve "
                "without --stateless, or use a client on the 2026-07-28 protocol",
            )
        # A 2026-07-28 server's input request keeps the name it gave it (the SDK's client hands
        # it on as the request id); a 2025-11-25 server's request is named by the gateway.
        modern = context.session.protocol_version in MODERN_PROTOCOL_VERSIONS
        name = str(context.request_id) if modern else None
        return await rounds.ask(ctx, request, self.timeout, name)

    async def elicit(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        request = types.ElicitRequest(params=params)
        reply = await self._ask("elicitation", request, types.ElicitResult, context)
        if reply is None:  # nobody answered in time: as if the user dismissed it
            return types.ElicitResult(action="cancel")
        if isinstance(reply, types.ElicitResult | types.ErrorData):
            return reply
        return self._refuse("elicitation", "the client's answer is not an elicitation result")

    async def sample(
        self, context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult | types.CreateMessageResultWithTools | types.ErrorData:
        request = types.CreateMessageRequest(params=params)
        reply = await self._ask("sampling", request, types.CreateMessageResult, context)
        if reply is None:
            why = f"the client did not answer within {self.timeout:g} s"
            return self._refuse("sampling", why)
        sampled = types.CreateMessageResult | types.CreateMessageResultWithTools | types.ErrorData
        if isinstance(reply, sampled):
            return reply
        return self._refuse("sampling", "the client's answer is not a sampling result")

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        ctx, _ = self.current()
        if ctx is None or not self.subscriptions.wants_log(ctx, params.level):
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

    async def message(self, message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            await self.tools_changed(self.server)
        elif isinstance(message, types.PromptListChangedNotification):
            await self.prompts_changed()
        elif isinstance(message, types.ResourceListChangedNotification):
            await self.subscriptions.tell_listeners("send_resource_list_changed")
        elif isinstance(message, types.ResourceUpdatedNotification) and not self.modern:
            uri = str(message.params.uri)
            await self.subscriptions.resource_updated(self.server, self.owner, uri)

    async def prompts_changed(self) -> None:
        """The server's prompts changed: every client is told (each lists them again through
        its agent's view): a listen stream (2026-07-28), or a notification."""
        await self.subscriptions.bus.publish(PromptsListChanged())
        await self.subscriptions.tell_listeners("send_prompt_list_changed")

    async def listen(self, session: ServerSession, scope: anyio.CancelScope) -> None:
        """On the 2026-07-28 protocol a server's changes come only to a client that listens for
        them (`subscriptions/listen`): its tools and prompts, and the resources clients
        subscribed to (the stream is opened again when that set changes). Older servers send
        list changes unasked and take `resources/subscribe` requests (`Hub.watch`)."""

        quiet = (MCPError, RuntimeError, TimeoutError)
        with scope:
            try:
                while True:
                    self._listening = anyio.CancelScope()
                    with self._listening, contextlib.suppress(*quiet):
                        async with session.listen(
                            tools=True, prompts=True, resources=sorted(self.watched)
                        ) as events:
                            self.modern = True
                            self.settled.set()
                            self.opened.set()
                            async for event in events:
                                if isinstance(event, ResourceUpdated):
                                    await self.subscriptions.resource_updated(
                                        self.server, self.owner, event.uri
                                    )
                                elif isinstance(event, PromptsListChanged):
                                    await self.prompts_changed()
                                else:
                                    await self.tools_changed(self.server)
                            return  # the server ended the stream
                    if not self._listening.cancel_called:
                        return
            except ListenNotSupportedError:
                self.modern = False
            finally:
                self.settled.set()

    async def resubscribe(self, session: ServerSession) -> None:
        """A new session (a start after a crash, a restart after a reload): subscribe again to
        the resources clients watch here. A 2025-11-25 server forgot them with its session; a
        2026-07-28 one is told on the listen stream, which opens with `watched`."""

        with anyio.move_on_after(5):
            await self.settled.wait()
        if self.modern:
            return
        for server, owner, uri in list(self.subscriptions.watched()):
            if (server, owner) == (self.server, self.owner):
                await session.subscribe(uri)

    def rewatch(self) -> None:
        """The subscribed resources changed: open the listen stream again with them (`opened`
        is set once it is open)."""
        if self._listening is not None:
            self.opened = anyio.Event()
            self._listening.cancel()
