"""Code mode's runtime: `call_tool("server.tool", {...})` behind `bundlectl.client`, what
`bundlectl codegen`'s functions use (SPEC 9).

Through the gateway when `BUNDLECTL_GATEWAY_URL` is set (streamable HTTP, with
`BUNDLECTL_GATEWAY_TOKEN` as the bearer token), otherwise in this process through the same
pipeline as `bundlectl exec`: the policy of agent `$BUNDLECTL_AGENT` (or `default`), `ask`
confirmed on a terminal, arguments validated against the schema, the call audited
(`via: code`). A denied call raises `ToolDenied` with the reason; a tool error, `ToolFailed`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio

from bundlectl.calls import sequence
from bundlectl.calls.audit import AuditLog
from bundlectl.calls.call import client_capabilities, connect_and_call
from bundlectl.calls.calldata import CallOutcome, CallRequest, ToolCall
from bundlectl.calls.confirm import AnswerLater, run_to_end, terminal_confirmer
from bundlectl.calls.pipeline import Pipeline
from bundlectl.calls.sequence import Door
from bundlectl.codemode.outcomes import ToolDenied, ToolFailed
from bundlectl.config.models import ServerSpec
from bundlectl.config.project import load_project
from bundlectl.errors import BundlectlError, PolicyDenied, UsageError
from bundlectl.mcpio import runner
from bundlectl.mcpio.connect import connect
from bundlectl.mcpio.session import SdkSession, ToolResult
from bundlectl.mcpio.target import Target
from bundlectl.policy.patterns import gateway_name, parse_tool_name
from bundlectl.policy.rules import Decision, default_agent
from bundlectl.privacy.tokenize import Privacy
from bundlectl.resolve.resolved import resolve_project

_SESSION: dict[str, Any] = {}  # privacy: this process's token map (memory only)


def call_tool(
    name: str,
    arguments: dict[str, Any] | None = None,
    *,
    agent: str | None = None,
    config: Path | None = None,
) -> Any:
    """Call `server.tool`; the structured result when there is one, else the text."""
    arguments = dict(arguments or {})
    chosen = os.environ.get("BUNDLECTL_AGENT")
    if agent is not None and chosen and chosen != agent:  # code generated for another agent
        raise ToolDenied(
            f"this code was generated for agent {agent!r}, but BUNDLECTL_AGENT names "
            f"{chosen!r} (generate it for that agent: bundlectl codegen --agent {chosen}, "
            "or unset BUNDLECTL_AGENT)"
        )
    url = os.environ.get("BUNDLECTL_GATEWAY_URL")
    if url:
        result = _through_gateway(url, name, arguments, config)
    else:
        result = _in_process(name, arguments, agent or chosen, config)
    return _value(name, result)


def _value(name: str, result: ToolResult) -> Any:
    blocks = result.content
    texts = [block.get("text") if block.get("type") == "text" else None for block in blocks]
    text = "\n".join(t for t in texts if t is not None)
    if result.is_error:
        raise ToolFailed(f"{name}: {text or 'the tool reported an error'}")
    if result.structured_content is not None:
        return result.structured_content
    if all(t is not None for t in texts):
        return text
    return blocks


def _in_process(
    name: str, arguments: dict[str, Any], agent: str | None, config: Path | None
) -> Any:
    try:
        server, tool = parse_tool_name(name)
        resolution = resolve_project(load_project(config))
        privacy = Privacy.of(resolution.project.config)
        tokens = _tokenizer(privacy)
        restore = privacy is not None and tokens is not None
        restore = restore and privacy is not None and privacy.gets_real_values(server, tool)
        pipeline = Pipeline(resolution, AuditLog(resolution, via="code"), terminal_confirmer())
        # the conditions judge what the server receives: the real values behind tokens
        received = tokens.restore(arguments) if restore else None
        call = ToolCall(default_agent(agent), server, tool, arguments, received=received)
        target = pipeline.target(server, quiet=True, agents=[call.agent])
        door = _CodeDoor(pipeline, target, tokens if restore else None)
        ran = sequence.run(pipeline, door, call)  # its confirmations block: no event loop yet
        outcome = run_to_end(ran)
        assert not isinstance(outcome, AnswerLater)
    except PolicyDenied as exc:
        raise ToolDenied(exc.message + (f" ({exc.hint})" if exc.hint else "")) from None
    except BundlectlError as exc:
        raise ToolFailed(_shown(exc.message + (f" ({exc.hint})" if exc.hint else ""))) from None
    if outcome.error is not None:
        if isinstance(outcome.error, PolicyDenied):
            raise ToolDenied(outcome.error.message)
        # A server's or the validator's message may quote the values a detokenize tool got.
        raise ToolFailed(_shown(outcome.error.message))
    assert outcome.result is not None
    if tokens is None:
        return outcome.result
    return ToolResult(model=tokens.result(outcome.result.as_model()))


class _CodeDoor(Door[CallOutcome]):
    """Code mode's door in this process: confirmed on the terminal when there is one; a
    connection of its own for the call, in an event loop of its own."""

    def __init__(self, pipeline: Pipeline, target: Target, tokens: Any) -> None:
        self.target, self.tokens = target, tokens  # tokens: a detokenize tool's map
        self.ask = pipeline.confirm is not None  # a server's question asked on the terminal

    def request(self, pipeline: Pipeline, call: ToolCall, decision: Decision) -> CallRequest:
        request = super().request(pipeline, call, decision)
        request.timeout = float(self.target.spec.timeout)
        request.restore = self.tokens.restore if self.tokens is not None else None
        return request

    async def perform(self, request: CallRequest) -> CallOutcome:
        options = client_capabilities(self.target.root, ask=self.ask)

        async def go() -> CallOutcome:
            return await connect_and_call(
                self.target,
                request,
                child=None,
                connect_timeout=30.0,
                whole=None,
                show=lambda outcome: None,
                options=options,
            )

        try:
            return runner.run(go)
        finally:
            self.target.close()

    async def present(self, outcome: CallOutcome) -> CallOutcome:
        return outcome


def _shown(message: str) -> str:
    """A message for the agent's code: real values it was given turned back into tokens."""
    tokens = _SESSION.get("tokens")
    return tokens.conceal(message) if tokens is not None else message


