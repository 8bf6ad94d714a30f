"""A stdio server's tool calls on the gateway's SDK path, made over its pipes.

The gateway's session with a stdio server is the SDK's client (`SdkSession`): it answers what the
server asks, follows its notifications, subscriptions and listings. Its tool calls alone go past
it: the request written to the server's stdin through the session's `stdio.Tap`, the answer
taken out of its stdout before the SDK's client reads it. The
SDK's client was the largest part of `serve`'s CPU on an HTTP call that is ours to change
(building the request's models, routing the answer through its streams and tasks); without it a
call costs `serve` about a sixth less CPU (`bench/bench_http.py`).

The request is `plain.call_tool`'s and the answer is checked by `results.checked`, the same
two that `exec`'s SDK-free client (`plain.StdioClient`) uses: one raw-pipe tool call, whichever
door the call came in by. Progress, the timeout and a cancelled call are `plain.exchange`'s. A
tool whose server answers `input_required` (2026-07-28: it asks the client first) is called
through the SDK's client from then on, which runs those rounds — that call too, asked again
(such a server expects retries) — and so is a call whose client answers those rounds itself
(`Rounds`), and a tool its server runs only as a task (-32021 naming the tasks extension, which
the SDK's client declares: `mcpio/tasks.py`).
While the tap is not ready (the session's first request not yet made) or cannot take a line,
the SDK's client makes the call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bundlectl.errors import ClientLacks
from bundlectl.mcpio import results
from bundlectl.mcpio.connect import broke_protocol, connection_closed
from bundlectl.mcpio.plain import call_tool
from bundlectl.mcpio.session import Progress, Rounds, SdkSession, ToolResult

if TYPE_CHECKING:
    import mcp_types as types

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
        rounds: Rounds | None = None,
    ) -> ToolResult:
        if name not in self.asks and rounds is None and self.tap.ready:
            try:
                answer = await call_tool(
                    self.tap.in_order,
                    self._send,
                    self.target,
                    name,
                    arguments,
                    meta=meta,
                    timeout=timeout,
                    progress=progress,
                    stopped="the client cancelled the call",
                )
            except _NotSent:
                pass  # the SDK's client makes it
            else:
                if answer is None:
                    raise connection_closed(self.target)
                created = answer.get("result")
                if isinstance(created, dict) and created.get("resultType") == "task":
                    return await self._followed(created, timeout)
                tool = (self._tools() or {}).get(name)
                schema = tool.output_schema if tool is not None else None
                try:
                    result = results.checked(self.target, name, answer, schema)
                except ClientLacks as exc:
                    if not results.needs_tasks(exc.data):
                        raise
                    result = None  # a tool its server runs only as a task: the SDK's client
                if result is not None:
                    return result
                self.asks.add(name)  # it asks the client first: the SDK's client runs that
        return await super().call(
            name, arguments, timeout=timeout, progress=progress, meta=meta, rounds=rounds
        )

    async def _followed(self, created: JsonObject, timeout: float | None) -> ToolResult:
        """A task the server answered the call with (it declared the extension to the SDK's
        client, whose handshake this call rides on): followed on that client's session."""
        from pydantic import ValidationError  # noqa: PLC0415

        from bundlectl.mcpio.tasks import CreatedTask, followed  # noqa: PLC0415

        try:
            task = CreatedTask.model_validate(created)
        except ValidationError as exc:
            raise broke_protocol(self.target, str(exc).splitlines()[0]) from None
        return ToolResult(model=await followed(self.client.session, task, timeout))

    async def _send(self, message: JsonObject) -> None:
        if not self.tap.post(message):
            raise _NotSent
