"""Client config formats for `export` and `import` (SPEC 8): one module per client, listed
here. Each module says where its client keeps its file, how it writes a `${VAR}` reference,
which per-tool filter it has, and how to write and read its file, with the shared model of
`bundlectl.clients.base`.

Importing this package loads no client module (the CLI's help and completion list the names
at start-up); `get` loads the one asked for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bundlectl.clients.base import Client

# The clients `export` and `import` know, each with its module of this package.
MODULES = {
    "claude-desktop": "claude_desktop",
    "claude-code": "claude_code",
    "cursor": "cursor",
    "vscode": "vscode",
    "roo": "roo",
    "kilo": "kilo",
    "codex": "codex",
    "gemini": "gemini",
    "qwen": "qwen",
    "opencode": "opencode",
    "copilot": "copilot",
}
NAMES = tuple(MODULES)


def check_client_name(name: str, *, what: str = "client", also: tuple[str, ...] = ()) -> None:
    """Refuse a name that is no client (nor one of `also`, such as import's `agix`): a usage
    error naming the closest (`export claud` → did you mean 'claude-code'?)."""
    known = [*NAMES, *also]
    if name in known:
        return
    from bundlectl.errors import UsageError  # noqa: PLC0415
    from bundlectl.suggest import Suggester  # noqa: PLC0415 - only for a wrong name

    close = Suggester(known).closest(name, n=1, cutoff=0.6)
    raise UsageError(
        f"unknown {what} {name!r}" + (f"; did you mean {close[0]!r}?" if close else ""),
        hint=f"{what}s: {', '.join(known)}",
    )


def get(name: str) -> Client:
    """The client called `name`; a usage error with a did-you-mean for an unknown one."""
    check_client_name(name)
    client: Client = importlib.import_module(f"bundlectl.clients.{MODULES[name]}").CLIENT
    return client


def every() -> list[Client]:
    """All the clients, in the order of `NAMES`."""
    return [get(name) for name in NAMES]
