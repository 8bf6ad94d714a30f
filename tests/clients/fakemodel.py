"""A model API on 127.0.0.1 standing in for the vendors' (Anthropic Messages, OpenAI Responses,
Gemini generateContent), so that a real client shows which tools it offers the model and makes
real calls.

It records the tools each request offers and the tool results the client sends back, and plays
a script: the Nth model turn of a conversation calls the Nth scripted tool, the turn after the
last one answers with text. The turn is read from the conversation itself (how many tool results
it holds), so a client's retries and side requests (titles, token counts) do not move it.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DONE = "all done"


@dataclass
class Step:
    """A scripted tool call: the client's name for the tool, and its arguments."""

    tool: str
    arguments: dict[str, Any]
    namespace: str | None = None  # OpenAI Responses: the namespace of an MCP server's tools


@dataclass
class FakeModel:
    script: list[Step] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)  # every request's body
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeModel:
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                size = int(self.headers.get("content-length") or 0)
                try:
                    body = json.loads(self.rfile.read(size) or b"{}")
                except ValueError:
                    body = {}
                with model.lock:
                    model.requests.append({"path": self.path, "body": body})
                status, kind, payload = model.answer(self.path, body)
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self) -> None:
                payload = b'{"data": [], "models": []}'
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def reset(self, script: list[Step]) -> None:
        with self.lock:
            self.script = list(script)
            self.requests.clear()

    # What the clients offered and sent back -------------------------------------------------

    def offered(self) -> set[str]:
        """The names of the MCP tools offered in the requests that offered any (a client's own
        tools left out), as the client names them."""
        names: set[str] = set()
        with self.lock:
            for request in self.requests:
                names |= set(_mcp_names(request["body"]))
        return names

    def results(self) -> list[str]:
        """The text of every tool result the client sent back, in order (the last request's
        conversation holds them all)."""
        with self.lock:
            bodies = [r["body"] for r in self.requests]
        best: list[str] = []
        for body in bodies:
            found = list(_results(body))
            if len(found) > len(best):
                best = found
        return best

    # Answers --------------------------------------------------------------------------------

    def answer(self, path: str, body: dict[str, Any]) -> tuple[int, str, bytes]:
        if path.startswith("/v1/messages/count_tokens"):
            return 200, "application/json", b'{"input_tokens": 10}'
        if path.startswith("/v1/messages"):
            return _anthropic(self._next(body), bool(body.get("stream")), self._turn(body))
        if path.startswith("/v1/responses"):
            return _responses(self._next(body), self._turn(body))
        if ":streamGenerateContent" in path or ":generateContent" in path:
            return _gemini(self._next(body), "alt=sse" in path)
        if ":countTokens" in path:
            return 200, "application/json", b'{"totalTokens": 10}'
        return 404, "application/json", b'{"error": {"message": "not here"}}'

    @staticmethod
    def _turn(body: dict[str, Any]) -> int:
        return len(list(_results(body)))

    def _next(self, body: dict[str, Any]) -> Step | None:
        """This turn's step: the next scripted call, or None (answer with text). Requests
        that offer no MCP tools (a title, a summary) are answered with text."""
        if not list(_mcp_names(body)):
            return None
        done = len(list(_results(body)))
        with self.lock:
            return self.script[done] if done < len(self.script) else None


# MCP tool names as each client offers them: Claude Code `mcp__S__T` (in `tools` or listed as
# deferred tools in the system prompt), Gemini `mcp_S_T`, Codex a namespace `mcp__S`.
_NAME = re.compile(r"\bmcp__?[A-Za-z0-9_-]+")


