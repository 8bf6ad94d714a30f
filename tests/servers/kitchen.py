"""A real MCP server for the tests: every kind of content, errors, progress, slowness.

    python kitchen.py [--transport stdio|sse|streamable-http] [--port N]

Each start appends its pid to $KITCHEN_STARTS (when set), so tests can count starts and check
that no process outlives a call.
"""

from __future__ import annotations

import argparse
import base64
import os
import sys
import time
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import (
    AudioContent,
    BlobResourceContents,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)

server = MCPServer("kitchen", log_level="WARNING")


@server.tool()
def echo(text: str, times: int = 1, loud: bool = False) -> str:
    """Repeat text."""
    out = " ".join([text] * times)
    return out.upper() if loud else out


@server.tool()
def add(a: int, b: int) -> dict[str, int]:
    """Add two integers (structured result)."""
    return {"sum": a + b}


@server.tool()
def tags(items: list[str], meta: dict[str, Any] | None = None) -> str:
    """Join a list; report the keys of an object."""
    return ",".join(items) + (f" meta={sorted(meta)}" if meta else "")


@server.tool(structured_output=False)
def media() -> list[Any]:
    """One of every content type."""
    return [
        TextContent(type="text", text="here is everything"),
        ImageContent(type="image", data=base64.b64encode(PNG).decode(), mime_type="image/png"),
        AudioContent(
            type="audio", data=base64.b64encode(b"RIFF....WAVE").decode(), mime_type="audio/wav"
        ),
        ResourceLink(
            type="resource_link",
            uri="file:///tmp/report.txt",
            name="report",
            mime_type="text/plain",
        ),
        EmbeddedResource(
            type="resource",
            resource=TextResourceContents(
                uri="memo://note", mime_type="text/markdown", text="# a note"
            ),
        ),
        EmbeddedResource(
            type="resource",
            resource=BlobResourceContents(
                uri="memo://blob",
                mime_type="application/octet-stream",
                blob=base64.b64encode(b"\x00\x01\x02").decode(),
            ),
        ),
    ]


@server.tool()
def fail(message: str = "it broke") -> str:
    """A tool error (isError: true)."""
    raise ToolError(message)


@server.tool()
async def sleep(seconds: float, ctx: Context) -> str:
    """Sleep, reporting progress every 0.1 s."""
    steps = max(1, int(seconds / 0.1))
    for step in range(steps):
        await ctx.report_progress(step, steps, "sleeping")
        import anyio

        await anyio.sleep(seconds / steps)
    return f"slept {seconds}"


@server.tool()
def huge(size: int) -> str:
    """A long text result."""
    return "x" * size


@server.tool()
def env_keys() -> list[str]:
    """The names of the environment variables the server was started with."""
    return sorted(os.environ)


@server.tool()
def whoami() -> dict[str, Any]:
    """Process facts for the tests."""
    return {"pid": os.getpid(), "cwd": os.getcwd(), "argv": sys.argv[1:]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", default="stdio")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("extra", nargs="*")
    args = parser.parse_args()
    starts = os.environ.get("KITCHEN_STARTS")
    if starts:
        with open(starts, "a") as handle:
            handle.write(f"{os.getpid()}\n")
    if args.transport == "stdio":
        server.run("stdio")
    else:
        server.run(args.transport, host="127.0.0.1", port=args.port)  # type: ignore[call-overload]


if __name__ == "__main__":
    time.sleep(float(os.environ.get("KITCHEN_START_DELAY", "0")))
    main()
