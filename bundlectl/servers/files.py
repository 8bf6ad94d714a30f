"""The `files` server: read, write and list files below one root folder, and nowhere else.

Every path is resolved and opened below the root in one step (`beneath.Root`), so a symlink
swapped in while a call runs cannot lead outside. The files that govern the agents — the
project's `bundlectl.yaml`, `bundlectl.lock` and `bundlectl.local.yaml`, its project registries,
the MCP client configs `export` writes (`bundlectl.policy.governing`), and `.git/` — cannot be
written through this server: an agent allowed `files.write_file` must not rewrite its own policy,
nor a client config that would start the gateway as another agent. Only the server's command line
(the project's own config) can lift that for a path (`--unprotect PATH`).
"""

from __future__ import annotations

import base64
import mimetypes
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from bundlectl.config.yamlio import read_yaml
from bundlectl.policy.conditions import unportable_name
from bundlectl.policy.governing import folded, governs
from bundlectl.servers._tooling import Blob, Toolbox, ToolFailure
from bundlectl.servers.confined_paths import Outside, Resolved, Root, open_file, replace_file

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

MAX_READ_BYTES = 1024 * 1024
MAX_WRITE_BYTES = 1024 * 1024
MAX_ENTRIES = 1000


def _checked(relative: str) -> str:
    if not isinstance(relative, str) or not relative or "\x00" in relative:
        raise ToolFailure("path must be a non-empty relative path")
    if os.path.isabs(relative) or relative.startswith("~"):
        raise ToolFailure(f"{relative!r} is absolute; give a path relative to the root folder")
    for part in relative.split("/"):
        why = unportable_name(part)
        if why is not None:
            raise ToolFailure(f"{relative!r} has {why} ({part!r}); rename it")
    return relative


def protected_paths(root: Path) -> list[str]:
    """The project registries the root's `bundlectl.yaml` names (root-relative), which hold
    manifests whose agent defaults are policy too."""
    config = root / "bundlectl.yaml"
    try:
        data = read_yaml(config).data
    except Exception:  # no config, or one that does not load: nothing more to name
        return []
    registries = data.get("registries") if isinstance(data, dict) else None
    found = []
    for entry in registries if isinstance(registries, list) else []:
        if isinstance(entry, str) and "://" not in entry and not os.path.isabs(entry):
            normal = os.path.normpath(entry)
            if not normal.startswith(".."):
                found.append(normal)
    return found


class Guard:
    """Which resolved paths may be written."""

    def __init__(self, root: Path, unprotected: Iterable[str] = ()) -> None:
        self.registries = [tuple(p.split("/")) for p in protected_paths(root) if p != "."]
        self.unprotected = {os.path.normpath(p) for p in unprotected}

    def why_not(self, parts: tuple[str, ...]) -> str | None:
        """Why the root-relative path `parts` may not be written (None: it may)."""
        if ("/".join(parts) or ".") in self.unprotected:
            return None
        if ".git" in (folded(part) for part in parts):
            return "it is inside a .git folder"
        governing = governs(parts)
        if governing is not None:
            return governing
        for registry in self.registries:
            if parts[: len(registry)] == registry:
                return f"{'/'.join(registry)} is a project registry (its manifests are policy)"
        return None


def missing(base: Root, path: str) -> str:
    """A path that is not there, said with the folder it was looked for in: paths are relative
    to the server's root (the project's), whatever folder the command ran in."""
    return f"{path!r} does not exist under the root folder {base.path}"


def _resolve(base: Root, path: str, *, create_parents: bool = False) -> Resolved:
    try:
        return base.walk(_checked(path), create_parents=create_parents)
    except Outside as exc:
        text = str(exc)
        raise ToolFailure(
            missing(base, path) if text.endswith("does not exist") else text
        ) from None


def inside(base: Root, path: str) -> str:
    """`path` resolved below the root, root-relative ("." for the root); refused outside it.
    A path whose folders do not exist (a file deleted since) is taken as written."""
    try:
        found = base.walk(_checked(path))
    except Outside as exc:
        lexical = _lexical(path)
        if "does not exist" in str(exc) and lexical[:1] != ("..",):
            return "/".join(lexical) or "."
        raise ToolFailure(str(exc)) from None
    found.close()
    return found.relative


