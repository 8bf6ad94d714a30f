"""MCP servers that ship inside bundlectl (used by the `basic` and `code-review` bundles).

The table maps a server name to the module that builds it; importing this package does not import
the MCP SDK. Each module has `build(root: Path) -> MCPServer`.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

BUILTIN: dict[str, str] = {
    "files": "bundlectl.servers.files",
    "review": "bundlectl.servers.review",
}


def build(name: str, root: Path) -> MCPServer:
    """Construct the built-in server `name`, confined to / working in `root`."""
    module = importlib.import_module(BUILTIN[name])
    server: MCPServer = module.build(root.resolve())
    return server
