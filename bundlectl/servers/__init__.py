"""MCP servers that ship inside bundlectl (used by the `basic` and `code-review` bundles).

The table maps a server name to the module that builds it; importing this package does not import
the MCP SDK. Each module has `toolbox(root: Path) -> Toolbox` (its tools as plain functions) and
`build(root: Path) -> MCPServer` (them served by the SDK); `files` also takes the paths its
command line unprotects (`--unprotect PATH`).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bundlectl.policy.conditions import normalised
from bundlectl.servers.confined_paths import Root

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from bundlectl.policy.conditions import PathReader
    from bundlectl.servers._tooling import Toolbox

BUILTIN: dict[str, str] = {
    "files": "bundlectl.servers.files",
    "review": "bundlectl.servers.review",
}


def builtin_of(spec: Any) -> str | None:
    """The built-in server a server entry runs (`bundlectl server NAME`), if any."""
    if (
        spec.transport == "stdio"
        and spec.command == "bundlectl"
        and len(spec.args) >= 2
        and spec.args[0] == "server"
        and spec.args[1] in BUILTIN
    ):
        return str(spec.args[1])
    return None


def root_of(spec: Any, project_root: Path) -> Path:
    """The folder a built-in server's entry confines it to: `--root` in its args, below its
    `cwd` below the project root."""
    from bundlectl.config.expand import expand  # noqa: PLC0415 - the entry's `${VAR}`, when asked

    args = spec.args
    base = project_root / (spec.cwd or ".")
    if "--root" in args and args.index("--root") + 1 < len(args):
        return base / expand(args[args.index("--root") + 1], {}, where=spec.command or "server")
    return base


def build(name: str, root: Path, unprotected: Sequence[str] = ()) -> MCPServer:
    """Construct the built-in server `name`, confined to / working in `root`."""
    return toolbox(name, root, unprotected).server()


def toolbox(name: str, root: Path, unprotected: Sequence[str] = ()) -> Toolbox:
    """The built-in server `name`'s tools as plain functions (no SDK import)."""
    module = importlib.import_module(BUILTIN[name])
    extra = {"unprotected": unprotected} if name == "files" else {}
    box: Toolbox = module.toolbox(root.resolve(), **extra)
    return box


def path_reader(root: Path) -> PathReader:
    """How a built-in server confined to `root` reads a path argument, for the policy's
    `{path: }` conditions (SPEC 10): lexically (a path with more than one meaning has none),
    and as its calls resolve it below the root, links followed. An allow must hold for both."""
    base = Root(root)

    def read(path: str) -> list[str | None]:
        lexical = normalised(path)
        return [None] if lexical is None else [lexical, base.reading(path)]

    return read
