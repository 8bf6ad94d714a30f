"""A one-shot MCP client without the SDK, for `exec`: tool results as plain JSON, and a session
over a stdio server we started (`StdioClient`).

Importing the MCP SDK costs about 0.7 s, more than a stdio server takes to start; a one-shot call
needs only the handshake, `tools/list` and `tools/call`, with progress, cancellation and the
server's few requests (roots, elicitation, sampling, ping). `StdioClient` offers `perform` the
two methods it uses of an SDK session, so the pipeline is the same one. It speaks the 2025-11-25
handshake, which servers of every era accept; a server that refuses it (one that speaks only the
2026-07-28 protocol) is handed to the SDK (`Unsupported`). `BuiltinClient` does the same for
the built-in servers' tools, called as functions in this process.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from bundlectl import __version__, telemetry
from bundlectl.errors import BundlectlError, CallTimeout, ServerError
from bundlectl.mcpio import results
from bundlectl.mcpio.connect import (
    broke_protocol,
    call_timed_out,
    connection_closed,
    returned_error,
)
from bundlectl.mcpio.requests import Requests
from bundlectl.mcpio.session import Progress, Rounds, ToolResult
from bundlectl.mcpio.target import Target
from bundlectl.servers._tooling import Blob, Toolbox, ToolFailure, content_only

PROTOCOL = "2025-11-25"
KNOWN_PROTOCOLS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
SERVER_INFO = "io.modelcontextprotocol/serverInfo"
INVALID_REQUEST, METHOD_NOT_FOUND = -32600, -32601

# What `exec` answers a server that asks its client something (the SDK path says the same).
NO_SAMPLING = (
    "bundlectl exec has no language model to sample from; call this tool from an MCP client "
    "that can sample (for example through `bundlectl serve`)"
)
NO_TERMINAL = (
    "the server asked for input and no one is at a terminal to answer (run bundlectl exec in "
    "a terminal)"
)


class Unsupported(Exception):
    """The server does not take this client's handshake: use the SDK's."""


@dataclass(frozen=True)
class Execution:
    """A listed tool's `execution` (read as the SDK's `ToolExecution` is)."""

    task_support: str | None = None


def result_of(data: dict[str, Any], server_info: dict[str, Any]) -> ToolResult:
    """A checked tools/call result as bundlectl's `ToolResult`, its JSON as the SDK's client
    gives it (the server's info under `_meta`, each block's `type` first), so `exec` prints
    the same whichever session made the call."""
    meta = {SERVER_INFO: server_info, **(data.get("_meta") or {})}
    out: dict[str, Any] = {"_meta": meta}
    out["content"] = [_type_first(block) for block in data.get("content", [])]
    if data.get("structuredContent") is not None:
        out["structuredContent"] = data["structuredContent"]
    out["isError"] = bool(data.get("isError", False))
    out["resultType"] = "complete"
    return ToolResult(out)


def _type_first(block: dict[str, Any]) -> dict[str, Any]:
    return {"type": block.get("type"), **{k: v for k, v in block.items() if v is not None}}


@dataclass
class PlainTool:
    """A listed tool, read as the SDK's Tool is by `perform`."""

    data: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.data.get("name", ""))

    @property
    def input_schema(self) -> dict[str, Any]:
        schema = self.data.get("inputSchema")
        return schema if isinstance(schema, dict) else {"type": "object"}

    @property
    def output_schema(self) -> dict[str, Any] | None:
        schema = self.data.get("outputSchema")
        return schema if isinstance(schema, dict) else None

    @property
    def execution(self) -> Execution:
        execution = self.data.get("execution")
        support = execution.get("taskSupport") if isinstance(execution, dict) else None
        return Execution(support if isinstance(support, str) else None)


