"""6xx: what the tools tell the model (#60) — each declared tool's name, description and
parameters read by `policy.descriptions`, reported at their position."""

from __future__ import annotations

from collections.abc import Iterator

from bundlectl.lint.context import Context, at
from bundlectl.lint.rules import Finding
from bundlectl.output import visible
from bundlectl.policy.descriptions import scan_tool


def _named(server: str, tool: str) -> list[str]:
    """How a tool can be spoken of in another server's description: qualified, by its gateway
    name, or by a distinctive bare name (an underscore and 8 characters: `send_email`, never
    `search`)."""
    names = [f"{server}.{tool}", f"{server}__{tool}"]
    if "_" in tool and len(tool) >= 8:
        names.append(tool)
    return names


def descriptions(ctx: Context) -> Iterator[Finding]:
    """BCL601-606, at the name, description or parameter of a declared tool."""
    servers = list(ctx.servers())
    known: dict[str, set[str]] = {}
    for _, server, spec in servers:
        known.setdefault(server, set()).update(t.name for t in spec.tools)
    if ctx.resolution is not None:
        for ref in ctx.resolution.catalog.tools:
            known.setdefault(ref.server, set()).add(ref.tool)
    for doc, server, spec in servers:
        others = frozenset(
            name
            for other, tools in known.items()
            if other != server
            for tool in tools
            for name in _named(other, tool)
        )
        for index, tool in enumerate(spec.tools):
            for hit in scan_tool(tool.name, tool.description, tool.input_schema, others):
                path = ("servers", server, "tools", index, *hit.where)
                yield at(
                    hit.rule,
                    doc,
                    path,
                    f"tool {visible(f'{server}.{tool.name}')}: {hit.message}",
                    anchor=f"{server}.{tool.name}:{'/'.join(map(str, hit.where))}",
                )
