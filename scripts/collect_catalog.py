"""Print the tool catalog of a real MCP server in bundle-manifest form.

    python scripts/collect_catalog.py -- npx -y @modelcontextprotocol/server-github@2025.4.8
    python scripts/collect_catalog.py --builtin files

Used to write the `tools:` lists of the built-in manifests from what the servers really expose
(the maintainers' tool: their comments name the command that collected each). Bundle authors:
`bundlectl registry catalog MANIFEST` writes the catalogs into a manifest; a project's own
servers: `bundlectl tools --live --record` writes theirs into bundlectl.yaml.
"""

from __future__ import annotations

import os
import sys

import anyio
from ruamel.yaml import YAML


async def collect(command: list[str]) -> list[dict[str, object]]:
    from pathlib import Path

    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    from bundlectl.mcpio.live import catalog_entry
    from bundlectl.servers import build

    if command[0] == "--builtin":
        target: object = build(command[1], Path.cwd())
    else:
        target = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
    tools: list[dict[str, object]] = []
    async with Client(target) as client:  # type: ignore[arg-type]
        cursor = None
        while True:
            page = await client.list_tools(cursor=cursor)
            tools += (catalog_entry(tool) for tool in page.tools)
            cursor = page.next_cursor
            if not cursor:
                return tools


def main() -> None:
    args = sys.argv[1:]
    if not args or args[0] in ("-h", "--help"):
        print((__doc__ or "").strip())
        sys.exit(0 if args else 2)
    if args[0] == "--":
        args = args[1:]
    if not args or (args[0] == "--builtin" and len(args) != 2):
        print("usage: collect_catalog.py -- COMMAND [ARG...] | --builtin NAME", file=sys.stderr)
        sys.exit(2)
    tools = anyio.run(collect, args)
    yaml = YAML()
    yaml.width = 100
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.dump({"tools": tools}, sys.stdout)


if __name__ == "__main__":
    main()