# Accepts, for this process, that the token map lives beside the agent's own code.
IN_PROCESS_PRIVACY = "BUNDLECTL_PRIVACY_IN_PROCESS"


def _tokenizer(privacy: Any) -> Any:
    """This process's token map (one session for all the code's calls), or None.

    In this process the map (the real values) is readable by the agent's own code, so with
    `privacy:` set the gateway is the default: the in-process path is refused unless
    $BUNDLECTL_PRIVACY_IN_PROCESS=1 accepts that."""
    if privacy is None:
        return None
    if os.environ.get(IN_PROCESS_PRIVACY) != "1":
        raise UsageError(
            "this project tokenizes personal data (privacy:), and in this process the agent's "
            "own code could read the real values behind the tokens",
            hint="run `bundlectl serve --transport streamable-http` and set "
            "BUNDLECTL_GATEWAY_URL (and BUNDLECTL_GATEWAY_TOKEN), or set "
            f"{IN_PROCESS_PRIVACY}=1 to accept that",
        )
    if "tokens" not in _SESSION:
        _SESSION["tokens"] = privacy.session()
    return _SESSION["tokens"]


def _naming(config: Path | None) -> str:
    """The gateway's names (`gateway.names` of the project, when the code runs in one)."""
    try:
        return load_project(config).config.gateway.names
    except BundlectlError:
        return "prefixed"  # no project here: the gateway's default


def _through_gateway(
    url: str, name: str, arguments: dict[str, Any], config: Path | None
) -> ToolResult:
    server, tool = parse_tool_name(name)
    wire = gateway_name(server, tool, _naming(config))
    headers = {"Authorization": "Bearer ${BUNDLECTL_GATEWAY_TOKEN}"}
    if not os.environ.get("BUNDLECTL_GATEWAY_TOKEN"):
        headers = {}  # a gateway on loopback without tokens
    # The gateway is one more streamable-HTTP server: connected the way exec connects to one.
    spec = ServerSpec(transport="streamable-http", url=url, headers=headers, timeout=300)
    target = Target("gateway", spec, Path.cwd())

    async def go() -> ToolResult:
        async with connect(target, connect_timeout=30.0) as client:
            return await SdkSession(client).call(
                wire, arguments, timeout=float(spec.timeout), progress=None
            )

    try:
        result: ToolResult = anyio.run(go)
    except BundlectlError as exc:  # the gateway could not be reached or refused the token
        raise ToolFailed(exc.message + (f" ({exc.hint})" if exc.hint else "")) from None
    text = " ".join(result.texts())
    if result.is_error and text.startswith("unknown tool"):
        raise ToolDenied(f"{name}: {text}")  # the gateway says denied as unknown
    return result
