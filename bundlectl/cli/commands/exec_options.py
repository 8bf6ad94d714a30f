"""`bundlectl exec`'s command line as parsed (`ExecOptions`) and the call it names (`Parsed`):
read by the command's front (`exec`) and by the call itself (`exec_call`). Nothing here loads
YAML, pydantic, an event loop or the MCP SDK."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bundlectl.cli.options import Format


@dataclass(frozen=True)
class ExecOptions:
    """`bundlectl exec`'s command line as typer parsed it: declared once, in
    `call_commands.exec_`, and read here and by `exec_call` (never passed on option by option).
    `fast_exit`: the process leaves with os._exit once the command returns, so a finished stdio
    server's shutdown may be left to the detached watchdog."""

    config: Path | None
    tool: str | None
    pairs: tuple[str, ...]
    agent: str | None
    args_json: str | None
    timeout: float | None
    connect_timeout: float
    yes: bool
    fmt: Format
    output_dir: Path | None
    quiet: bool
    batch: Path | None
    fast_exit: bool = False
    follow_links: bool = False
    wait: bool = True


@dataclass(frozen=True)
class Parsed:
    """The call the command line names: its tool, its arguments (KEY=VALUE pairs, and the JSON
    object of --args), and the agent that makes it."""

    server: str
    name: str
    split: list[tuple[str, str]]
    base: dict[str, Any]
    who: str
