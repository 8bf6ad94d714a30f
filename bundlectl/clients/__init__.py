"""Client config formats for `export` and `import` (SPEC 8): one module per client, listed
here. Each module says where its client keeps its file, how it writes a `${VAR}` reference,
which per-tool filter it has, and how to write and read its file, with the shared model of
`bundlectl.clients.base`.
"""

from __future__ import annotations

from bundlectl.clients import (
    claude_code,
    claude_desktop,
    codex,
    copilot,
    cursor,
    gemini,
    kilo,
    opencode,
    qwen,
    roo,
    vscode,
)
from bundlectl.clients.base import Client, Export, Imported, Misfit, ServerPlan
from bundlectl.options import CLIENT_NAMES, check_client_name

__all__ = ["NAMES", "Client", "Export", "Imported", "Misfit", "ServerPlan", "get"]
NAMES = CLIENT_NAMES  # the names, without loading a client module (the CLI's choices)

CLIENTS = {
    client.name: client
    for client in (
        claude_desktop.CLIENT,
        claude_code.CLIENT,
        cursor.CLIENT,
        vscode.CLIENT,
        roo.CLIENT,
        kilo.CLIENT,
        codex.CLIENT,
        gemini.CLIENT,
        qwen.CLIENT,
        opencode.CLIENT,
        copilot.CLIENT,
    )
}


def get(name: str) -> Client:
    """The client called `name`; a usage error with a did-you-mean for an unknown one."""
    check_client_name(name)
    return CLIENTS[name]
