"""The error funnel: expected failures become positioned lines, a hint and an exit code; a bug
becomes one line and a crash report."""

from __future__ import annotations

import re
import sys
import time
import traceback

from bundlectl import __version__
from bundlectl.config import paths
from bundlectl.errors import BundlectlError
from bundlectl.output import err, status

# Control characters (C0 but tab, DEL, C1): a message may quote a file, an argument or what a
# server sent, and a raw ESC or NUL would reach the terminal as a command or cut the line.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """`text` with control characters written as escapes (`\x1b`), line breaks kept."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def failure(exc: BundlectlError, *, debug: bool = False) -> int:
    """`error: …` lines (one per problem), then `hint: …`; the error's exit code."""
    if debug:
        status(traceback.format_exc())
    if exc.problems:
        for problem in exc.problems:
            err(visible(f"error: {problem.render()}"))
            if problem.hint:
                err(visible(f"  hint: {problem.hint}"))
    else:
        lines = exc.message.splitlines() or [""]
        err(visible(f"error: {lines[0]}"))
        for line in lines[1:]:
            err(visible(line))
    if exc.hint:
        err(visible(f"hint: {exc.hint}"))
    return exc.exit_code


def crash(exc: BaseException, *, debug: bool = False) -> int:
    """A bug: one line, and the full report in a file ready to attach to an issue."""
    report = "".join(traceback.format_exception(exc))
    if debug:
        status(report)
    target = paths.state_dir() / "crash.log"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("a", encoding="utf-8") as handle:
            handle.write(f"--- bundlectl {__version__} at {time.strftime('%Y-%m-%dT%H:%M:%S')}\n")
            # The command name only: argument values may be secrets.
            handle.write(f"command: {sys.argv[1:2]!r}\n{report}\n")
        where = str(target)
    except OSError:
        where = "(could not write the report; rerun with --debug)"
    err(visible(f"internal error: {type(exc).__name__}: {exc} — report written to {where}"))
    return 70
