"""Our JSON-RPC requests in flight on one connection: the one request tracker.

Three senders make requests without the SDK's session and must find the answers among a peer's
messages: the SDK-free stdio client (`plain.StdioClient`), the gateway's calls past the SDK on a
downstream server's pipes (`stdio.Tap`: the express lane's, and the SDK path's tool calls of
`mcpio/pipe_session.py`), and the express lane's questions to its own client
(`gateway/stdio_calls.py`). Each keeps a `Requests`: it gives every request an id the SDK never uses
(the SDK counts with integers; ours are `bundlectl-N`, the SDK path's `bundlectl-pipe-N`),
which is also the request's progress token, hands each answer, error or progress report to the
request's handler, and tells every request still waiting that the connection is gone (`close`,
the handler gets None).

A handler runs in the callback that read the message: it must not block (it stores the message,
sets an event, or answers in place, as the express lane does).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

# A JSON object as read from the wire or about to be written to it: a JSON-RPC message, its
# params or result. Its values are checked where they are read (`isinstance`), not typed.
JsonObject = dict[str, Any]

# What a request's handler is given: an answer (`result` or `error`), a progress notification,
# or None when the connection ended before the answer came.
Handler = Callable[[JsonObject | None], None]

PROGRESS = "notifications/progress"
TASKS = "io.modelcontextprotocol/tasks"  # the tasks extension (SEP-2663): `mcpio/tasks.py`


class Requests:
    """The requests one sender has in flight on a connection, by id."""

    def __init__(self, prefix: str = "bundlectl") -> None:
        self.prefix = prefix
        self._handlers: dict[str, Handler] = {}
        self._ids = itertools.count(1)

    def __len__(self) -> int:
        return len(self._handlers)

    def open(self, handler: Handler) -> str:
        """A new request's id (and progress token), its messages going to `handler`."""
        key = f"{self.prefix}-{next(self._ids)}"
        self._handlers[key] = handler
        return key

    def drop(self, key: str) -> None:
        """The request is over (answered, cancelled, timed out or never sent)."""
        self._handlers.pop(key, None)

    def take(self, message: Any) -> bool:
        """Whether `message` answers one of these requests or reports its progress; if so it
        went to the request's handler. Other messages (requests and notifications of the peer,
        answers to someone else's requests) are left to the caller."""
        key = self._key(message)
        if key is None:
            return False
        self._handlers[key](message)
        return True

    def owns(self, message: Any) -> bool:
        """Whether `take` would hand `message` to one of these requests' handlers."""
        return self._key(message) is not None

    def _key(self, message: Any) -> str | None:
        if not self._handlers or not isinstance(message, dict):
            return None
        method = message.get("method")
        if method is None:
            key = message.get("id")
        elif method == PROGRESS:
            params = message.get("params")
            key = params.get("progressToken") if isinstance(params, dict) else None
        else:
            return None
        return key if isinstance(key, str) and key in self._handlers else None

    def close(self) -> None:
        """The connection is gone: every request still waiting hears so (None), once."""
        handlers, self._handlers = self._handlers, {}
        for handler in handlers.values():
            handler(None)
