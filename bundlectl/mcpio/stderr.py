"""A server's stderr: passed to ours (or a log file), the last lines kept for error messages.
Passed to ours, each line says whose it is (`[files] ...`) and goes through `output.visible`
(its tabs kept): a server is third-party code, and cannot clear the screen, draw a prompt over
ours or print a line that reads as bundlectl's own `error:` or `hint:`."""

from __future__ import annotations

import collections
import contextlib
import os
import sys
import threading
from pathlib import Path
from typing import IO, Any

from bundlectl.errors import UsageError
from bundlectl.output import visible, visible_lines


class StderrTee:
    """A real file descriptor for the child's stderr; a thread copies it through.

    The SDK needs a file with `fileno()` for a child's stderr. We hand it the write end of a pipe
    and copy what arrives to our stderr (or to `log_file` with --quiet), keeping the tail.
    """

    def __init__(
        self, *, log_file: Path | None = None, keep: int = 20, name: str | None = None
    ) -> None:
        self.log_file = log_file
        self.label = f"[{visible(name)}] " if name else ""
        self._sink: IO[Any] | None = None
        if log_file is not None:  # first: a log that cannot be opened leaves no pipe behind
            self._sink = _open_log(log_file)
        read_fd, write_fd = os.pipe()
        self.file: IO[str] = os.fdopen(
            write_fd, "w", buffering=1, encoding="utf-8", errors="replace"
        )
        self._reader = os.fdopen(read_fd, "r", encoding="utf-8", errors="replace")
        self.tail: collections.deque[str] = collections.deque(maxlen=keep)
        self._thread = threading.Thread(target=self._copy, name="server-stderr", daemon=True)
        self._thread.start()

    def _copy(self) -> None:
        with self._reader:
            for line in self._reader:
                self.tail.append(line.rstrip("\n"))
                sink = self._sink or sys.stderr
                try:
                    sink.write(line if self._sink is not None else self._shown(line))
                    sink.flush()
                except (OSError, ValueError):
                    pass

    def _shown(self, line: str) -> str:
        return self.label + visible_lines(line.removesuffix("\n")) + "\n"

    def close(self, wait: float = 1.0) -> None:
        """Close our write end; the copy ends when every child has closed its copy too."""
        with contextlib.suppress(OSError):
            self.file.close()
        self._thread.join(wait)
        if self._sink is not None:
            self._sink.close()

    def last_lines(self, count: int = 5) -> list[str]:
        return [line for line in list(self.tail)[-count:] if line.strip()]


def _open_log(log_file: Path) -> IO[str]:
    """The log a server's stderr goes to under `--quiet`; one that cannot be written is a usage
    error naming it. A server's stderr can hold secrets (a token in an error message): the log
    is its owner's only."""
    try:
        log_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.fchmod(fd, 0o600)  # a log made before this version was 0644
    except OSError as exc:
        raise UsageError(
            f"cannot write the server's log {log_file}: {exc.strerror}",
            hint="fix that folder (the user state folder, or BUNDLECTL_HOME), or run without "
            "--quiet",
        ) from None
    return os.fdopen(fd, "a", encoding="utf-8")
