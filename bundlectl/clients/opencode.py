"""opencode: `opencode.json` in the project (`~/.config/opencode/opencode.json` for the user).

Source: opencode documentation, "MCP servers" and "Config" (opencode.ai/docs), read 2026-11-24:
servers under the top-level `mcp` key, `{type: "local", command: [argv...], environment,
enabled}` or `{type: "remote", url, headers, enabled}`; references are written `{env:NAME}`.
Kilo CLI is a fork of opencode and reads the same shape (`kilo.py`), so the two share it.

Like Kilo's, opencode's per-tool switches are its general `tools`/`permission` maps, which
bundlectl has not verified to deny an MCP tool: only a server the agent may use whole is
exported directly; any narrower policy goes through the gateway (`--via auto`) or is refused
(`--via direct`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from bundlectl.clients import kilo, mcpjson
from bundlectl.policy.governing import CLIENT_FILES

CLIENT = dataclasses.replace(
    mcpjson.client(
        name="opencode",
        title="opencode",
        project_file=CLIENT_FILES["opencode"],
        user_file=lambda: Path(mcpjson.home()) / ".config" / "opencode" / "opencode.json",
        style=kilo.STYLE,
        filters=kilo.whole_servers_only("opencode"),
        source=__doc__ or "",
    ),
    read=kilo.read,
    jsonc=True,
)
