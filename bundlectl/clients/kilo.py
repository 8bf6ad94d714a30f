"""Kilo Code: `.kilocode/mcp.json` in the project.

Source: Kilo Code documentation, "Using MCP in Kilo Code" (kilocode.ai/docs/features/mcp), read
2026-11-23: the Roo Code format (Kilo is a fork): `mcpServers` entries with `alwaysAllow`,
`disabled` and `disabledTools`, `${env:NAME}` references.
"""

from __future__ import annotations

from pathlib import Path

from bundlectl.clients import mcpjson
from bundlectl.clients.roo import FILTER, READ_FILTER, STYLE

CLIENT = mcpjson.client(
    name="kilo",
    title="Kilo Code",
    project_file=".kilocode/mcp.json",
    user_file=lambda: Path(mcpjson.home()) / ".kilocode" / "mcp_settings.json",
    style=STYLE,
    filters=FILTER,
    read_filter=READ_FILTER,
    source=__doc__ or "",
)
