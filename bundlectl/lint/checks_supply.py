"""4xx: supply chain — packages run by npx, uvx, pipx and docker are pinned."""

from __future__ import annotations

import re
from collections.abc import Iterator

from bundlectl.lint.context import Context, at
from bundlectl.lint.rules import Finding

_NPM_PINNED = re.compile(r"^(@[^/@\s]+/)?[^@\s]+@\d+\.\d+\.\d+([-+][\w.-]+)?$")
_PY_PINNED = re.compile(r"^[A-Za-z0-9._\[\],-]+(==|@)\d[\w.!+-]*$")
_IMAGE_PINNED = re.compile(r"(@sha256:[0-9a-f]{64}$)|(:(?!latest$)[\w][\w.-]*$)")


def _package_index(command: str, args: list[str]) -> tuple[int, str] | None:
    """The index of the package argument, and what kind of package it is."""
    positional = [(i, a) for i, a in enumerate(args) if not a.startswith("-")]
    base = command.rsplit("/", 1)[-1]
    if base == "npx" and positional:
        return positional[0][0], "npm"
    if base in ("uvx", "uv") and positional:
        index = positional[0][0]
        if base == "uv":  # uv tool run PKG
            rest = [p for p in positional if p[1] not in ("tool", "run")]
            if not rest:
                return None
            index = rest[0][0]
        return index, "python"
    if base == "pipx" and len(positional) >= 2 and positional[0][1] == "run":
        return positional[1][0], "python"
    if base in ("docker", "podman") and positional and positional[0][1] == "run":
        return _image_index(args), "image"
    return None


def _image_index(args: list[str]) -> int:
    """docker run [OPTIONS] IMAGE: skip options and their values."""
    takes_value = {
        "-e",
        "--env",
        "-v",
        "--volume",
        "-p",
        "--publish",
        "--name",
        "-w",
        "--workdir",
        "--network",
        "-u",
        "--user",
        "--entrypoint",
        "--env-file",
        "--mount",
        "--platform",
        "-l",
        "--label",
    }
    index = args.index("run") + 1
    while index < len(args):
        arg = args[index]
        if arg in takes_value:
            index += 2
        elif arg.startswith("-"):
            index += 1
        else:
            return index
    return len(args) - 1


def unpinned(ctx: Context) -> Iterator[Finding]:
    """BCL401."""
    for doc, name, spec in ctx.servers():
        if spec.transport != "stdio" or not spec.command:
            continue
        found = _package_index(spec.command, spec.args)
        if found is None or found[0] >= len(spec.args):
            continue
        index, kind = found
        package = spec.args[index]
        pinned = {"npm": _NPM_PINNED, "python": _PY_PINNED, "image": _IMAGE_PINNED}[kind]
        if not pinned.search(package):
            yield at(
                "BCL401",
                doc,
                ("servers", name, "args", index),
                f"{spec.command} runs {package!r} without an exact version",
                anchor=f"{name}:{package}",
            )
