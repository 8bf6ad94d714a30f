"""One agent's view of the gateway (`AgentView`): the tools it is offered, and its calls, reads and
prompts, each through the pipeline every front door shares."""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio
import mcp_types as types
from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError

from bundlectl import telemetry
from bundlectl.calls import sequence
from bundlectl.calls.approval import ApprovalHeld, DeniedByApprover, OutOfBand
from bundlectl.calls.call import perform
from bundlectl.calls.calldata import CallOutcome, CallRequest, ToolCall
from bundlectl.calls.confirm import AfterCall, AnswerLater, Confirmation
from bundlectl.calls.limits import LimitReached
from bundlectl.calls.pipeline import Pipeline
from bundlectl.calls.sequence import Door
from bundlectl.config.models import ToolSpec
from bundlectl.config.settings import seconds
from bundlectl.errors import (
    BundlectlError,
    Declined,
    PolicyDenied,
    Unconfirmable,
)
from bundlectl.gateway.identity import Caller
from bundlectl.gateway.personal import SignInNeeded, public_base
from bundlectl.gateway.relayed import confirmed, protocol_error, relayed
from bundlectl.gateway.request_context import (
    RequestContext,
    StdioCallContext,
    error_result,
)
from bundlectl.gateway.search import DETAILS, declared_tool, described, listed_name
from bundlectl.gateway.server_content import ServerContent
from bundlectl.gateway.tasks import QUOTA_WAIT
from bundlectl.mcpio.requests import JsonObject
from bundlectl.mcpio.session import Progress, Rounds, ServerSession
from bundlectl.output import err
from bundlectl.policy.catalog import ToolRef, search
from bundlectl.policy.descriptions import WITHHELD, withheld, withheld_schema
from bundlectl.policy.rules import Decision

if TYPE_CHECKING:
    from bundlectl.config.models import ServerSpec
    from bundlectl.gateway.hub import Hub
    from bundlectl.gateway.tasks import TaskRun


