"""The files that govern what agents may do: bundlectl's own policy files and the MCP configs of
the clients `export` writes. An agent allowed `files.write_file` must not rewrite what binds it or
another agent — its policy, or a client config that starts the gateway as a different agent — so
the built-in files server never writes these; the exporters take their project-level locations
from here, so the two lists cannot drift. No I/O.
"""

from __future__ import annotations

import unicodedata

# The policy's own files, by name, wherever they are below the root (a nested project's too).
POLICY_FILES = frozenset({"bundlectl.yaml", "bundlectl.lock", "bundlectl.local.yaml"})

# Each client's project-level MCP config, relative to the project root, by client name: where
# `export CLIENT` writes (SPEC 8).
CLIENT_FILES: dict[str, str] = {
    "claude-code": ".mcp.json",
    "codex": ".codex/config.toml",
    "copilot": ".github/mcp.json",
    "cursor": ".cursor/mcp.json",
    "gemini": ".gemini/settings.json",
    "kilo": "kilo.json",
    "opencode": "opencode.json",
    "qwen": ".qwen/settings.json",
    "roo": ".roo/mcp.json",
    "vscode": ".vscode/mcp.json",
}

# Other files clients take servers or permissions from: Claude Code's permissions (which
# `export claude-code` writes), the JSONC twins kilo and opencode read, VS Code's settings (an
# `mcp` key there declares servers too).
OTHER_FILES = (
    ".claude/settings.json",
    ".claude/settings.local.json",
    "kilo.jsonc",
    "opencode.jsonc",
    ".vscode/settings.json",
)

# Folders that hold nothing but a client's configuration: every file in them is protected.
CLIENT_FOLDERS = frozenset(
    {".claude", ".codex", ".cursor", ".gemini", ".kilo", ".kilocode", ".opencode", ".qwen", ".roo"}
)

_FILES = frozenset(
    tuple(path.lower().split("/")) for path in (*CLIENT_FILES.values(), *OTHER_FILES)
)


def folded(name: str) -> str:
    """`name` as a file system that ignores case may read it: macOS's compares names
    normalized and case-folded, Windows' upper-cases them, and either reads `.mcp.j\u017fon` (a
    long s) as `.mcp.json` and `k\u0131lo.json` (a dotless i) as `kilo.json`. Compared in this form
    a name is governed on every system where it could stand for a governed one."""
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", name).upper().casefold())


def governs(parts: tuple[str, ...]) -> str | None:
    """Why the root-relative path `parts` governs agents (None: it does not). Names compare
    without case and normalized (`folded`), at any depth (a nested project), and at any
    position of the path: a folder made at a governed name (`.mcp.json/x`) would stand where
    the file belongs, and `export` or "always allow" could no longer write it."""
    lower = tuple(folded(part) for part in parts)
    for end in range(1, len(parts) + 1):
        why = _governs_at(parts[:end], lower[:end])
        if why is not None:
            return why
    return None


def _governs_at(parts: tuple[str, ...], lower: tuple[str, ...]) -> str | None:
    """Why the path ending at `parts[-1]` is a governed name itself."""
    if lower[-1] in POLICY_FILES:
        return f"{parts[-1]} holds the agents' policy"
    if lower[-1] in CLIENT_FOLDERS:
        return f"{lower[-1]}/ holds an MCP client's configuration"
    for length in (1, 2):
        if len(lower) >= length and lower[-length:] in _FILES:
            return f"{'/'.join(parts[-length:])} is an MCP client's configuration"
    return None