@dataclass
class _Waiter:
    """One request of a raw-pipe session waiting: the messages its tracker handed over
    (progress reports, then the answer; None: the connection ended), until its deadline.

    It waits on a future of the event loop and its deadline is a timer there, not an event
    and a cancel scope with a deadline: on a warm call through `serve` (one request) those
    cost 7 % of the call's instructions, these 2 % (`bench_serve_raw.py --callgrind`). A
    cancelled task is cancelled in its wait all the same (the future is what it awaits)."""

    arrived: collections.deque[dict[str, Any] | None] = field(default_factory=collections.deque)
    wakeup: asyncio.Future[None] | None = None  # made only while `next` waits
    expired: bool = False
    _timer: asyncio.TimerHandle | None = None

    def put(self, message: dict[str, Any] | None) -> None:
        self.arrived.append(message)
        self._wake()

    def expire_in(self, timeout: float | None) -> None:
        """`next` raises TimeoutError once `timeout` seconds have passed (None: never)."""
        if timeout is not None:
            self._timer = asyncio.get_running_loop().call_later(timeout, self._expire)

    def _expire(self) -> None:
        self.expired = True
        self._wake()

    def _wake(self) -> None:
        if self.wakeup is not None and not self.wakeup.done():
            self.wakeup.set_result(None)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    async def next(self) -> dict[str, Any] | None:
        while not self.arrived:
            if self.expired:
                raise TimeoutError
            self.wakeup = asyncio.get_running_loop().create_future()
            try:
                await self.wakeup
            finally:
                self.wakeup = None
        return self.arrived.popleft()