@dataclass
class AgentView(ServerContent):
    """One agent's view of every resolved server, and the calls it makes through them (its
    resources and prompts: `ServerContent`)."""

    hub: Hub
    agent: str
    mode: str = "direct"  # direct | search
    ctx: RequestContext | None = None  # the request it answers (progress, questions, logs)
    # What binds a held call (`input_rounds.py`) when this request's client can answer a server's
    # question only by retrying (2026-07-28); None: it is asked directly, or cannot be.
    binding: dict[str, str] | None = None
    # A 2026-07-28 server's questions go to this request's client as they are (named by the
    # server), and its retry's answers back (`mcpio.session.Rounds`); `confirmed`: the retry
    # belongs to a call whose `ask` rule was confirmed (or approved) in an earlier round.
    rounds: Rounds | None = None
    confirmed: bool = False
    # The task this call runs as, for a client that declared the tasks extension (`tasks.py`):
    # held for a person as long as the approval request lasts, saying so in the task's status.
    task: TaskRun | None = None

    @property
    def listing(self) -> str:
        """Where the agent finds the names it may call."""
        return "search_tools" if self.mode == "search" else "tools/list"

    async def _offered(self, name: str, spec: ServerSpec) -> list[types.Tool]:
        """A server's tools: its declared definitions, or the live ones when it declares none or
        `pin_tools` holds (then a live tool that differs from the lock is withheld)."""
        pinned = self.pipeline.resolution.policy.set.pin_tools
        if spec.tools and not pinned:
            return [declared_tool(tool) for tool in spec.tools]
        try:
            downstream = await self.hub.on_behalf(name, self.agent, self._caller())
            live = (await downstream.live_tools(self.hub.group)).values()
        except BundlectlError:
            return []  # a server that cannot start offers nothing (its log line says why)
        self.hub.listings.learn(name, live)
        return [tool for tool in live if self.pipeline.unpinned(name, tool) is None]

    async def _catalog(self) -> list[tuple[str, types.Tool]]:
        """(server, tool) for every tool the agent may call (allow or ask)."""
        compiled = self.pipeline.resolution.policy.agent(self.agent)
        usable: list[tuple[str, types.Tool]] = []
        for name, merged in self.pipeline.resolution.merged.servers.items():
            if merged.spec.disabled or not compiled.may_reach(name):
                continue  # never started, connected to or sent a credential for this agent
            offered = await self._offered(name, merged.spec)
            usable.extend(
                (name, self._shown(name, t)) for t in compiled.usable(name, offered, listed_name)
            )
        return usable

    @property
    def _errors(self) -> set[str]:
        """The rules the project's `lint.severity` makes errors."""
        severity = self.pipeline.resolution.project.config.lint.severity
        return {rule for rule, level in severity.items() if level == "error"}

    def _shown(self, server: str, tool: types.Tool) -> types.Tool:
        """The tool as the agent's client sees it: a definition that fails an error-level rule
        of what tools tell the model (#60: text a person cannot see, a mixed-script name; and
        instructions to the model where `lint.severity` makes BCL603 an error) goes out with
        its description and its parameters' withheld — name, types and annotations kept, for
        the policy and the call — and the first time, audited and said."""
        why = withheld(tool.name, tool.description or "", tool.input_schema, self._errors)
        if why is None:
            return tool
        key = (server, tool.name, tool.description, json.dumps(tool.input_schema, sort_keys=True))
        if key not in self.hub.listings.withheld:
            self.hub.listings.withheld.add(key)
            self.pipeline.audit.withheld(self.agent, server, tool.name, why)
            err(f"warning: {server}.{tool.name}: description withheld from clients: {why}")
        return tool.model_copy(
            update={
                "description": WITHHELD.format(why=why),
                "input_schema": withheld_schema(tool.input_schema),
            }
        )

    async def list_tools(self) -> list[types.Tool]:
        """Direct mode: the usable tools, named `server__tool`, definitions passed through."""
        catalog = await self._catalog()
        tools = [
            tool.model_copy(update={"name": self.hub.listings.name_of(server, tool.name)})
            for server, tool in catalog
            if self.hub.listings.name_of(server, tool.name) not in self.hub.listings.ambiguous
        ]
        return sorted(tools, key=lambda t: t.name)

    async def call_in_search_mode(
        self, name: str, arguments: JsonObject, confirm: Confirmation | None
    ) -> types.CallToolResult | types.InputRequiredResult:
        """Search mode's two tools; any other name is unknown, as in direct mode."""
        if name == "search_tools":
            query, server = arguments.get("query", ""), arguments.get("server")
            detail, limit = arguments.get("detail", "summary"), arguments.get("limit", 20)
            if not isinstance(query, str) or not (server is None or isinstance(server, str)):
                return error_result("query and server are strings")
            if not isinstance(limit, int) or not isinstance(detail, str):
                return error_result("limit is an integer and detail one of name, summary, full")
            return await self.search(query, server, detail, limit)
        if name == "call_tool":
            target, inner = arguments.get("name"), arguments.get("arguments") or {}
            if not isinstance(target, str) or "." not in target or not isinstance(inner, dict):
                return error_result(
                    "call_tool takes name (server.tool, from search_tools) and arguments"
                )
            return await self.call_tool(target, inner, confirm)
        return error_result(f"unknown tool {name!r}; use search_tools, then call_tool")

    async def search(
        self, query: str, server: str | None, detail: str, limit: int
    ) -> types.CallToolResult:
        """Search mode's `search_tools`: the usable tools ranked as `bundlectl tools --search`
        ranks them, at the detail asked for."""

        if detail not in DETAILS:
            return error_result(f"detail must be one of {', '.join(DETAILS)}, not {detail!r}")
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
            item = described(ref.server, found[(ref.server, ref.tool)], detail)
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
            self.hub.listings.known()
            return (server, tool) if (server, tool) in self.hub.listings.pairs else None
        return self.hub.listings.tool_named(name)

    def _log_meta(self) -> JsonObject | None:
        """The call's `_meta` for the server: the log level the client wants (a 2026-07-28
        server sends log messages only to requests that ask; older ones ignore the key)."""
        floor = self.hub.subscriptions.log_floor(self.ctx) if self.ctx is not None else None
        return None if floor is None else {types.LOG_LEVEL_META_KEY: floor}

    def _progress(self) -> Progress | None:
        """The downstream server's progress, passed on to the client when it asked for it."""
        ctx = self.ctx
        if self.task is not None:
            return self.task.report  # (the task's status message)
        if (
            ctx is None
            or isinstance(ctx, StdioCallContext)
            or (ctx.meta or {}).get("progress_token") is None  # (0 is a token)
        ):
            return None  # (the express lane passes progress on itself)

        tokens = self.hub.privacy.tokenizer(ctx, self.agent)

        async def report(progress: float, total: float | None, message: str | None) -> None:
            if tokens is not None and message is not None:
                message = tokens.text(message)
            with contextlib.suppress(Exception):
                await ctx.session.report_progress(progress, total, message)

        return report

    async def call_tool(
        self, name: str, arguments: JsonObject, confirm: Confirmation | None = None
    ) -> types.CallToolResult | types.InputRequiredResult:
        """One call through the sequence, by `server__tool` (direct mode) or `server.tool`
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
            return error_result(self._not_started(name) or unknown)
        server, tool = found
        received = self._received(server, tool, arguments)
        call = ToolCall(
            self.agent,
            server,
            tool,
            arguments,
            received=received if received is not arguments else None,
            subject=self.subject(),
        )
        door = _GatewayDoor(self, name, unknown, confirm)
        ended = await sequence.run(self.pipeline, door, call)
        if door.sign_in is not None:
            return self._sign_in_first(door.sign_in)
        return ended.answer if isinstance(ended, AnswerLater) else ended

    def _sign_in_first(self, needed: SignInNeeded) -> types.CallToolResult:
        """A call whose caller has not signed in to its server yet (`auth.per_person`): a URL
        elicitation (`-32042`) with the link, for a client that declared URL-mode elicitation;
        else the link in the result the model reads."""
        personal = self.hub.personal
        request = getattr(self.ctx, "request", None)
        if personal is None or request is None:
            return error_result(needed.explained)
        base = public_base(self.hub.resolution, request.url.scheme, request.url.netloc)
        url = personal.link(needed, base)
        message = f"Sign in to {needed.server} to use its tools, then call the tool again."
        if self._elicits_urls():
            elicitation = types.ElicitRequestURLParams(
                message=message, url=url, elicitation_id=secrets.token_urlsafe(12)
            )
            raise UrlElicitationRequiredError([elicitation], message)
        return error_result(f"{message} Ask the user to open {url}")

    def _elicits_urls(self) -> bool:
        """Whether this client declared URL-mode elicitation (MCP 2025-11-25: in its
        handshake, or on 2026-07-28 in the request's own capabilities)."""
        session = getattr(self.ctx, "session", None)
        capabilities = getattr(session, "client_capabilities", None)
        elicitation = getattr(capabilities, "elicitation", None)
        return getattr(elicitation, "url", None) is not None

    def _refusal(self, name: str, decision: Decision, exc: PolicyDenied, unknown: str) -> str:
        """What the agent is told of a refused call, by why it was refused (already audited)."""
        if isinstance(exc, ApprovalHeld):  # the agent may try again once it is approved
            return exc.explained
        if isinstance(exc, DeniedByApprover):  # who denied it, and why
            return exc.message
        if isinstance(exc, Unconfirmable):
            return (
                f"{name} needs a person's confirmation ({decision.reason}), and this client "
                "cannot ask for it (no elicitation support); ask the user to run it with "
                "`bundlectl exec`"
            )
        if isinstance(exc, Declined):
            return f"the user did not confirm {name}; it was not called"
        if self._listed(decision):
            return _refused_arguments(name, decision, self._policy_of(decision))
        return unknown  # said as for no such tool

    def _held_for_approval(self) -> Confirmation | None:
        """With `policy.approvals` on and a progress token from the client: an `ask` no one
        can confirm here is held open for an approver for `approvals.hold`, with progress
        notifications; else None (the admission holds it and answers with its id at once).
        A task's call waits as long as the request lasts (`approvals.ttl`)."""
        settings = self.pipeline.approvals
        progress = self._progress()
        if settings is None or progress is None:
            return None
        if self.task is not None:
            task = self.task  # (a second past the expiry: the wait sees the request expire)
            hold, kept = seconds(settings.ttl) + 1.0, lambda: task.released
            return OutOfBand(wait=False, hold=hold, progress=progress, held=task.held, kept=kept)
        return OutOfBand(wait=False, hold=seconds(settings.hold), progress=progress)

    def subject(self) -> str | None:
        """The subject of the identity token this request came with (HTTP, `gateway.auth`)."""
        subject = self._scope().get("bundlectl.subject")
        return subject if isinstance(subject, str) else None

    def _caller(self) -> Caller | None:
        """The person whose verified identity token this request came with (HTTP)."""
        caller = self._scope().get("bundlectl.caller")
        return caller if isinstance(caller, Caller) else None

    def _scope(self) -> dict[str, object]:
        request = getattr(self.ctx, "request", None)
        scope = getattr(request, "scope", None)
        return scope if isinstance(scope, dict) else {}

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

    def _received(self, server: str, tool: str, arguments: JsonObject) -> JsonObject:
        """The arguments as `server.tool` will receive them: the real values behind the agent's
        privacy tokens for a `detokenize` tool (the conditions judge those, SPEC 10)."""
        tokens = self.hub.privacy.tokenizer(self.ctx, self.agent)
        if tokens is None or not self._real_values(server, tool):
            return arguments
        restored: JsonObject = tokens.restore(arguments)
        return restored

    def _real_values(self, server: str, tool: str) -> bool:
        """Whether `server.tool` gets the real values behind privacy tokens (`detokenize`)."""
        privacy = self.hub.privacy.settings()
        return privacy is not None and privacy.gets_real_values(server, tool)

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


def _same(text: str) -> str:
    return text


_Answer = types.CallToolResult | types.InputRequiredResult


class _GatewayDoor(Door[_Answer]):
    """The gateway's door for one call of the agent `view`: an `ask` confirmed by the person at
    the client (an elicitation), or held for an approver; the call made on the server's warm
    session (`Downstream`); what the model reads presented as a tool result, with the real
    values it may have been given turned back into its privacy tokens."""

    def __init__(
        self,
        view: AgentView,
        name: str,
        unknown: str,
        confirm: Confirmation | None,
    ) -> None:
        self.view, self.name, self.unknown, self.confirm = view, name, unknown, confirm
        self.tokens = view.hub.privacy.tokenizer(view.ctx, view.agent)  # None: nothing is tokenized
        self.raised = False  # a failure `Downstream.run` has already counted
        self.sign_in: SignInNeeded | None = None  # the caller must sign in to the server first

    def interactive(self, pipeline: Pipeline) -> bool:
        return True  # an `ask` no one can confirm here is refused as such, not as a deny

    def confirmer(self, pipeline: Pipeline, decision: Decision) -> Confirmation | None:
        if self.view.confirmed:  # a later round of a call confirmed in its first
            return confirmed
        if self.confirm is None or decision.by_approver:  # (not the client's elicitation, then)
            return self.view._held_for_approval()
        return self.confirm

    def request(self, pipeline: Pipeline, call: ToolCall, decision: Decision) -> CallRequest:
        view, tokens = self.view, self.tokens
        self.downstream = view.hub.downstream(call.server, view.agent, view._caller())
        request = super().request(pipeline, call, decision)
        request.timeout = float(self.downstream.target.spec.timeout)
        request.progress = view._progress()
        if tokens is not None and view._real_values(call.server, call.tool):
            request.restore = tokens.restore
        request.meta = view._log_meta()
        request.rounds = view.rounds
        return request

    async def perform(self, request: CallRequest) -> CallOutcome:
        view = self.view
        group = view.hub.group
        if view.task is not None:
            view.task.started()
        try:
            # for a server that takes calls on behalf of people, the caller's own session
            self.downstream = downstream = await view.hub.on_behalf(
                request.server, view.agent, view._caller()
            )
            if downstream.listed:
                tools = await downstream.live_tools(group)
            else:  # started (or its tools listed again) for this call
                with telemetry.step(
                    request.call.id, f"start {request.server}", server=request.server
                ):
                    tools = await downstream.live_tools(group)

            async def call(session: ServerSession) -> CallOutcome:
                return await perform(session, request, downstream.target, tools)

            done: CallOutcome = await downstream.run(group, call, view.ctx, self.tokens)
            return done
        except SignInNeeded as exc:  # the caller signs in first (`personal.py`)
            self.sign_in = exc
            self.raised = True
            raise
        except BundlectlError:
            self.raised = True
            raise

    async def finished(self, after: AfterCall) -> None:
        if not self.raised:
            await self.downstream.after(after, self.view.hub.group)

    async def present(self, outcome: CallOutcome) -> _Answer:
        tokens = self.tokens
        if outcome.error is not None:
            ctx = self.view.ctx
            refusal = protocol_error(ctx.protocol_version, outcome.error) if ctx else None
            if refusal is not None:  # (a JSON-RPC error, not a result)
                raise MCPError.from_error_data(refusal)
            # A server's or a validator's error may quote the real values behind tokens.
            message = outcome.error.explained
            if self.view.task is not None:
                self.view.task.failed(tokens.conceal(message) if tokens is not None else message)
            return error_result(tokens.conceal(message) if tokens is not None else message)
        assert outcome.result is not None
        if outcome.result.asks:
            assert self.view.binding is not None
            asked: types.InputRequiredResult = outcome.result.as_model()
            confirmed = outcome.request.decision.effect == "ask"  # (it was, to get here)
            return relayed(self.view.ctx, asked, self.view.binding, confirmed, self.tokens)
        result: types.CallToolResult = outcome.result.as_model()
        if tokens is None:
            return result
        try:
            tokenized: types.CallToolResult = tokens.result(result)
        except BundlectlError as exc:  # a shared token map out of reach: nothing leaves as is
            return error_result(exc.explained)
        return tokenized

    def refused(self, decision: Decision | None, error: BundlectlError) -> _Answer:
        if self.view.task is not None:
            self.view.task.refused(error)
        if (
            decision is None
            or isinstance(error, LimitReached)
            or not isinstance(error, PolicyDenied)
        ):
            return error_result(error.explained)  # arguments refused at the door; or try later
        return error_result(self.view._refusal(self.name, decision, error, self.unknown))

    async def waited(self, full: LimitReached) -> bool:
        """A task's call waits for its quota's window to reset (up to `tasks.QUOTA_WAIT`),
        saying so in the task's status; any other call is refused."""
        task = self.view.task
        left = None if full.resets is None else full.resets - time.time()
        if task is None or left is None or left > QUOTA_WAIT:
            return False
        task.waiting(f"waiting for a quota window: {full.message}")
        await anyio.sleep(max(left, 0.0) + 0.05)
        return True

    async def hold(self, job: Callable[[], Awaitable[_Answer]]) -> _Answer:
        view = self.view
        if view.binding is None or view.ctx is None:
            return await job()

        # its client answers its server's questions by retrying: a 2025-11-25 server's call is
        # held across them (a 2026-07-28 server's questions are the job's answer: `relayed`)
        return await view.hub.input_rounds.start(view.ctx, view.binding, job)
