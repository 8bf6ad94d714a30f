"""Opening a page in the user's browser (`auth login`, `approvals ui`)."""

from __future__ import annotations

import os
import shlex
import subprocess
import threading
import webbrowser

from bundlectl.output import err


def open_url(url: str) -> None:
    """Open `url` in the user's browser: `$BROWSER` when set (read now, each time: a command
    with `%s` for the URL, or the URL appended), else the system's (`webbrowser`)."""
    command = os.environ.get("BROWSER", "").split(os.pathsep)[0].strip()
    if not command:
        webbrowser.open(url)
        return
    argv = shlex.split(command)
    argv = [part.replace("%s", url) for part in argv] if "%s" in command else [*argv, url]
    try:
        opened = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as exc:
        err(f"warning: could not start $BROWSER ({exc.strerror}); open the URL yourself")
        return
    # Reaped when it ends, never waited for: a browser may stay open.
    threading.Thread(target=opened.wait, name="browser", daemon=True).start()
