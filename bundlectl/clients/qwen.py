"""Qwen Code: `.qwen/settings.json` in the project (`~/.qwen/settings.json` for the user).

Source: Qwen Code documentation, "MCP servers" and "Configuration"
(qwenlm.github.io/qwen-code-docs), read 2026-11-24: Qwen Code is a fork of Gemini CLI and keeps
its settings format — `{"mcpServers": {NAME: {command, args, env, cwd, includeTools,
excludeTools, trust} | {httpUrl | url, headers}}}` — so it is written and read as Gemini's
(`gemini.py`), in its own folder.
"""

from __future__ import annotations

from pathlib import Path

from bundlectl.clients import gemini, mcpjson
from bundlectl.policy.governing import CLIENT_FILES

CLIENT = mcpjson.client(
    name="qwen",
    title="Qwen Code",
    project_file=CLIENT_FILES["qwen"],
    user_file=lambda: Path(mcpjson.home()) / ".qwen" / "settings.json",
    style=gemini.STYLE,
    filters=gemini.FILTER,
    read_filter=gemini.READ_FILTER,
    source=__doc__ or "",
)
