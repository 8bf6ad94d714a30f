"""Process-wide facts set by the console entry point."""

from __future__ import annotations

# True when bundlectl runs as its own process and leaves with os._exit right after the command
# (see cli.entry). Only then may a finished stdio server's shutdown be left to a watchdog.
FAST_EXIT = False
