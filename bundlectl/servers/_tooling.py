"""Registering tools with clean one-paragraph descriptions taken from docstrings."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from mcp.server.mcpserver import MCPServer

F = TypeVar("F", bound=Callable[..., Any])


def tool(server: MCPServer, **options: Any) -> Callable[[F], F]:
    """Like `server.tool()`, with the docstring folded into one line for the description."""

    def register(fn: F) -> F:
        description = " ".join(inspect.cleandoc(fn.__doc__ or "").split())
        server.add_tool(fn, description=description, **options)
        return fn

    return register
