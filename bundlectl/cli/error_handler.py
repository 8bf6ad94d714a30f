"""The error funnel: expected failures become positioned lines, a hint and an exit code; a bug
becomes one line and a crash report."""

from __future__ import annotations

import sys
import time
import traceback

from bundlectl import __version__
from bundlectl.config import paths
from bundlectl.errors import BundlectlError
from bundlectl.output import err, status, visible, visible_lines


def _lines(text: str) -> list[str]:
    """A message's lines, split only at its own line breaks (a U+2028 a server put in its text
    is no line break) and shown through `output.visible_lines`: a message may quote a file, an
    argument or what a server sent, which must not redraw the screen or reorder the line."""
    return visible_lines(text).split("\n")


def failure(exc: BundlectlError, *, debug: bool = False) -> int:
    """`error: …` lines (one per problem), then `hint: …`; the error's exit code."""
    if debug:
        status(traceback.format_exc())
    if exc.problems:
        for problem in exc.problems:
            for line in _lines(f"error: {problem.render()}"):
                err(line)
            if problem.hint:
                for line in _lines(f"  hint: {problem.hint}"):
                    err(line)
    else:
        for line in _lines(f"error: {exc.message}"):
            err(line)
    if exc.hint:
        for line in _lines(f"hint: {exc.hint}"):
            err(line)
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
