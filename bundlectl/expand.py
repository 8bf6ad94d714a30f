"""`${VAR}` and `${VAR:-default}` expansion, done only when a server starts. Pure."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from bundlectl.errors import UsageError

_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
# What a child process needs to run at all; everything else must be given in the config.
INHERITED = (
    "HOME",
    "LOGNAME",
    "PATH",
    "SHELL",
    "TERM",
    "USER",
    "LANG",
    "LC_ALL",
    "TMPDIR",
    "SYSTEMROOT",
    "APPDATA",
    "LOCALAPPDATA",
    "USERPROFILE",
    "TEMP",
    "PATHEXT",
)


def references(text: str) -> list[str]:
    """The variable names `text` refers to."""
    return [m.group(1) for m in _REF.finditer(text)]


def expand(text: str, environ: Mapping[str, str], *, where: str) -> str:
    """Replace every reference; an unset variable without a default is an error naming it."""

    def value(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in environ:
            return environ[name]
        if default is not None:
            return default
        raise UsageError(
            f"{where} needs the environment variable {name}, which is not set",
            hint=f"export {name}=... (or give a default: ${{{name}:-value}})",
        )

    return _REF.sub(value, text)


def child_environment(
    env: Mapping[str, str], environ: Mapping[str, str] | None = None, *, server: str
) -> dict[str, str]:
    """The environment of a stdio server: the basics it needs to run, plus its config `env`."""
    source = os.environ if environ is None else environ
    out = {k: source[k] for k in INHERITED if k in source}
    for key, raw in env.items():
        out[key] = expand(raw, source, where=f"server {server!r} (env.{key})")
    return out
