"""The conformance downstream's tools that ask the client something (`conformance.py` serves
them): each asks what the suite's scenario of its name checks, by the 2026-07-28 protocol's
input-required rounds (SEP-2322) — or, to a 2025-11-25 client, by a request sent back on the
connection during the call.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

MODERN = "2026-07-28"


def text(value: str) -> types.TextContent:
    return types.TextContent(type="text", text=value)


async def ask(ctx: ServerRequestContext, params: types.CallToolRequestParams, request: Any) -> Any:
    """A question to the client: a request sent back on the connection (2025-11-25), or on the
    2026-07-28 protocol an InputRequiredResult, answered when the client calls again."""
    if ctx.protocol_version < MODERN:
        if isinstance(request, types.ElicitRequest):
            form = request.params
            return await ctx.session.elicit(
                form.message, form.requested_schema, related_request_id=ctx.request_id
            )
        sampling = request.params
        return await ctx.session.create_message(
            sampling.messages, max_tokens=sampling.max_tokens, related_request_id=ctx.request_id
        )
    answer = (params.input_responses or {}).get("ask")
    if answer is None:
        return types.InputRequiredResult(input_requests={"ask": request}, request_state="asked")
    return answer


# The 2026-07-28 tools that ask through input-required rounds (SEP-2322), each asking what the
# suite's scenario of its name checks; to a 2025-11-25 client each question is a request sent
# back on the connection instead.
def _form(message: str, field: str, kind: str = "string") -> types.ElicitRequest:
    schema = {"type": "object", "properties": {field: {"type": kind}}, "required": [field]}
    return types.ElicitRequest(
        params=types.ElicitRequestFormParams(message=message, requested_schema=schema)
    )


def _sample(prompt: str, tokens: int) -> types.CreateMessageRequest:
    message = types.SamplingMessage(role="user", content=text(prompt))
    return types.CreateMessageRequest(
        params=types.CreateMessageRequestParams(messages=[message], max_tokens=tokens)
    )


ROOTS = types.ListRootsRequest()
NAME = _form("What is your name?", "name")
CONFIRM = _form("Please confirm", "ok", "boolean")
KEY = secrets.token_bytes(32)  # signs the tamper test's state


def signed(state: dict[str, Any]) -> str:
    body = json.dumps(state, sort_keys=True)
    return body + "." + hmac.new(KEY, body.encode(), hashlib.sha256).hexdigest()


def verified(state: str) -> dict[str, Any] | None:
    body, _, mac = state.rpartition(".")
    good = hmac.new(KEY, body.encode(), hashlib.sha256).hexdigest()
    return json.loads(body) if hmac.compare_digest(mac, good) else None


async def inputs(
    ctx: ServerRequestContext, params: Any, asked: dict[str, Any], state: str | None = None
) -> dict[str, Any] | types.InputRequiredResult:
    """The client's answers to `asked` (by key, as plain JSON), or the round that asks them."""
    if ctx.protocol_version < MODERN:
        answers: dict[str, Any] = {}
        for key, request in asked.items():
            if isinstance(request, types.ListRootsRequest):
                answer: Any = await ctx.session.list_roots()
            else:
                answer = await ask(ctx, params, request)
            answers[key] = plain(answer)
        return answers
    given = params.input_responses or {}
    if asked and all(key in given for key in asked):
        return {key: plain(value) for key, value in given.items()}
    return types.InputRequiredResult(input_requests=asked, request_state=state)


def plain(value: Any) -> dict[str, Any]:
    if hasattr(value, "model_dump"):
        return dict(value.model_dump(mode="json", by_alias=True, exclude_none=True))
    return dict(value)


def said(answer: dict[str, Any], field: str, default: str = "") -> str:
    """A field of an elicitation's answer, or the text of a sampled message."""
    content = answer.get("content")
    if isinstance(content, dict):
        return str(content.get(field, content.get("text", default)))
    return default


def done(value: str) -> types.CallToolResult:
    return types.CallToolResult(content=[text(value)])


def nonce(kind: str, **more: Any) -> str:
    return json.dumps({"kind": kind, "nonce": secrets.token_hex(8), **more})


