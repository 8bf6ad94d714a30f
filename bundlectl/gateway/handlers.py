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
server whose connection broke is started again on the next call. An `AgentView` is one agent's view.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import warnings
import weakref
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, cast

import anyio
import anyio.lowlevel
import mcp_types as types
from mcp.server.context import CallNext, HandlerResult
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.request_state import RequestStateBoundary, RequestStateCodec, RequestStateSecurity
from mcp.server.subscriptions import ListenHandler
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

from bundlectl import __version__, metrics
from bundlectl.calls.calldata import ToolCall
from bundlectl.calls.confirm import Admitting, AnswerLater, Confirmation
from bundlectl.config.lockfile import digest_json
from bundlectl.gateway import tasks
from bundlectl.gateway.hub import Hub
from bundlectl.gateway.input_rounds import unseal
from bundlectl.gateway.relayed import retried
from bundlectl.gateway.request_context import (
    MODERN,
    SdkContext,
    answers_by_retry,
    as_protocol_error,
    connection_of,
    error_result,
    session_key,
)
from bundlectl.gateway.search import search_mode_tools
from bundlectl.gateway.view import AgentView
from bundlectl.mcpio.requests import TASKS, JsonObject
from bundlectl.mcpio.session import Rounds
from bundlectl.policy.rules import Decision

Paginated = types.PaginatedRequestParams | None


