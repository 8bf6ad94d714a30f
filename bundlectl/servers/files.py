"""The `files` server: read, write and list files below one root folder, and nowhere else."""

from __future__ import annotations

import base64
import mimetypes
import os
from pathlib import Path
from typing import TYPE_CHECKING

from bundlectl.fsio import atomic_write_bytes
from bundlectl.servers._tooling import Blob, Toolbox, ToolFailure

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

MAX_READ_BYTES = 1024 * 1024
MAX_WRITE_BYTES = 1024 * 1024
MAX_ENTRIES = 1000


def confine(root: Path, relative: str, *, must_exist: bool = True) -> Path:
    """The real path of `relative` below `root`; anything that leaves the root is refused.

    Absolute paths, `..` that climbs out, and symlinks (anywhere on the path) that point outside
    are all caught by resolving first and comparing afterwards.
    """
    if not relative or "\x00" in relative:
        raise ToolFailure("path must be a non-empty relative path")
    if os.path.isabs(relative) or relative.startswith("~"):
        raise ToolFailure(f"{relative!r} is absolute; give a path relative to the root folder")
    target = (root / relative).resolve()
    if target != root and not target.is_relative_to(root):
        raise ToolFailure(f"{relative!r} is outside the root folder")
    if must_exist and not target.exists():
        raise ToolFailure(f"{relative!r} does not exist")
    return target


def _is_text(data: bytes) -> bool:
    if b"\x00" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def build(root: Path) -> MCPServer:
    return toolbox(root).server()


def toolbox(root: Path) -> Toolbox:
    box = Toolbox(
        "bundlectl-files", instructions=f"Files below {root}. Paths are relative to that folder."
    )

    @box.tool(annotations={"readOnlyHint": True, "openWorldHint": False}, structured_output=False)
    def read_file(path: str) -> str | Blob:
        """Read a file below the root folder. Text comes back as is; binary files come back as
        an embedded resource (base64 blob). Files over 1 MiB are refused."""
        target = confine(root, path)
        if not target.is_file():
            raise ToolFailure(f"{path!r} is not a file")
        size = target.stat().st_size
        if size > MAX_READ_BYTES:
            raise ToolFailure(f"{path!r} is {size} bytes; the limit is {MAX_READ_BYTES}")
        data = target.read_bytes()
        if _is_text(data):
            return data.decode("utf-8")

        mime = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        return Blob(target.as_uri(), mime, base64.b64encode(data).decode("ascii"))

    @box.tool(
        annotations={"destructiveHint": True, "idempotentHint": True, "openWorldHint": False},
        structured_output=False,
    )
    def write_file(path: str, content: str) -> str:
        """Create or overwrite a UTF-8 text file below the root folder, atomically (readers see
        the old file or the new one). Parent folders are created. At most 1 MiB."""
        data = content.encode("utf-8")
        if len(data) > MAX_WRITE_BYTES:
            raise ToolFailure(f"content is {len(data)} bytes; the limit is {MAX_WRITE_BYTES}")
        target = confine(root, path, must_exist=False)
        if target.is_dir():
            raise ToolFailure(f"{path!r} is a folder")
        target.parent.mkdir(parents=True, exist_ok=True)
        # Re-check after creating parents: a symlinked parent must not lead outside.
        target = confine(root, path, must_exist=False)

        atomic_write_bytes(target, data)
        return f"wrote {len(data)} bytes to {path}"

    @box.tool(annotations={"readOnlyHint": True, "openWorldHint": False}, structured_output=False)
    def list_directory(path: str = ".") -> str:
        """List a folder below the root: one entry per line, `[DIR] name` or `[FILE] name`."""
        target = confine(root, path)
        if not target.is_dir():
            raise ToolFailure(f"{path!r} is not a folder")
        entries = sorted(target.iterdir(), key=lambda p: p.name)
        lines = [
            f"[DIR] {p.name}" if p.is_dir() else f"[FILE] {p.name}" for p in entries[:MAX_ENTRIES]
        ]
        if len(entries) > MAX_ENTRIES:
            lines.append(f"... {len(entries) - MAX_ENTRIES} more entries not shown")
        return "\n".join(lines) if lines else "(empty folder)"

    return box
