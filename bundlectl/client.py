"""Calling tools from code: `call_tool("server.tool", {...})`, what `bundlectl codegen`'s
functions import (SPEC 9).

This is the face of code mode's runtime (`bundlectl.codemode.runtime`): through the gateway
when `BUNDLECTL_GATEWAY_URL` is set, otherwise in this process through the same call as
`bundlectl exec`, under the policy of agent `$BUNDLECTL_AGENT` (or `default`). A denied call
raises `ToolDenied` with the reason; a tool error, `ToolFailed`.

Kept small on purpose: the runtime is loaded by name on the first call, so importing generated
code costs nothing until it calls, and a type checker reading it (`mypy --strict` on the
generated package) stops here instead of analysing all of bundlectl and the MCP SDK.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from bundlectl.codemode.outcomes import ToolDenied, ToolFailed

__all__ = ["ToolDenied", "ToolFailed", "call_tool"]


def call_tool(
    name: str,
    arguments: dict[str, Any] | None = None,
    *,
    agent: str | None = None,
    config: Path | None = None,
) -> Any:
    """Call `server.tool`; the structured result when there is one, else the text."""
    runtime = importlib.import_module("bundlectl.codemode.runtime")
    return runtime.call_tool(name, arguments, agent=agent, config=config)
