"""Search mode: two tools (`search_tools`, `call_tool`) in front of every server, instead of every
tool listed."""

from __future__ import annotations

from typing import TYPE_CHECKING

import mcp_types as types

from bundlectl.mcpio.requests import JsonObject

if TYPE_CHECKING:
    from bundlectl.config.models import ToolSpec


def listed_name(tool: types.Tool) -> str:
    return tool.name


DETAILS = ("name", "summary", "full")


def described(server: str, tool: types.Tool, detail: str) -> str | JsonObject:
    """One search result: the qualified name, with the first line of the description
    (`summary`) or the whole definition (`full`)."""
    name = f"{server}.{tool.name}"
    if detail == "name":
        return name
    item: JsonObject = {"name": name}
    description = (tool.description or "").strip()
    if detail == "summary":
        item["description"] = description.splitlines()[0] if description else ""
        return item
    item["description"] = description
    item["input_schema"] = tool.input_schema
    if tool.output_schema:
        item["output_schema"] = tool.output_schema
    if tool.annotations:
        item["annotations"] = tool.annotations.model_dump(by_alias=True, exclude_none=True)
    return item


def search_mode_tools() -> list[types.Tool]:
    """Search mode's whole `tools/list`: find tools, then call them by name."""
    search_schema = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "Words to match; empty lists all."},
            "server": {"type": "string", "description": "Only this server's tools."},
            "detail": {"type": "string", "enum": list(DETAILS), "default": "summary"},
            "limit": {"type": "integer", "minimum": 1, "default": 20},
        },
    }
    call_schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "server.tool, as search_tools names it."},
            "arguments": {"type": "object", "description": "The tool's arguments."},
        },
        "required": ["name"],
    }
    return [
        types.Tool(
            name="search_tools",
            description="Find the tools you may call: name only, a summary, or full schemas.",
            input_schema=search_schema,
            annotations=types.ToolAnnotations(read_only_hint=True),
        ),
        types.Tool(
            name="call_tool",
            description="Call a tool found with search_tools, by its server.tool name.",
            input_schema=call_schema,
        ),
    ]


def declared_tool(spec: ToolSpec) -> types.Tool:
    annotations = spec.annotations or None
    return types.Tool(
        name=spec.name,
        title=spec.title,
        description=spec.description or None,
        input_schema=spec.input_schema,
        output_schema=spec.output_schema,
        annotations=types.ToolAnnotations(**annotations) if annotations else None,
    )