def _mcp_names(body: dict[str, Any]) -> Iterator[str]:
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "namespace" and str(tool.get("name", "")).startswith("mcp__"):
            for inner in tool.get("tools") or []:
                yield f"{tool['name']}.{inner.get('name')}"
        for declaration in tool.get("functionDeclarations") or []:
            if str(declaration.get("name", "")).startswith("mcp_"):
                yield declaration["name"]
        name = tool.get("name")
        if not isinstance(name, str) or tool.get("type") == "namespace":
            continue
        if name.startswith("mcp__"):
            yield name
    marker = "deferred tools are now available"
    for text in _strings([body.get("system"), body.get("messages")]):
        if marker in text:
            listed = text[text.index(marker) :].split("\n\n")[0]
            yield from (m for m in _NAME.findall(listed) if m.startswith("mcp__"))


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for inner in value.values():
            yield from _strings(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _strings(inner)


def _results(body: dict[str, Any]) -> Iterator[str]:
    """The tool results in a request's conversation, as text."""
    for message in body.get("messages") or []:  # Anthropic
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                yield _text(block.get("content"))
    for item in body.get("input") or []:  # OpenAI Responses
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            yield _text(item.get("output"))
    for content in body.get("contents") or []:  # Gemini
        for part in content.get("parts") or []:
            if isinstance(part, dict) and "functionResponse" in part:
                yield _text(part["functionResponse"].get("response"))


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value)


def _sse(events: list[dict[str, Any]], *, named: bool = True) -> bytes:
    """Server-sent events; `named`: each with an `event:` line naming its type (Anthropic,
    OpenAI), else data only (Gemini)."""
    out = []
    for data in events:
        head = f"event: {data['type']}\n" if named else ""
        out.append(f"{head}data: {json.dumps(data)}\n\n")
    return "".join(out).encode()


def _anthropic(step: Step | None, stream: bool, turn: int) -> tuple[int, str, bytes]:
    if step is None:
        block: dict[str, Any] = {"type": "text", "text": DONE}
        opened: dict[str, Any] = {"type": "text", "text": ""}
        delta = {"type": "text_delta", "text": DONE}
        reason = "end_turn"
    else:
        call = {"type": "tool_use", "id": f"toolu_fake{turn}", "name": step.tool}
        block, opened = {**call, "input": step.arguments}, {**call, "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(step.arguments)}
        reason = "tool_use"
    message = {
        "id": f"msg_fake{turn}",
        "type": "message",
        "role": "assistant",
        "model": "claude-fake",
        "content": [block],
        "stop_reason": reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }
    if not stream:
        return 200, "application/json", json.dumps(message).encode()
    stopped = {"stop_reason": reason, "stop_sequence": None}
    events = [
        {"type": "message_start", "message": {**message, "content": [], "stop_reason": None}},
        {"type": "content_block_start", "index": 0, "content_block": opened},
        {"type": "content_block_delta", "index": 0, "delta": delta},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": stopped, "usage": {"output_tokens": 5}},
        {"type": "message_stop"},
    ]
    return 200, "text/event-stream", _sse(events)


def _responses(step: Step | None, turn: int) -> tuple[int, str, bytes]:
    if step is None:
        item: dict[str, Any] = {
            "type": "message",
            "id": f"msg_fake{turn}",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": DONE, "annotations": []}],
        }
    else:
        item = {
            "type": "function_call",
            "id": f"fc_fake{turn}",
            "call_id": f"call_fake{turn}",
            "name": step.tool,
            "arguments": json.dumps(step.arguments),
            "status": "completed",
        }
        if step.namespace:
            item["namespace"] = step.namespace
    response = {"id": f"resp_fake{turn}", "object": "response", "status": "in_progress"}
    usage = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
    done = {**response, "status": "completed", "output": [item], "usage": usage}
    events = [
        {"type": "response.created", "response": {**response, "output": []}},
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed", "response": done},
    ]
    return 200, "text/event-stream", _sse(events)


def _gemini(step: Step | None, stream: bool) -> tuple[int, str, bytes]:
    if step is None:
        part: dict[str, Any] = {"text": DONE}
    else:
        part = {"functionCall": {"name": step.tool, "args": step.arguments}}
    chunk = {
        "candidates": [
            {"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}
        ],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
        "modelVersion": "gemini-fake",
    }
    if not stream:
        return 200, "application/json", json.dumps(chunk).encode()
    return 200, "text/event-stream", _sse([chunk], named=False)