@dataclass
class StdioClient:
    """One session with a stdio server (`read`/`write`: JSON-RPC messages as dicts). Its
    requests are tracked by `requests.Requests`; its failures are the errors `connect` makes
    of every transport's (one wording whichever client met them)."""

    target: Target
    read: Any
    write: Any
    root: Path
    ask: Callable[[dict[str, Any]], dict[str, Any]] | None  # elicitation on a terminal
    ended: Callable[[], None] = lambda: None  # its stdout closed: let it exit (for the tail)
    server_info: dict[str, Any] = field(default_factory=dict)
    requests: Requests = field(default_factory=Requests)
    listed: dict[str, PlainTool] = field(default_factory=dict)  # its last tools/list, by name
    _gone: BundlectlError | None = None

    @classmethod
    @contextlib.asynccontextmanager
    async def session(
        cls, target: Target, streams: tuple[Any, Any], **options: Any
    ) -> AsyncIterator[StdioClient]:
        client = cls(target, *streams, **options)
        async with anyio.create_task_group() as group:
            group.start_soon(client._receive)
            try:
                yield client
            finally:
                group.cancel_scope.cancel()
                client.read.close()

    async def initialize(self) -> None:
        """The 2025-11-25 handshake; `Unsupported` when the server will not have it."""
        capabilities = {
            "roots": {"listChanged": True},
            "sampling": {},
            "elicitation": {"form": {}, "url": {}},
        }
        params = {
            "protocolVersion": PROTOCOL,
            "capabilities": capabilities,
            "clientInfo": {"name": "bundlectl", "version": __version__},
        }
        try:
            result = await self._request("initialize", params, None)
        except ServerError as exc:
            if self._gone is None:  # it answered with an error: it wants another handshake
                raise Unsupported(str(exc)) from None
            raise
        if not isinstance(result, dict) or result.get("protocolVersion") not in KNOWN_PROTOCOLS:
            raise Unsupported(f"protocol {result.get('protocolVersion')!r}")
        info = result.get("serverInfo")
        self.server_info = info if isinstance(info, dict) else {}
        await self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def tools(self) -> list[PlainTool]:
        """Every tool the server lists, following pagination."""
        tools: list[PlainTool] = []
        cursor: str | None = None
        while True:
            result = await self._request("tools/list", {"cursor": cursor} if cursor else {}, None)
            listed = result.get("tools") if isinstance(result, dict) else None
            if not isinstance(listed, list) or not all(isinstance(t, dict) for t in listed):
                raise broke_protocol(self.target, "its tools/list result is not a list of tools")
            tools.extend(PlainTool(t) for t in listed)
            cursor = result.get("nextCursor")
            if not isinstance(cursor, str) or not cursor:
                self.listed = {t.name: t for t in tools}
                return tools

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
        if self._gone is not None:
            raise self._gone
        answer = await call_tool(
            self.requests,
            self._send,
            self.target,
            name,
            arguments,
            meta=meta,
            timeout=timeout,
            progress=progress,
            stopped="the user stopped the call",
        )
        if answer is None:
            raise self._gone or self._closed()
        listed = self.listed.get(name)
        schema = listed.output_schema if listed is not None else None
        result = results.checked(self.target, name, answer, schema)
        if result is None:  # a 2026-07-28 question: not on the 2025-11-25 handshake it made
            raise broke_protocol(self.target, "it answered input_required on 2025-11-25")
        return result_of(result.data, self.server_info)

    async def _request(
        self,
        method: str,
        params: dict[str, Any],
        timeout: float | None,
        *,
        progress: Progress | None = None,
    ) -> Any:
        """Send a request and wait for its answer, reporting its progress meanwhile."""
        if self._gone is not None:
            raise self._gone
        message = await exchange(
            self.requests,
            self._send,
            self.target,
            {"method": method, "params": params},
            timeout,
            progress=progress,
            stopped="the user stopped the call",
        )
        if message is None:
            raise self._gone or self._closed()
        return self._answer_of(message)

    def _answer_of(self, message: dict[str, Any]) -> Any:
        error = message.get("error")
        if isinstance(error, dict):
            raise returned_error(
                self.target, error.get("message", ""), error.get("code"), error.get("data")
            )
        return message.get("result")

    async def _send(self, message: dict[str, Any]) -> None:
        try:
            await self.write.send(message)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            raise self._gone or self._closed() from None

    async def _receive(self) -> None:
        """Answers to our requests and their progress (to `requests`), and the server's
        requests, until it is gone."""
        try:
            async for message in self.read:
                if self.requests.take(message):
                    continue
                if "method" in message and "id" in message:
                    reply = await self._reply(message)
                    with contextlib.suppress(BundlectlError):
                        await self._send({"jsonrpc": "2.0", "id": message["id"], **reply})
                # log messages and list changes mean nothing to a one-shot call
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
            pass
        await anyio.to_thread.run_sync(self.ended)
        self._gone = self._closed()
        self.requests.close()

    async def _reply(self, request: dict[str, Any]) -> dict[str, Any]:
        """Our answer to the server's request."""
        method = request.get("method")
        if method == "ping":
            return {"result": {}}
        if method == "roots/list":
            root = {"uri": self.root.as_uri(), "name": self.root.name}
            return {"result": {"roots": [root]}}
        if method == "sampling/createMessage":
            return {"error": {"code": INVALID_REQUEST, "message": NO_SAMPLING}}
        if method == "elicitation/create":
            if self.ask is None:
                return {"error": {"code": INVALID_REQUEST, "message": NO_TERMINAL}}
            params = request.get("params") or {}
            return {"result": await anyio.to_thread.run_sync(self.ask, params)}
        return {"error": {"code": METHOD_NOT_FOUND, "message": f"method not found: {method}"}}

    def _closed(self) -> ServerError:
        return connection_closed(self.target)


async def call_tool(
    requests: Requests,
    send: Callable[[dict[str, Any]], Awaitable[None]],
    target: Target,
    name: str,
    arguments: dict[str, Any],
    *,
    meta: dict[str, Any] | None,
    timeout: float | None,
    progress: Progress | None,
    stopped: str,
) -> dict[str, Any] | None:
    """The one `tools/call` written on a server's pipes (`exchange`), for every raw-pipe
    session: the caller's `_meta` with the call's W3C trace context (as the SDK's client adds
    it). The answer, unread (`results.checked` reads it), or None: the connection ended."""
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    carrier = telemetry.traced(meta)
    if carrier:
        params["_meta"] = carrier
    request = {"method": "tools/call", "params": params}
    return await exchange(
        requests, send, target, request, timeout, progress=progress, stopped=stopped
    )


