"""A real MCP server named on its command line, offering the tools named after it, each
answering with its server's and its own name.

python named.py WHO TOOL...
"""

from __future__ import annotations

import _unmeasured  # noqa: F401  # first: see its docstring
import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("named", log_level="WARNING")
who = sys.argv[1]

for name in sys.argv[2:]:
    server.add_tool(lambda who=who, name=name: f"{who}.{name}", name=name, description=name)

if __name__ == "__main__":
    server.run("stdio")
