"""The client side of the MCP conformance suite: `bundlectl` as the client under test.

    python client.py SERVER_URL        ($MCP_CONFORMANCE_SCENARIO names the scenario)

The suite starts a server for each scenario and runs this with its URL. We write a throw-away
project whose one server is that URL and run the bundlectl command a user would: `exec` for the
scenarios that call a tool, `tools --live` for the handshake alone. An elicitation is answered on
a terminal (a pseudo-terminal here) the way a person accepting the form's defaults would: Enter
on every field, then `y`.
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Scenarios whose server asks its client (a person at the terminal answers)
ASKED = {"sep-2322-client-request-state"}
LIST = ["tools", "--live", "--server", "conf"]  # exit 1: the live tools differ from the catalog
# A 2026-07-28 result without `resultType`, which the client must take as complete (not ask
# again): `exec` does not ask again, but the MCP SDK's client (2.3) checks every result against
# the revision's schema, which requires the field, and refuses it: exit 5, "broke the protocol".
UNTYPED = ["exec", "conf.test_mrtr_no_result_type"]
# What a user would run for each scenario, in order.
CALLS = {
    "initialize": [LIST],
    "tools_call": [["exec", "conf.add_numbers", "a=2", "b=40"]],
    "elicitation-sep1034-client-defaults": [["exec", "conf.test_client_elicitation_defaults"]],
    "sse-retry": [["exec", "conf.test_reconnection"]],
    # 2026-07-28: the request envelope and its headers, on a listing, a call, a read, a prompt
    "request-metadata": [LIST],
    "json-schema-ref-no-deref": [LIST],  # a network `$ref` is listed, never fetched
    "http-standard-headers": [
        LIST,
        ["exec", "conf.test_headers"],
        ["read", "conf", "file:///path/to/file%20name.txt"],
        ["prompt", "conf"],
    ],
    "http-invalid-tool-headers": [LIST, ["exec", "conf.valid_tool", "region=us-west1"]],
    "http-custom-headers": [],  # its context's calls, each argument mirrored in a header
    # a server's questions by input-required rounds, and its state echoed as it was given
    "sep-2322-client-request-state": [
        ["exec", "conf.test_mrtr_echo_state"],
        ["exec", "conf.test_mrtr_unrelated"],  # (its own process: nothing of another call's)
        ["exec", "conf.test_mrtr_no_state"],
        UNTYPED,
    ],
}


def on_a_terminal(
    command: list[str], cwd: Path, limit: float = 60, env: dict[str, str] | None = None
) -> int:
    """Run `command` with a pseudo-terminal as stdin and stderr; press Enter at each prompt of a
    form and `y` where it asks to confirm. Its output is copied to our stderr."""
    leader, follower = pty.openpty()
    # A person at a terminal, not a CI job: with $CI set, bundlectl asks no one anything.
    env = {k: v for k, v in (env or os.environ).items() if k != "CI"}
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


def signed_in(project: Path) -> int:
    """An auth scenario: sign in as a person would (`auth login`, the browser being
    `tests/servers/browser.py`, which follows the authorization server's redirect back), then
    list the server's tools with the kept token."""
    browser = Path(__file__).parent.parent / "servers" / "browser.py"
    env = {**os.environ, "BROWSER": f"{sys.executable} {browser} %s", "BUNDLECTL_KEYRING": "off"}
    login = [sys.executable, "-m", "bundlectl", "auth", "login", "conf", "--timeout", "60"]
    code = subprocess.run(login, cwd=project, env=env, check=False).returncode
    if code:
        return code
    listed = [sys.executable, "-m", "bundlectl", "tools", "--live", "--server", "conf"]
    code = subprocess.run(listed, cwd=project, env=env, check=False).returncode
    if code not in (0, 1):  # 1: the live tools differ from the (empty) declared catalog
        return code
    if os.environ.get("MCP_CONFORMANCE_SCENARIO") == "auth/scope-step-up":
        # A call the token's scope does not cover: the person at the terminal signs in again
        # (the same scripted browser) and the call goes on.
        called = [sys.executable, "-m", "bundlectl", "exec", "conf.test-tool"]
        return on_a_terminal(called, project, env=env)
    return 0


def main() -> int:
    url, scenario = sys.argv[-1], os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    if scenario not in CALLS and not scenario.startswith("auth/"):
        sys.stderr.write(f"scenario {scenario!r} is not run against bundlectl\n")
        return 2
    with tempfile.TemporaryDirectory() as folder:
        project = Path(folder)
        # A scenario's pre-registered client (its context): the config names it, the secret
        # comes from the environment as a user's would.
        context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
        auth = ""
        if context.get("client_id"):
            os.environ["CONF_CLIENT_SECRET"] = context.get("client_secret", "")
            unattended = "client-credentials" in scenario
            auth = f', auth: {{client_id: "{context["client_id"]}", '
            auth += "grant: client_credentials, " if unattended else ""
            auth += 'client_secret: "${CONF_CLIENT_SECRET}"}'
        if scenario == "auth/basic-cimd":  # the metadata document the suite stands in for
            auth = ', auth: {client_metadata_url: "https://conformance-test.local/client-metadata.json"}'
        (project / "bundlectl.yaml").write_text(
            f'version: 1\nservers:\n  conf: {{url: "{url}", transport: streamable-http{auth}}}\n'
            "policy: {default: allow}\n"
        )
        if "client-credentials" in scenario:  # unattended: no sign-in, straight to the tools
            listed = [sys.executable, "-m", "bundlectl", "tools", "--live", "--server", "conf"]
            code = subprocess.run(listed, cwd=project, check=False).returncode
            return 0 if code == 1 else code
        if scenario.startswith("auth/"):
            return signed_in(project)
        steps = CALLS[scenario] + [  # the calls the scenario asks for by name (its context)
            ["exec", f"conf.{call['name']}", "--args", json.dumps(call.get("arguments") or {})]
            for call in context.get("toolCalls") or []
        ]
        for step in steps:
            command = [sys.executable, "-m", "bundlectl", *step]
            if scenario.startswith("elicitation") or scenario in ASKED:
                code = on_a_terminal(command, project)
            else:
                code = subprocess.run(command, cwd=project, check=False).returncode
            if code and not (step is LIST and code == 1) and not (step is UNTYPED and code == 5):
                return code
        return 0


if __name__ == "__main__":
    sys.exit(main())
