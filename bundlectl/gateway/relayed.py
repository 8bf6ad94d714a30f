"""A 2026-07-28 server's questions handed on to the gateway's client as the server asked them.

A server on 2026-07-28 asks its client something (an elicitation, a sampling request, its roots)
by answering the call with an `InputRequiredResult`; the client answers by calling again with
its answers and the server's `requestState`. When the gateway's own client retries that way
(2026-07-28, declared), the server's result is its answer (`mcpio.session.Rounds`): the
questions go on under the names the server gave them, and no call is held open in the gateway
between rounds. Each round is a `tools/call` of its own, judged and audited as any other.

The `requestState` the client echoes is the gateway's: it binds the agent, the tool and the
exact arguments, holds the server's own state, and carries a nonce, so it is good for one retry
(`Hub.accepted`); the SDK seals it (unforgeable, expiring) with keys every replica shares. A
call whose `ask` rule was confirmed in its first round is not asked again in the rounds after.

A question the client did not declare it can answer is refused as the protocol says, with
-32021 (the gateway declares to its servers all it can hand on, whatever its client declared),
and so is a server's own -32021 (`ClientLacks`).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING

import mcp_types as types
from mcp.shared.exceptions import MCPError

from bundlectl.errors import BundlectlError, ClientLacks
from bundlectl.gateway.request_context import MODERN, RequestContext
from bundlectl.mcpio.requests import JsonObject
from bundlectl.mcpio.session import Rounds

if TYPE_CHECKING:
    from bundlectl.calls.calldata import ToolCall
    from bundlectl.policy.rules import Decision
    from bundlectl.privacy.tokenize import Tokenizer

# The client capability each kind of question needs.
_CAPABILITY = {
    "elicitation/create": "elicitation",
    "sampling/createMessage": "sampling",
    "roots/list": "roots",
}


def missing(capability: str) -> types.ErrorData:
    """The -32021 error for a request that needs `capability` of a client that lacks it."""
    required = types.ClientCapabilities.model_validate({capability: {}})
    data = types.MissingRequiredClientCapabilityErrorData(required_capabilities=required)
    return types.ErrorData(
        code=types.MISSING_REQUIRED_CLIENT_CAPABILITY,
        message=f"{capability} is not available: the client behind the bundlectl gateway did "
        f"not declare {capability}",
        data=data.model_dump(by_alias=True, mode="json", exclude_none=True),
    )


def protocol_error(version: str, error: BundlectlError) -> types.ErrorData | None:
    """What a client on `version` is told as a JSON-RPC error rather than as a tool's failure
    (every front door, every transport): on 2026-07-28, a capability it did not declare but
    its tool needs (-32021). None: a tool's failure."""
    if isinstance(error, ClientLacks) and version >= MODERN:
        return types.ErrorData(
            code=types.MISSING_REQUIRED_CLIENT_CAPABILITY, message=error.message, data=error.data
        )
    return None


def relayed(
    ctx: RequestContext | None,
    asked: types.InputRequiredResult,
    binding: dict[str, str],
    confirmed: bool,
    tokens: Tokenizer | None,
) -> types.InputRequiredResult:
    """The server's questions for the client (see the module); -32021 when one needs what the
    client did not declare."""
    declared = ctx.session.client_capabilities if ctx is not None else None
    for request in (asked.input_requests or {}).values():
        capability = _CAPABILITY.get(request.method, request.method)
        if declared is None or getattr(declared, capability, None) is None:
            raise MCPError.from_error_data(missing(capability))
    state = {
        **binding,
        "relay": asked.request_state,
        "nonce": secrets.token_hex(12),
        "confirmed": confirmed,
    }
    requests = asked.input_requests
    if requests is not None and tokens is not None:  # tokenized as the call's result would be
        dumped = {k: v.model_dump(by_alias=True, mode="json") for k, v in requests.items()}
        requests = types.InputRequiredResult.model_validate(
            {"inputRequests": tokens.value(dumped), "requestState": "-"}
        ).input_requests
    return types.InputRequiredResult(input_requests=requests, request_state=json.dumps(state))


def retried(
    accepted: Callable[[str, str, str, str], bool],
    binding: dict[str, str],
    held: JsonObject,
    state: str,
    responses: dict[str, object] | None,
) -> tuple[Rounds, bool] | str:
    """The retry of a relayed round (`held`: its unsealed requestState, `state` as sent): the
    rounds to hand the server, and whether the call was confirmed in an earlier round. A
    string: why it is refused (another call's answers, or answers given already). `accepted`:
    `Hub.accepted`, which checks the binding and uses the nonce up."""
    agent, name, arguments = binding["agent"], binding["tool"], binding["arguments"]
    if not accepted(state, agent, name, arguments):
        return (
            f"{name}: these answers belong to another request, or were given already; "
            "make the request again"
        )
    relay = held.get("relay")
    rounds = Rounds(dict(responses or {}), relay if isinstance(relay, str) else None)
    return rounds, held.get("confirmed") is True


async def confirmed(pipeline: object, decision: Decision, call: ToolCall) -> bool:
    """The confirmation of a later round of a call confirmed in its first."""
    return True
