"""A stdio server's tool calls on the gateway's SDK path, made over its pipes.

The gateway's session with a stdio server is the SDK's client (`SdkSession`): it answers what the
server asks, follows its notifications, subscriptions and listings. Its tool calls alone go past
it, the way the express lane's do: the request written to the server's stdin through the
session's `stdio.Tap`, the answer taken out of its stdout before the SDK's client reads it. The
SDK's client was the largest part of `serve`'s CPU on an HTTP call that is ours to change
(building the request's models, routing the answer through its streams and tasks); without it a
call costs `serve` about a sixth less CPU (`bench/bench_http.py`).

What the SDK's client does to a call is done here as well, with its words: the W3C trace context
put into `_meta`; the answer's error, the result's shape and protocol types, and a successful
result's structured content against the tool's output schema checked. Progress, the timeout and
a cancelled call are `plain.exchange`'s, the SDK-free client's own. A tool whose server answers
`input_required` (2026-07-28: it asks the client first) is called through the SDK's client from
then on, which runs those rounds — that call too, asked again (such a server expects retries).
While the tap is not ready (the session's first request not yet made) or cannot take a line,
the SDK's client makes the call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import mcp_types as types
from opentelemetry.propagate import inject
from pydantic import ValidationError

from bundlectl.calls.arguments import structured_problem
from bundlectl.gateway.wire import is_plain
from bundlectl.mcpio.connect import broke_protocol, connection_closed, returned_error
from bundlectl.mcpio.plain import exchange
from bundlectl.mcpio.session import Progress, SdkSession, ToolResult

if TYPE_CHECKING:
    from bundlectl.mcpio.requests import JsonObject
    from bundlectl.mcpio.stdio import Tap
    from bundlectl.mcpio.target import Target


class _NotSent(Exception):
    """The tap could not take the request: nothing was sent."""


class PipeSession(SdkSession):
    """The SDK's client, with tool calls made over the server's pipes (see the module)."""

    def __init__(
        self,
        client: Any,
        tap: Tap,
        target: Target,
        tools: Callable[[], dict[str, types.Tool] | None],
    ) -> None:
        super().__init__(client)
        self.tap, self.target, self._tools = tap, target, tools
        self.asks: set[str] = set()  # tools whose server asked the client first

    async def call(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        timeout: float | None,
        progress: Progress | None,
        meta: dict[str, Any] | None = None,
    ) -> ToolResult:
        if name not in self.asks and self.tap.ready:
            params: JsonObject = {"name": name, "arguments": arguments}
            carrier = dict(meta) if meta else {}
            inject(carrier)  # the W3C trace context of the call, as the SDK's client adds it
            if carrier:
                params["_meta"] = carrier
            try:
                answer = await exchange(
                    self.tap.in_order,
                    self._send,
                    self.target,
                    {"method": "tools/call", "params": params},
                    timeout,
                    progress=progress,
                    stopped="the client cancelled the call",
                )
            except _NotSent:
                pass  # the SDK's client makes it
            else:
                if answer is None:
                    raise connection_closed(self.target)
                result = self._result(name, answer)
                if result is not None:
                    return result
        return await super().call(name, arguments, timeout=timeout, progress=progress, meta=meta)

    async def _send(self, message: JsonObject) -> None:
        if not self.tap.post(message):
            raise _NotSent

    def _result(self, name: str, answer: JsonObject) -> ToolResult | None:
        """The call's result, or None: the server asks the client first (`input_required`)."""
        target = self.target
        error = answer.get("error")
        if error is not None:
            if not isinstance(error, dict):
                raise broke_protocol(target, "its error is not an object")
            raise returned_error(target, error.get("message", ""), error.get("code"))
        result = answer.get("result")
        if isinstance(result, dict) and result.get("resultType") == "input_required":
            self.asks.add(name)
            return None
        # the protocol's types first (a plain all-text result passes them unchanged: kept as
        # it came), then the tool's output schema, as the SDK's client checks them
        if isinstance(result, dict) and is_plain(result):
            checked = ToolResult(result)
        else:
            try:
                checked = ToolResult(model=types.CallToolResult.model_validate(result))
            except ValidationError as exc:
                raise broke_protocol(target, str(exc).splitlines()[0]) from None
        tool = (self._tools() or {}).get(name)
        schema = tool.output_schema if tool is not None else None
        if schema and not checked.is_error and isinstance(result, dict):
            problem = structured_problem(result, schema, name)
            if problem is not None:
                raise broke_protocol(target, problem)
        return checked