async def rounds(ctx: ServerRequestContext, params: types.CallToolRequestParams) -> Any:
    name, state = params.name, params.request_state
    capabilities = ctx.session.client_capabilities
    if name == "test_missing_capability":
        if capabilities is None or capabilities.sampling is None:
            required = types.ClientCapabilities(sampling=types.SamplingCapability())
            data = types.MissingRequiredClientCapabilityErrorData(required_capabilities=required)
            raise MCPError(
                code=types.MISSING_REQUIRED_CLIENT_CAPABILITY,
                message="MissingRequiredClientCapabilityError: this tool samples",
                data=data.model_dump(mode="json", by_alias=True, exclude_none=True),
            )
        got = await inputs(ctx, params, {"sample": _sample("Say success", 10)})
        return got if isinstance(got, types.InputRequiredResult) else done("Success")
    single = {
        "test_input_required_result_elicitation": ("user_name", NAME),
        "test_input_required_result_sampling": (
            "sample_request",
            _sample("What is the capital of France?", 100),
        ),
        "test_input_required_result_list_roots": ("roots_request", ROOTS),
    }
    if name in single:
        key, request = single[name]
        got = await inputs(ctx, params, {key: request})
        if isinstance(got, types.InputRequiredResult):
            return got
        if key == "user_name":
            return done(f"Hello, {said(got[key], 'name')}!")
        if key == "sample_request":
            return done(f"Sampling result: {said(got[key], 'text', 'no response')}")
        return done(f"Found {len(got[key].get('roots') or [])} root(s)")
    if name == "test_input_required_result_request_state":
        kept = json.loads(state) if state and ctx.protocol_version >= MODERN else {}
        got = await inputs(ctx, params, {"confirm": CONFIRM}, nonce("request-state"))
        if isinstance(got, types.InputRequiredResult):
            return got
        if ctx.protocol_version >= MODERN and kept.get("kind") != "request-state":
            return await inputs(ctx, params, {"confirm": CONFIRM, "again": NAME}, nonce("retry"))
        return done("state-ok: requestState validated")
    if name == "test_input_required_result_multiple_inputs":
        asked = {
            "user_name": NAME,
            "greeting": _sample("Generate a greeting", 50),
            "client_roots": ROOTS,
        }
        got = await inputs(ctx, params, asked, nonce("multiple-inputs"))
        if isinstance(got, types.InputRequiredResult):
            return got
        roots = len(got["client_roots"].get("roots") or [])
        greeting = said(got["greeting"], "text", "Hello there!")
        return done(f"Name: {said(got['user_name'], 'name')}; Greeting: {greeting}; Roots: {roots}")
    return await later_rounds(ctx, params)


STEP1 = _form("Step 1: What is your name?", "name")
STEP2 = _form("Step 2: What is your favorite color?", "color")


async def later_rounds(ctx: ServerRequestContext, params: types.CallToolRequestParams) -> Any:
    name, state, given = params.name, params.request_state, params.input_responses or {}
    if name == "test_input_required_result_multi_round":
        return await multi_round(ctx, params)
    if name == "test_input_required_result_tampered_state":
        if state is not None:
            if verified(state) is None:
                raise MCPError(
                    code=types.INVALID_PARAMS, message="requestState integrity check failed"
                )
            if "confirm" in given:
                return done("integrity-ok: state verified")
        return types.InputRequiredResult(
            input_requests={"confirm": CONFIRM},
            request_state=signed({"kind": "tamper-test", "nonce": secrets.token_hex(8)}),
        )
    if name == "test_input_required_result_capabilities":
        capabilities = ctx.session.client_capabilities
        asked: dict[str, Any] = {}
        if capabilities is not None and capabilities.elicitation is not None:
            asked["elicit_input"] = _form("Elicitation input", "value")
        if capabilities is not None and capabilities.sampling is not None:
            asked["sample_input"] = _sample("Sample request", 50)
        if given:
            return done(f"capabilities-ok: received {','.join(given)}")
        if not asked:
            return done("No supported capabilities declared")
        return types.InputRequiredResult(
            input_requests=asked, request_state=signed({"kind": "capabilities-test"})
        )
    raise ValueError(f"unknown tool {name}")


async def multi_round(ctx: ServerRequestContext, params: types.CallToolRequestParams) -> Any:
    """A name, then (in a second round, the name kept in the state) a colour."""
    state, given = params.request_state, params.input_responses or {}
    if ctx.protocol_version < MODERN:
        first = await inputs(ctx, params, {"step1": STEP1})
        second = await inputs(ctx, params, {"step2": STEP2})
        assert isinstance(first, dict) and isinstance(second, dict)
        who, color = said(first["step1"], "name"), said(second["step2"], "color")
        return done(f"Multi-round complete for {who} who likes {color}")
    kept = json.loads(state) if state else {}
    if kept.get("round") == 1 and "step1" in given:
        who = said(plain(given["step1"]), "name")
        return types.InputRequiredResult(
            input_requests={"step2": STEP2},
            request_state=nonce("multi-round", round=2, name=who),
        )
    if kept.get("round") == 2 and "step2" in given:
        color = said(plain(given["step2"]), "color")
        return done(f"Multi-round complete for {kept.get('name', 'friend')} who likes {color}")
    return types.InputRequiredResult(
        input_requests={"step1": STEP1}, request_state=nonce("multi-round", round=1)
    )
