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


def malformed_reference(text: str) -> str | None:
    """What is wrong with the first `${` in `text` that is not a whole reference, if any.

    `${` always starts a reference (there is no escape), so `${UNTERMINATED`, `${}` or `${1X}`
    would otherwise reach a server unexpanded, or expand to something the user did not mean.
    """
    start = text.find("${")
    while start != -1:
        match = _REF.match(text, start)
        if match is None:
            end = text.find("}", start)
            shown = text[start:] if end == -1 else text[start : end + 1]
            if end == -1:
                return f"{shown!r} has no closing '}}'"
            return f"{shown!r} is not a well-formed reference"
        start = text.find("${", match.end())
    return None


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
            return _home(default, environ)
        raise UsageError(
            f"{where} needs the environment variable {name}, which is not set",
            hint=f"export {name}=... (or give a default: ${{{name}:-value}})",
        )

    return _REF.sub(value, text)


def _home(default: str, environ: Mapping[str, str]) -> str:
    """`~` at the start of a default is the home folder, as a shell expands `${VAR:-~/x}`
    (servers receive the value as is, and most do not expand `~` themselves)."""
    if default != "~" and not default.startswith("~/"):
        return default
    home = environ.get("HOME") or os.path.expanduser("~")
    return home + default[1:]


def child_environment(
    env: Mapping[str, str], environ: Mapping[str, str] | None = None, *, server: str
) -> dict[str, str]:
    """The environment of a stdio server: the basics it needs to run, plus its config `env`."""
    source = os.environ if environ is None else environ
    out = {k: source[k] for k in INHERITED if k in source}
    for key, raw in env.items():
        out[key] = expand(raw, source, where=f"server {server!r} (env.{key})")
    return out