def read_below(base: Root, path: str, limit: int = MAX_READ_BYTES) -> tuple[bytes, str]:
    """A regular file's bytes (at most `limit`) and its resolved root-relative path, opened
    below the root in one step."""
    found = _resolve(base, path)
    try:
        if not found.name:
            raise ToolFailure(f"{path!r} is not a file")
        try:
            fd = open_file(found, os.O_RDONLY | os.O_NONBLOCK)
        except FileNotFoundError:
            raise ToolFailure(missing(base, path)) from None
        except IsADirectoryError:
            raise ToolFailure(f"{path!r} is not a file") from None
        except Outside as exc:
            raise ToolFailure(str(exc)) from None
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise ToolFailure(f"{path!r} is not a file")
            if info.st_size > limit:
                raise ToolFailure(f"{path!r} is {info.st_size} bytes; the limit is {limit}")
            data = handle.read(limit + 1)
        if len(data) > limit:
            raise ToolFailure(f"{path!r} is over {limit} bytes")
        return data, found.relative
    finally:
        found.close()


def _is_text(data: bytes) -> bool:
    if b"\x00" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def build(root: Path, unprotected: Iterable[str] = ()) -> MCPServer:
    return toolbox(root, unprotected).server()


def toolbox(root: Path, unprotected: Iterable[str] = ()) -> Toolbox:
    box = Toolbox(
        "bundlectl-files", instructions=f"Files below {root}. Paths are relative to that folder."
    )
    base = Root(root)
    guard = Guard(root, unprotected)

    def resolve(path: str, *, create_parents: bool = False) -> Resolved:
        return _resolve(base, path, create_parents=create_parents)

    @box.tool(annotations={"readOnlyHint": True, "openWorldHint": False}, structured_output=False)
    def read_file(path: str) -> str | Blob:
        """Read a file below the root folder. Text comes back as is; binary files come back as
        an embedded resource (base64 blob). Files over 1 MiB are refused."""
        data, relative = read_below(base, path)
        if _is_text(data):
            return data.decode("utf-8")
        mime = mimetypes.guess_type(relative)[0] or "application/octet-stream"
        return Blob((base.path / relative).as_uri(), mime, base64.b64encode(data).decode("ascii"))

    @box.tool(
        annotations={"destructiveHint": True, "idempotentHint": True, "openWorldHint": False},
        structured_output=False,
    )
    def write_file(path: str, content: str) -> str:
        """Create or overwrite a UTF-8 text file below the root folder, atomically (readers see
        the old file or the new one). Parent folders are created. At most 1 MiB."""
        return write_below(base, guard, path, content)

    @box.tool(annotations={"readOnlyHint": True, "openWorldHint": False}, structured_output=False)
    def list_directory(path: str = ".") -> str:
        """List a folder below the root: one entry per line, `[DIR] name` or `[FILE] name`."""
        found = resolve(path)
        try:
            try:
                fd = (
                    os.open(
                        found.name,
                        os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW,
                        dir_fd=found.dir_fd,
                    )
                    if found.name
                    else os.dup(found.dir_fd)
                )
            except FileNotFoundError:
                raise ToolFailure(missing(base, path)) from None
            except NotADirectoryError:
                raise ToolFailure(f"{path!r} is not a folder") from None
            try:
                with os.scandir(fd) as scan:
                    entries = sorted(
                        ((e.name, e.is_dir(follow_symlinks=False)) for e in scan),
                        key=lambda item: item[0],
                    )
            finally:
                os.close(fd)
        finally:
            found.close()
        lines = [
            f"[DIR] {name}" if is_dir else f"[FILE] {name}"
            for name, is_dir in entries[:MAX_ENTRIES]
        ]
        if len(entries) > MAX_ENTRIES:
            lines.append(f"... {len(entries) - MAX_ENTRIES} more entries not shown")
        return "\n".join(lines) if lines else "(empty folder)"

    return box


def write_below(base: Root, guard: Guard, path: str, content: str) -> str:
    """Write a text file below the root, atomically, unless the guard protects it."""
    data = content.encode("utf-8")
    if len(data) > MAX_WRITE_BYTES:
        raise ToolFailure(f"content is {len(data)} bytes; the limit is {MAX_WRITE_BYTES}")
    # The path as written, then as resolved (a symlink may lead to a policy file).
    refused = guard.why_not(_lexical(_checked(path)))
    found = None if refused else _resolve(base, path, create_parents=True)
    try:
        why = refused or guard.why_not(found.parts)  # type: ignore[union-attr]
        if why is not None:
            raise ToolFailure(
                f"{path!r} is protected: {why}; this server never writes it (the project's "
                "config can lift that with `--unprotect PATH` in the server's args)"
            )
        assert found is not None
        try:
            replace_file(found, data)
        except (IsADirectoryError, Outside):
            raise ToolFailure(f"{path!r} is a folder") from None
    finally:
        if found is not None:
            found.close()
    return f"wrote {len(data)} bytes to {path}"


def _lexical(path: str) -> tuple[str, ...]:
    """The path as written, normalised without looking at the disk (no `..` above the root)."""
    normal = os.path.normpath(path)
    return () if normal == "." else tuple(normal.split("/"))