async def exchange(
    requests: Requests,
    send: Callable[[dict[str, Any]], Awaitable[None]],
    target: Target,
    request: dict[str, Any],
    timeout: float | None,
    *,
    progress: Progress | None = None,
    stopped: str,
) -> dict[str, Any] | None:
    """One JSON-RPC request (`method` and `params`) sent with `send` and tracked by `requests`,
    its progress reported meanwhile (the request's id is its progress token): the answer
    (`result` or `error`, unread), or None when the connection ended first. The server is told
    when the request times out (`CallTimeout`) or is cancelled (`stopped`: why)."""
    waiter = _Waiter()
    key = requests.open(waiter.put)
    params = request["params"]
    if progress is not None:
        params = {**params, "_meta": {**params.get("_meta", {}), "progressToken": key}}
    try:
        await send({"jsonrpc": "2.0", "id": key, "method": request["method"], "params": params})
        waiter.expire_in(timeout)
        while (message := await waiter.next()) is not None:
            if "method" not in message:
                return message
            if progress is not None:
                await _report(progress, message.get("params") or {})
        return None
    except TimeoutError:
        await _cancel(send, key, "timed out")
        raise call_timed_out(target) from None
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True):
            await _cancel(send, key, stopped)
        raise
    finally:
        waiter.close()
        requests.drop(key)


async def _cancel(send: Callable[[dict[str, Any]], Awaitable[None]], key: str, reason: str) -> None:
    params = {"requestId": key, "reason": reason}
    with contextlib.suppress(Exception):
        await send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params})


async def _report(progress: Progress, params: dict[str, Any]) -> None:
    """A progress notification's figures to the caller's `progress`."""
    done = params.get("progress")
    if not isinstance(done, int | float):
        return
    total, text = params.get("total"), params.get("message")
    await progress(
        float(done),
        float(total) if isinstance(total, int | float) else None,
        text if isinstance(text, str) else None,
    )


def decode(raw: bytes | bytearray) -> dict[str, Any]:
    """One JSON-RPC message as a dict; ValueError when the line is none."""
    message = json.loads(raw)
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        raise ValueError("not a JSON-RPC message")
    return message


class BuiltinClient:
    """The same two methods over a built-in server's functions in this process. Tool
    definitions are the declared ones (the bundle's catalog, which a test keeps equal to what
    the SDK serves); only content-only tools are offered, so every result is one the SDK would
    give (a test compares them)."""

    def __init__(self, box: Toolbox, declared: list[Any]) -> None:
        self.box = box
        self.declared = [t for t in declared if content_only(box.tools.get(t.name))]
        self.server_info = {"name": box.name, "version": __version__}

    @classmethod
    def able(cls, box: Toolbox, tool: str, declared: list[Any]) -> bool:
        """Whether `tool` can be called this way (declared, and content-only)."""
        return content_only(box.tools.get(tool)) and any(t.name == tool for t in declared)

    async def tools(self) -> list[Any]:
        return list(self.declared)

    async def call(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        timeout: float | None,
        progress: Progress | None = None,
        meta: dict[str, Any] | None = None,
        rounds: Rounds | None = None,
    ) -> ToolResult:
        tool = self.box.tools[name]
        known = inspect.signature(tool.fn).parameters
        kwargs = {k: v for k, v in arguments.items() if k in known}  # as the SDK: extras ignored
        try:
            with anyio.fail_after(timeout):
                value = await anyio.to_thread.run_sync(
                    functools.partial(tool.fn, **kwargs), abandon_on_cancel=True
                )
        except TimeoutError:
            raise CallTimeout(f"server {self.box.name!r} did not answer in time") from None
        except ToolFailure as exc:
            return self._result({"type": "text", "text": f"Error executing tool {name}: {exc}"})
        except Exception:  # a crash: its text stays here, as in the SDK
            return self._result({"type": "text", "text": f"Error executing tool {name}"})
        if isinstance(value, Blob):
            resource = {"uri": value.uri, "mimeType": value.mime_type, "blob": value.blob}
            return self._result({"type": "resource", "resource": resource}, error=False)
        return self._result({"type": "text", "text": value}, error=False)

    def _result(self, block: dict[str, Any], *, error: bool = True) -> ToolResult:
        return result_of({"content": [block], "isError": error}, self.server_info)
