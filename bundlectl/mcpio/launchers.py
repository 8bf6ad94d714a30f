"""What a stdio server's command needs, and running a pinned PyPI server without `uvx`.

`uvx PKG==VERSION` downloads the package into uv's cache on first use: it needs uv and the
network. When exactly that version of PKG is installed beside bundlectl (`pip install
'bundlectl[git]'` installs the `code-review` bundle's git server), the same code is run from this
environment instead, so the bundle works offline and without uv. Anything else runs as written.
"""

from __future__ import annotations

import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bundlectl.config.models import ServerSpec

# PEP 503-normalisable distribution name, an exact `==` pin.
_PINNED = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!_-]+)$")
_NEEDS = {
    "npx": "Node.js (npx) and the npm registry on first use",
    "node": "Node.js",
    "uvx": "uv (uvx) and PyPI on first use",
    "pipx": "pipx and PyPI on first use",
    "docker": "docker (and its registry on first use)",
    "podman": "podman (and its registry on first use)",
}


@dataclass(frozen=True)
class Pinned:
    """A `uvx` launch of one exact PyPI release: which package, version and command."""

    package: str
    version: str
    script: str  # the console script to run (`--from PKG==V SCRIPT`, else the package's name)
    args: tuple[str, ...]


def pinned_uvx(command: str, args: list[str]) -> Pinned | None:
    """`uvx PKG==V ARGS...` or `uvx --from PKG==V SCRIPT ARGS...`; None for anything else."""
    if command != "uvx" or not args:
        return None
    if args[0] == "--from" and len(args) >= 3:
        match = _PINNED.match(args[1])
        return Pinned(match[1], match[2], args[2], tuple(args[3:])) if match else None
    match = _PINNED.match(args[0])
    return Pinned(match[1], match[2], match[1], tuple(args[1:])) if match else None


def local_command(pinned: Pinned) -> list[str] | None:
    """The argv that runs the pinned release from this environment, when it is installed here."""
    from importlib import metadata

    try:
        dist = metadata.distribution(pinned.package)
    except metadata.PackageNotFoundError:
        return None
    if dist.version != pinned.version:
        return None
    for entry in dist.entry_points:
        if entry.group == "console_scripts" and entry.name == pinned.script:
            module, _, attr = entry.value.partition(":")
            call = f"from {module} import {attr.strip() or 'main'} as run; sys.exit(run())"
            return [sys.executable, "-c", f"import sys; {call}", *pinned.args]
    return None


def resolve_argv(argv: list[str]) -> list[str]:
    """The command to start: a pinned `uvx` release from this environment when it is here."""
    pinned = pinned_uvx(argv[0], argv[1:]) if argv else None
    local = local_command(pinned) if pinned else None
    return local or argv


def needs(spec: ServerSpec) -> str:
    """What the server needs to run, in words (for `show`)."""
    if spec.transport != "stdio":
        return f"network access to {spec.url}"
    if spec.command == "bundlectl" and spec.args[:1] == ["server"]:
        return "nothing: it runs inside bundlectl"
    pinned = pinned_uvx(spec.command or "", spec.args)
    if pinned is not None:
        release = f"{pinned.package}=={pinned.version}"
        if local_command(pinned):
            return f"nothing more: {release} is installed beside bundlectl and runs offline"
        return f"{_NEEDS['uvx']}; or `pip install {release}` beside bundlectl to run it offline"
    return _NEEDS.get(spec.command or "", f"the {spec.command!r} command on PATH")


def as_exec_runs(spec: ServerSpec) -> tuple[ServerSpec, str | None]:
    """The server's entry for a client's file, started as `exec` would start it on this
    machine: as written when that works here (`uvx` on PATH: the portable form a team shares),
    else a pinned release installed beside bundlectl from this environment (its console script,
    else this Python); and, when this machine cannot start it at all, what it needs."""
    pinned = pinned_uvx(spec.command or "", spec.args) if spec.transport == "stdio" else None
    if pinned is None or shutil.which("uvx") is not None:
        return spec, None
    local = local_command(pinned)
    if local is None:
        return spec, needs(spec)
    script = Path(sys.executable).parent / pinned.script
    argv = [str(script), *pinned.args] if script.is_file() else local
    return spec.model_copy(update={"command": argv[0], "args": argv[1:]}), None
