"""Bytes an agent reads before its first call: search mode vs direct mode of `bundlectl serve`.

    python bench/bench_search_bytes.py

An agent allowed every tool of the five built-in bundles plus the npm `server-everything` (from
`tests/npm`, installed by the test command; left out with a note when it is missing). Direct
mode: the whole `tools/list`.
Search mode: its `tools/list` (two tools) plus one `search_tools` at `detail=summary`.
Goal (SPEC 7): search mode <= 5% of direct mode.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

BUNDLES = ["basic", "github", "code-review", "devops", "docs-writer"]
EVERYTHING = (
    Path(__file__).resolve().parent.parent
    / "tests"
    / "npm"
    / "node_modules"
    / ".bin"
    / "mcp-server-everything"
)


async def measure(project: Path, mode: str) -> int:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "bundlectl", "serve", "--agent", "everything", "--mode", mode],
        cwd=str(project),
        env={**os.environ, "BUNDLECTL_HOME": str(project / "home")},
    )
    async with Client(params) as client:
        listed = await client.list_tools()
        size = len(listed.model_dump_json(by_alias=True, exclude_none=True))
        if mode == "search":
            found = await client.call_tool("search_tools", {"query": "create issue"})
            size += len(found.model_dump_json(by_alias=True, exclude_none=True))
        else:
            print(f"direct mode lists {len(listed.tools)} tools")
        return size


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        servers = ""
        if EVERYTHING.exists():
            servers = f"servers:\n  everything: {{command: {EVERYTHING}}}\n"
        else:
            print("note: tests/npm is not installed: server-everything is left out")
        (project / "bundlectl.yaml").write_text(
            f"version: 1\nbundles: {BUNDLES}\n{servers}"
            "agents:\n  everything: {allow: ['*']}\npolicy: {default: deny}\n"
        )
        direct = anyio.run(measure, project, "direct")
        search = anyio.run(measure, project, "search")
    print(f"direct tools/list: {direct:,} bytes")
    print(f"search tools/list + one search_tools (summary): {search:,} bytes")
    print(f"ratio {search / direct:.1%} (goal <= 5%)")


if __name__ == "__main__":
    main()
