"""Announcing a new approval request (`policy.approvals.notify`): one signed JSON POST per
request, so a chat bot or a CI job can route it to an approver.

The POST runs in a thread of its own and never holds up a call: it is retried with a growing
pause (0.5 s, 1 s, 2 s) when the receiver fails or cannot be reached, then given up with a
warning. A process about to exit (`exec --no-wait`) gives the thread up to `EXIT_GRACE`
seconds to finish (`finish`). The body holds what `bundlectl approvals show` shows — the
arguments with secrets as their `${NAME}` — and never a secret; with `secret:` each request carries
`X-Bundlectl-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">` and the timestamp in
`X-Bundlectl-Timestamp`, so a receiver can check it came from us and is not a replay.
"""

from __future__ import annotations

import atexit
import hashlib
import hmac
import json
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from bundlectl.calls.toolchange import change_lines, changed_parts
from bundlectl.config.expand import expand
from bundlectl.config.settings import ApprovalNotify
from bundlectl.errors import BundlectlError
from bundlectl.output import err, visible
from bundlectl.state import Approval

PAUSES = (0.5, 1.0, 2.0)  # seconds before each retry
TIMEOUT = 5.0  # seconds one POST may take
EXIT_GRACE = 5.0  # seconds an exiting process waits for announcements still being sent
_SENDING: list[threading.Thread] = []


SUMMARY_VALUE = 120  # characters of one argument's value the summary shows


def summary(approval: Approval, arguments: Any) -> str:
    """The request in a few lines for a person (a chat message): every text through
    `visible`, each argument's value folded after `SUMMARY_VALUE` characters."""
    b = approval.binding
    lines = [f"agent {visible(repr(b.agent))} wants to call {visible(b.qualified)}"]
    lines.append(f"asked by: {visible(approval.rule)}")
    if isinstance(arguments, dict):
        for key, value in arguments.items():
            text = json.dumps(value, ensure_ascii=False)
            size = len(value) if isinstance(value, str) else len(text)
            shown = visible(text, SUMMARY_VALUE, size=size)
            lines.append(f"  {visible(str(key), SUMMARY_VALUE)}: {shown}")
    return "\n".join(lines)


def body(approval: Approval) -> dict[str, Any]:
    """What is announced: the request as `approvals show --format json` has it, and a
    `summary` for a person to read (`visible`: no control or bidi character of an argument
    reaches a chat message raw)."""
    b = approval.binding
    if b.tool_change:
        lines = [f"tool {visible(b.qualified)} is not what was reviewed (policy.pin_tools)"]
        lines += [visible(line) for line in change_lines(approval)]
        return {
            "event": "tool.changed",
            "id": approval.id,
            "tool": b.qualified,
            "project": b.project,
            "rule": approval.rule,
            "changed": changed_parts(approval),
            "summary": "\n".join(lines),
            "created": round(approval.created, 3),
            "expires": round(approval.expires, 3),
            "approve": f"bundlectl approvals approve {approval.id}",
            "deny": f"bundlectl approvals deny {approval.id} --reason TEXT",
        }
    arguments = json.loads(approval.shown)
    return {
        "event": "approval.requested",
        "id": approval.id,
        "agent": b.agent,
        "tool": b.qualified,
        "project": b.project,
        "rule": approval.rule,
        "arguments": arguments,
        "summary": summary(approval, arguments),
        "arguments_sha256": b.digest,
        "created": round(approval.created, 3),
        "expires": round(approval.expires, 3),
        "approve": f"bundlectl approvals approve {approval.id}",
        "deny": f"bundlectl approvals deny {approval.id} --reason TEXT",
    }


def signature(key: bytes, timestamp: str, data: bytes) -> str:
    return "sha256=" + hmac.new(key, timestamp.encode() + b"." + data, hashlib.sha256).hexdigest()


def announce(settings: ApprovalNotify, approval: Approval) -> None:
    """Start sending the announcement of `approval`; never raises, never waits."""
    try:
        url = expand(settings.url, os.environ, where="policy.approvals.notify.url")
        key = (
            expand(settings.secret, os.environ, where="policy.approvals.notify.secret").encode()
            if settings.secret
            else None
        )
    except BundlectlError as exc:
        err(f"warning: approval request {approval.id} not announced: {exc.message}")
        return
    data = json.dumps(body(approval), ensure_ascii=False).encode()
    thread = threading.Thread(
        target=_send, args=(url, key, data, approval.id), name="approval-notify", daemon=True
    )
    thread.start()
    if not _SENDING:
        atexit.register(drain)
    _SENDING.append(thread)


def _send(url: str, key: bytes | None, data: bytes, approval_id: str) -> None:
    problem = ""
    for attempt in range(len(PAUSES) + 1):
        if attempt:
            time.sleep(PAUSES[attempt - 1])
        timestamp = str(int(time.time()))
        headers = {"Content-Type": "application/json", "X-Bundlectl-Timestamp": timestamp}
        if key is not None:
            headers["X-Bundlectl-Signature"] = signature(key, timestamp, data)
        request = urllib.request.Request(url, data=data, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
                if 200 <= response.status < 300:
                    return
                problem = f"HTTP {response.status}"
        except urllib.error.HTTPError as exc:
            problem = f"HTTP {exc.code}"
        except (urllib.error.URLError, OSError, ValueError) as exc:
            problem = str(getattr(exc, "reason", exc))
    parts = urllib.parse.urlsplit(url)
    where = f"{parts.scheme}://{parts.hostname or ''}{f':{parts.port}' if parts.port else ''}"
    where += parts.path  # no user, password or query: they may hold a secret
    err(
        f"warning: approval request {approval_id} could not be announced to {where} "
        f"({problem}, {len(PAUSES) + 1} tries)"
    )


def drain() -> None:
    """Give the announcements still being sent up to `EXIT_GRACE` seconds (at exit)."""
    deadline = time.monotonic() + EXIT_GRACE
    for thread in _SENDING:
        thread.join(max(0.0, deadline - time.monotonic()))