def mcp_server(
    hub: Hub,
    mode: str,
    agent_of: Callable[[SdkContext], str],
    *,
    codec: RequestStateCodec | None = None,
    seen: Callable[[SdkContext], None] | None = None,
) -> Server[dict[str, Any]]:
    """The gateway as an MCP server: `agent_of(ctx)` says whose view a request gets;
    `seen(ctx)` hears of every request it serves (the express lane learns the client's
    connection).

    `codec` seals the 2026-07-28 protocol's `requestState` (the pending confirmation of an
    `ask` rule) with keys every replica of a stateless deployment shares
    (`access.StateKeys`); None: a key of this process only.
    """

    async def view(ctx: SdkContext) -> AgentView:
        if seen is not None:
            seen(ctx)
        await hub.refresh()
        hub.subscriptions.listening(ctx)
        return AgentView(hub, agent_of(ctx), mode, ctx)

    async def on_list_tools(ctx: SdkContext, params: Paginated) -> types.ListToolsResult:
        if mode == "search":
            return types.ListToolsResult(tools=search_mode_tools())
        return types.ListToolsResult(tools=await (await view(ctx)).list_tools())

    calls = _Calls(hub, mode, view)
    hub.tasks.runner = calls.again  # (a held task's call, made again)
    if codec is not None:  # the replicas' key: any of them opens a task's sealed parts
        hub.tasks.keys = codec

    async def on_list_prompts(ctx: SdkContext, params: Paginated) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=await (await view(ctx)).list_prompts())

    async def on_get_prompt(
        ctx: SdkContext, params: types.GetPromptRequestParams
    ) -> types.GetPromptResult | types.InputRequiredResult:
        return await _prompt(ctx, await view(ctx), params)

    async def on_completion(
        ctx: SdkContext, params: types.CompleteRequestParams
    ) -> types.CompleteResult:
        """`completion/complete` for the prompts and templates of the servers in use."""
        context = params.context.arguments if params.context is not None else None
        argument = {"name": params.argument.name, "value": params.argument.value}
        with as_protocol_error():
            return await (await view(ctx)).complete(params.ref, argument, context)

    async def on_list_resources(ctx: SdkContext, params: Paginated) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=await (await view(ctx)).list_resources())

    async def on_list_resource_templates(
        ctx: SdkContext, params: Paginated
    ) -> types.ListResourceTemplatesResult:
        templates = await (await view(ctx)).list_resource_templates()
        return types.ListResourceTemplatesResult(resource_templates=templates)

    async def on_read_resource(
        ctx: SdkContext, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        with as_protocol_error():
            return await (await view(ctx)).read_resource(str(params.uri))

    async def on_subscribe_resource(
        ctx: SdkContext, params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        session = ctx.session
        with as_protocol_error():
            await (await view(ctx)).subscribe(
                str(params.uri), session_key(session), session.send_resource_updated, ctx
            )
        return types.EmptyResult()

    async def on_set_logging_level(
        ctx: SdkContext, params: types.SetLevelRequestParams
    ) -> types.EmptyResult:
        """The client's log level, applied by the gateway to what it forwards (downstream
        servers are shared by every client, so their own level is left as it is)."""
        hub.subscriptions.set_level(ctx, params.level)
        return types.EmptyResult()

    async def on_unsubscribe_resource(
        ctx: SdkContext, params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        await hub.unwatch(str(params.uri), session_key(ctx.session))
        return types.EmptyResult()

    # logging/setLevel is deprecated from 2026-07-28 (SEP-2577); 2025-11-25 clients use it.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        server = _Server(
            "bundlectl",
            version=__version__,
            instructions="The tools this agent may call, under bundlectl's policy.",
            on_list_tools=on_list_tools,
            on_call_tool=calls.on_call_tool,
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
            on_subscriptions_listen=_Listen(ListenHandler(hub.subscriptions.bus), hub, view),
        )
    calls.serve_tasks(server)
    security = (
        RequestStateSecurity(codec=codec) if codec is not None else RequestStateSecurity.ephemeral()
    )
    server.middleware.append(RequestStateBoundary(security, default_audience="bundlectl"))
    server.middleware.append(_ListingCache(hub, agent_of))
    # Declare the list changes the gateway sends (2025-11-25; on 2026-07-28 the SDK derives
    # them from `subscriptions/listen`).
    sent = not hub.stateless  # nothing reaches a stateless 2025-11-25 client unasked
    server.changes = NotificationOptions(
        prompts_changed=sent, resources_changed=sent, tools_changed=sent
    )
    if metrics.on() and not hub.stateless:  # a stateless request is no session
        server.middleware.append(_Sessions())
    return server


class _Calls:
    """`tools/call`, and the tasks extension's methods (SEP-2663; `tasks.py`) for 2026-07-28
    clients that declare it: a call held for a person or a slow server becomes a task."""

    def __init__(
        self, hub: Hub, mode: str, view: Callable[[SdkContext], Awaitable[AgentView]]
    ) -> None:
        self.hub, self.mode, self.view = hub, mode, view

    async def on_call_tool(
        self, ctx: SdkContext, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        gateway = await self.view(ctx)
        if not tasks.declared(ctx):
            return await self.call(gateway, ctx, params)
        arguments = dict(params.arguments or {})
        run = partial(self.call, gateway, ctx, params)
        answer = await self.hub.tasks.call(
            ctx, gateway.agent, gateway.subject(), params.name, arguments, run
        )
        # (a task is a mapping, `resultType: task`, which the SDK sends as it is)
        return cast(types.CallToolResult, answer)

    async def call(
        self,
        gateway: AgentView,
        ctx: SdkContext,
        params: types.CallToolRequestParams,
        task: tasks.TaskRun | None = None,
    ) -> types.CallToolResult | types.InputRequiredResult:
        """One `tools/call` by the agent's view `gateway` (`task`: the task it runs as, for a
        client that declared them)."""
        gateway.task = task
        arguments = dict(params.arguments or {})
        if answers_by_retry(ctx):
            resumed = await _held(gateway, params, arguments)
            if resumed is not None:
                return resumed
        confirm = _elicitation(ctx, gateway, params)
        if self.mode != "search":
            return await gateway.call_tool(params.name, arguments, confirm)
        return await gateway.call_in_search_mode(params.name, arguments, confirm)

    async def again(  # noqa: PLR0917 - the call, its task, and its next round's
        self,
        ctx: SdkContext,
        name: str,
        arguments: JsonObject,
        task: tasks.TaskRun,
        state: str | None,
        responses: JsonObject | None,
    ) -> types.CallToolResult | types.InputRequiredResult:
        """A task's call made by this process, by the request that asked for it: again
        (`Tasks.get`: the process that made it is gone), or its next round with the client's
        answers (`Tasks.update`: `state`, the round's requestState, as a retry carries it)."""
        params = types.CallToolRequestParams(
            name=name,
            arguments=arguments,
            request_state=state,
            input_responses=responses,
        )
        return await self.call(await self.view(ctx), ctx, params, task)

    def serve_tasks(self, server: Server[dict[str, Any]]) -> None:
        server.extensions[TASKS] = {}
        server.add_request_handler("tasks/get", types.GetTaskRequestParams, self.on_task_get)
        server.add_request_handler(
            "tasks/cancel", types.CancelTaskRequestParams, self.on_task_cancel
        )
        server.add_request_handler("tasks/update", tasks.UpdateParams, self.on_task_update)

    async def on_task_get(self, ctx: SdkContext, params: types.GetTaskRequestParams) -> JsonObject:
        return self.hub.tasks.get(ctx, await self._who(ctx), params.task_id)

    async def on_task_cancel(
        self, ctx: SdkContext, params: types.CancelTaskRequestParams
    ) -> JsonObject:
        return self.hub.tasks.cancel(ctx, await self._who(ctx), params.task_id)

    async def on_task_update(self, ctx: SdkContext, params: tasks.UpdateParams) -> JsonObject:
        who = await self._who(ctx)
        return self.hub.tasks.update(ctx, who, params.task_id, params.input_responses)

    async def _who(self, ctx: SdkContext) -> tasks.Who:
        """Whose tasks the request may see: its agent's, and its person's (a token's `sub`)."""
        gateway = await self.view(ctx)
        return gateway.agent, gateway.subject()


class _Server(Server[dict[str, Any]]):
    """The SDK's server, declaring the list changes the gateway sends."""

    changes = NotificationOptions()

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or self.changes, experimental_capabilities, extensions
        )


class _Listen:
    """`subscriptions/listen` (2026-07-28 clients): the SDK's handler, given only the resources
    the agent may read, each watched on its server for as long as the stream is open."""

    def __init__(
        self, inner: ListenHandler, hub: Hub, view: Callable[[SdkContext], Awaitable[AgentView]]
    ) -> None:
        self.inner, self.hub, self.view = inner, hub, view

    async def __call__(
        self, ctx: SdkContext, params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
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


class _Sessions:
    """Server middleware: `bundlectl_active_sessions` counts a client connection from its
    first request that reaches the SDK until it ends (a DELETE of its HTTP session, its idle
    timeout, a closed pipe: the SDK's `Connection` closes its exit stack then)."""

    def __init__(self) -> None:
        self.seen: weakref.WeakSet[object] = weakref.WeakSet()

    async def __call__(self, ctx: SdkContext, call_next: CallNext) -> HandlerResult:
        connection = connection_of(ctx)
        stack = getattr(connection, "exit_stack", None)
        if stack is not None and connection not in self.seen:
            self.seen.add(connection)
            metrics.session(+1)
            stack.callback(metrics.session, -1)
        return await call_next(ctx)


class _ListingCache:
    """Server middleware: an agent's `tools/list` answer, as the SDK put it on the wire, is kept
    until what the agent can list may have changed (a reload, a server's new tools), so a
    client that lists often (every turn, for some) pays for building, validating and
    serializing thousands of tool definitions once."""

    def __init__(self, hub: Hub, agent_of: Callable[[SdkContext], str]) -> None:
        self.hub, self.agent_of = hub, agent_of

    async def __call__(self, ctx: SdkContext, call_next: CallNext) -> HandlerResult:
        if ctx.method != "tools/list" or (ctx.params or {}).get("cursor"):
            return await call_next(ctx)
        await self.hub.refresh()
        key = (self.agent_of(ctx), ctx.protocol_version, self.hub.listings.generation)
        cached = self.hub.listings.made.get(key)
        if cached is None:
            generation = self.hub.listings.generation
            cached = await call_next(ctx)
            if self.hub.listings.generation == generation:  # nothing changed while it was built
                self.hub.listings.made[key] = cached
        return cached


async def _prompt(
    ctx: SdkContext, gateway: AgentView, params: types.GetPromptRequestParams
) -> types.GetPromptResult | types.InputRequiredResult:
    """`prompts/get`; a 2026-07-28 client may be asked what its server asks (`_bound`)."""
    if answers_by_retry(ctx):  # (bound as a prompt: a tool's state is not a prompt's)
        arguments, name = dict(params.arguments or {}), f"prompts/get {params.name}"
        _bound(gateway, name, arguments, params.request_state, params.input_responses)
    with as_protocol_error():
        return await gateway.get_prompt(params.name, params.arguments)


async def _held(
    gateway: AgentView, params: types.CallToolRequestParams, arguments: JsonObject
) -> types.CallToolResult | types.InputRequiredResult | None:
    """A 2026-07-28 client's call, whose server's questions are answered by retries
    (`_bound`); a retry with answers resumes a held call (its next question or its result).
    None: a new call, or the next round of a relayed one."""
    held = _bound(gateway, params.name, arguments, params.request_state, params.input_responses)
    if held is None:
        return None
    responses = dict(params.input_responses or {})
    answer = await gateway.hub.input_rounds.resume(held, gateway.binding or {}, responses)
    if answer is not None:
        return answer
    return error_result(
        f"{params.name}: the call these answers belong to is no longer waiting (it ended, or "
        "another gateway process holds it); call the tool again"
    )


def _bound(
    gateway: AgentView,
    name: str,
    arguments: JsonObject,
    state: str | None,
    responses: dict[str, Any] | None,
) -> JsonObject | None:
    """Binds a 2026-07-28 client's request (a tool call, a prompt) to its agent, name and
    arguments (`AgentView.binding`): its server's questions go to the client as asked
    (`relayed`), and a retry of such a round carries its answers (`AgentView.rounds`; refused
    with -32602 when they belong to another request or were given already). The unsealed
    state of a held call's retry (`input_rounds`), else None."""
    binding = {"agent": gateway.agent, "tool": name, "arguments": digest_json(arguments)}
    # Answers sent with a first request (no state of ours) are the client's to give: the server
    # takes or ignores them, as from the client itself.
    gateway.binding, gateway.rounds = binding, Rounds(dict(responses) if responses else None)
    held = unseal(state)
    if held is None or "relay" not in held:
        return held
    retry = retried(gateway.hub.accepted, binding, held, state or "", dict(responses or {}))
    if isinstance(retry, str):
        raise MCPError(types.INVALID_PARAMS, retry)
    gateway.rounds, gateway.confirmed = retry
    return None


_NO_FIELDS: JsonObject = {"type": "object", "properties": {}}
# Over stdio the client is the user's own, on this machine: its user may answer "always allow"
# (a rule in bundlectl.local.yaml, as `a` at exec's question). Never over HTTP, where the
# client is one of many and the file is the gateway host's.
_ALWAYS: JsonObject = {
    "type": "object",
    "properties": {
        "always": {
            "type": "boolean",
            "title": "Always allow",
            "description": "Allow this tool without asking again, on this machine "
            "(kept in bundlectl.local.yaml, never in the reviewed bundlectl.yaml)",
            "default": False,
        }
    },
}


def _accepted(answer: object, pipeline: Admitting, decision: Decision, gateway: AgentView) -> bool:
    """Whether the client's user accepted; an accepted "always" keeps the local rule."""
    if not (isinstance(answer, types.ElicitResult) and answer.action == "accept"):
        return False
    if gateway.hub.one_client and (answer.content or {}).get("always") is True:
        pipeline.always_allow(decision)
    return True


def _elicitation(
    ctx: SdkContext, gateway: AgentView, params: types.CallToolRequestParams
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

            async def answered(pipeline: Admitting, decision: Decision, call: ToolCall) -> bool:
                return _accepted(reply, pipeline, decision, gateway)

            return answered
    if not ctx.session.can_send_request and ctx.protocol_version < MODERN:
        return None  # a stateless HTTP session on the old protocol: no way back to the client

    async def confirm(
        pipeline: Admitting, decision: Decision, call: ToolCall
    ) -> bool | AnswerLater:
        downstream = gateway.hub.servers.get(gateway.hub.slot(decision.server, gateway.agent))
        live = (downstream.tools if downstream is not None else None) or {}
        schema = getattr(live.get(decision.tool), "input_schema", None)
        question = pipeline.shown.question(decision, call.shown, schema)
        question += "\nAllow it?"
        fields = _ALWAYS if gateway.hub.one_client else _NO_FIELDS
        if ctx.session.can_send_request:
            answer = await ctx.session.elicit_form(
                question, fields, related_request_id=ctx.request_id
            )
            return _accepted(answer, pipeline, decision, gateway)
        request = types.ElicitRequest(
            params=types.ElicitRequestFormParams(message=question, requested_schema=fields)
        )
        bound = {"agent": gateway.agent, "tool": params.name, "arguments": digest()}
        state = json.dumps({**bound, "nonce": secrets.token_hex(12)})
        return AnswerLater(
            types.InputRequiredResult(input_requests={"confirm": request}, request_state=state)
        )

    return confirm
