"""A real MCP server with a prompt and a resource template whose arguments complete.

python pantry.py
"""

from __future__ import annotations

import _unmeasured  # noqa: F401  # first: see its docstring
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp_types import Completion, PromptReference

server = MCPServer("pantry", log_level="WARNING")
DISHES = ["soup", "salad", "sorbet", "stew"]
ITEMS = ["flour", "figs", "fennel"]


@server.tool()
def stock() -> str:
    """What is on the shelves (a tool, so that an agent allowed it uses the server)."""
    return ", ".join(ITEMS)


@server.prompt()
def recipe(dish: str) -> str:
    """A recipe for a dish."""
    return f"Cook {dish}."


@server.resource("pantry://shelf/{item}")
def shelf(item: str) -> str:
    return f"{item}: 3 left"


# Personal data in listings (the tokenizer's): a resource URI, names and descriptions.
@server.resource(
    "pantry://suppliers/ann@example.com",
    name="orders of ann@example.com",
    description="What ann@example.com delivers.",
)
def supplier() -> str:
    return "figs, from ann@example.com"


@server.prompt(description="Write to the supplier, ann@example.com.")
def order(item: str) -> str:
    return f"Order {item}."


@server.completion()
async def complete(ref: Any, argument: Any, context: Any) -> Completion:
    words = DISHES if isinstance(ref, PromptReference) else ITEMS
    if isinstance(ref, PromptReference) and argument.value == "@":
        return Completion(values=["chef@example.com"])  # personal data, for the tokenizer
    return Completion(values=[w for w in words if w.startswith(argument.value)])


if __name__ == "__main__":
    server.run("stdio")
