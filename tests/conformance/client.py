"""The client side of the MCP conformance suite: `bundlectl` as the client under test.

    python client.py SERVER_URL        ($MCP_CONFORMANCE_SCENARIO names the scenario)

The suite starts a server for each scenario and runs this with its URL. We write a throw-away
project whose one server is that URL and run the bundlectl command a user would: `exec` for the
scenarios that call a tool, `tools --live` for the handshake alone. An elicitation is answered on
a terminal (a pseudo-terminal here) the way a person accepting the form's defaults would: Enter
on every field, then `y`.
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CALLS = {
    "initialize": ["tools", "--live", "--server", "conf"],
    "tools_call": ["exec", "conf.add_numbers", "a=2", "b=40"],
    "elicitation-sep1034-client-defaults": ["exec", "conf.test_client_elicitation_defaults"],
    "sse-retry": ["exec", "conf.test_reconnection"],
}


def on_a_terminal(command: list[str], cwd: Path, limit: float = 60) -> int:
    """Run `command` with a pseudo-terminal as stdin and stderr; press Enter at each prompt of a
    form and `y` where it asks to confirm. Its output is copied to our stderr."""
    leader, follower = pty.openpty()
    # A person at a terminal, not a CI job: with $CI set, bundlectl asks no one anything.
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    proc = subprocess.Popen(
        command, cwd=cwd, stdin=follower, stdout=sys.stdout, stderr=follower, env=env
    )
    os.close(follower)
    seen, deadline = b"", time.monotonic() + limit
    while proc.poll() is None and time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.1)
        if not ready:
            continue
        try:
            chunk = os.read(leader, 4096)
        except OSError:
            break
        sys.stderr.write(chunk.decode(errors="replace"))
        seen += chunk
        if seen.rstrip().endswith(b"[y/N]"):
            os.write(leader, b"y\n")
            seen = b""
        elif seen.rstrip().endswith(b":"):
            os.write(leader, b"\n")
            seen = b""
    if proc.poll() is None:
        proc.kill()
    os.close(leader)
    return proc.wait()


def main() -> int:
    url, scenario = sys.argv[-1], os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    if scenario not in CALLS:
        sys.stderr.write(f"scenario {scenario!r} is not run against bundlectl\n")
        return 2
    with tempfile.TemporaryDirectory() as folder:
        project = Path(folder)
        (project / "bundlectl.yaml").write_text(
            f'version: 1\nservers:\n  conf: {{url: "{url}", transport: streamable-http}}\n'
            "policy: {default: allow}\n"
        )
        command = [sys.executable, "-m", "bundlectl", *CALLS[scenario]]
        if scenario.startswith("elicitation"):
            return on_a_terminal(command, project)
        return subprocess.run(command, cwd=project, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
