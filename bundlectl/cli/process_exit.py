"""How a bundlectl process ends: at once, once what is still on its way out is out (the console
script after its command, each of `serve --workers`' workers)."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import NoReturn


def leave(code: int) -> NoReturn:
    """End the process now with `code`, once what is still on its way out is out (`entry`;
    each of `serve --workers`' workers)."""
    notify = sys.modules.get("bundlectl.calls.notify")
    if notify is not None:  # announcements of approval requests still being sent
        notify.drain()
    telemetry = sys.modules.get("bundlectl.telemetry")
    if telemetry is not None:  # spans still buffered
        telemetry.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    if "logging" in sys.modules:
        import logging  # noqa: PLC0415 - only when something loaded it

        logging.shutdown()
    os._exit(code)
