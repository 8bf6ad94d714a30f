"""`bundlectl approvals list|show|approve|deny`: the approver's side of calls held for a person's
approval (SPEC 11). The requests live in the state store; every decision is audited."""

from __future__ import annotations

import getpass
import secrets
import socket
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bundlectl.calls.approval import (
    decision_text,
    described,
    progress_text,
    settle,
    undeclared,
)
from bundlectl.calls.toolchange import change_lines
from bundlectl.cli.options import Format
from bundlectl.config.local import local_path
from bundlectl.config.paths import CONFIG_NAME, display_path
from bundlectl.config.project import load_project, optional_project
from bundlectl.config.settings import option_seconds
from bundlectl.errors import BundlectlError, UsageError
from bundlectl.output import JSON_FORMAT_VERSION, emit_json, err, out, span_text, table, visible
from bundlectl.state import Approval, Binding, Store, open_store

if TYPE_CHECKING:
    from bundlectl.resolve.resolved import Resolution


def _store(config: Path | None) -> Store:
    """The project's state store (`state.url`), or this machine's SQLite one outside a project
    or when the project names none."""
    project = optional_project(config)
    state = project.config.state if project is not None else None
    return open_store(state.url if state is not None else None)


def _approver() -> str:
    """Who decides, as the audit log and the caller are told: the user at this machine."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()} (cli)"


def declared_schemas() -> Callable[[Binding], Mapping[str, Any] | None]:
    """The declared input schema of a request's tool, from its project as configured now (each
    project loaded once); None when that project does not load or lacks the tool."""
    from bundlectl.resolve.resolved import resolve_project  # noqa: PLC0415 - show and ui only

    loaded: dict[str, Resolution | None] = {}

    def schema(binding: Binding) -> Mapping[str, Any] | None:
        if binding.project not in loaded:
            try:
                config = Path(binding.project) / CONFIG_NAME
                loaded[binding.project] = resolve_project(load_project(config))
            except BundlectlError:
                loaded[binding.project] = None
        resolution = loaded[binding.project]
        return resolution.catalog.input_schema(binding.server, binding.tool) if resolution else None

    return schema


def _waited_on(approval: Approval, now: float) -> bool:
    """A pending request whose caller waits for the answer now."""
    return approval.state(now) == "pending" and approval.waited_on(now)


def _ago(stamp: float, now: float) -> str:
    return span_text(now - stamp)


def list_requests(config: Path | None, *, everything: bool, fmt: Format) -> int:
    now = time.time()
    found = _store(config).listed(everything=everything)
    if fmt is Format.json:
        requests = [described(a, now) for a in found]
        emit_json({"format_version": JSON_FORMAT_VERSION, "approvals": requests})
        return 0
    if not found:
        out("no calls are waiting for approval" if not everything else "no approval requests")
        return 0
    rows = [
        [
            a.id,
            a.state(now) + (" (waited on)" if _waited_on(a, now) else ""),
            a.binding.agent or "-",
            a.binding.qualified + (" (tool changed)" if a.binding.tool_change else ""),
            _ago(a.created, now),
            span_text(a.expires - now) if a.state(now) == "pending" else "-",
            display_path(Path(a.binding.project)),
        ]
        for a in found
    ]
    table(rows, ["ID", "STATUS", "AGENT", "TOOL", "AGE", "EXPIRES IN", "PROJECT"])
    return 0


def _found(config: Path | None, approval_id: str) -> Approval:
    approval = _store(config).get(approval_id)
    if approval is None:
        raise UsageError(
            f"no approval request {approval_id!r}",
            hint="`bundlectl approvals list` shows the pending ones",
        )
    return approval


def show(config: Path | None, approval_id: str, *, fmt: Format) -> int:
    now = time.time()
    approval = _found(config, approval_id)
    marked = undeclared(approval, declared_schemas()(approval.binding))
    if fmt is Format.json:
        described_ = {**described(approval, now), "undeclared": marked}
        emit_json({"format_version": JSON_FORMAT_VERSION, **described_})
        return 0
    b = approval.binding
    state = approval.state(now)
    out(f"approval request {visible(approval.id)}: {state}")
    if b.tool_change:
        out(f"  tool {visible(b.qualified)} is not what was reviewed (policy.pin_tools)")
    else:
        out(f"  agent {visible(repr(b.agent))} wants to call {visible(b.qualified)}")
    out(f"  asked by: {visible(approval.rule)}")
    if approval.requester:
        out(f"  requested by: {visible(approval.requester)} (who may not approve it)")
    out(f"  project: {visible(display_path(Path(b.project)))}")
    out(f"  requested {_ago(approval.created, now)} ago")
    if state == "pending":
        out(f"  expires in {span_text(approval.expires - now)}")
        if _waited_on(approval, now):
            out("  a caller is waiting for the answer (it makes the call once approved)")
        if progress_text(approval):
            out(f"  {visible(progress_text(approval))}")
    if approval.decided_by:
        out(f"  {visible(decision_text(approval))}")
    if b.tool_change:
        out("  what changed (- as reviewed, + as the server gives it now):")
        for line in change_lines(approval):
            out(f"    {visible(line)}")
        out(
            "  approving it pins the new definition on this machine (bundlectl.local.yaml); "
            "`bundlectl pins update` then records it in bundlectl.yaml for review"
        )
        return 0
    out(f"  arguments ({b.digest[:23]}…; secrets shown as ${{NAME}}):")
    # The stored JSON breaks lines only between members (a value's line breaks are escaped in
    # it): split there alone, and escape what JSON leaves raw (U+2028, C1 controls, bidi
    # overrides), so no value can start a line of its own or redraw the ones before it.
    for line in approval.shown.split("\n"):
        out(f"    {visible(line)}")
    if marked:
        names = ", ".join(visible(name) for name in marked)
        out(f"  not declared by the tool (it may ignore them, or a server misuse them): {names}")
    return 0


def decide(
    config: Path | None,
    approval_id: str,
    *,
    approve: bool,
    duration: str | None = None,
    reason: str | None = None,
    once: bool = False,
) -> int:
    if once and duration is not None:
        raise UsageError("--once and --for exclude each other")
    until = None
    if duration is not None:
        until = time.time() + option_seconds(duration, "--for", "30m, 8h, 1d")
    approval = settle(
        _store(config), approval_id, approve=approve, by=_approver(), reason=reason, until=until
    )
    b = approval.binding
    if b.tool_change:
        if approve:
            where = display_path(local_path(Path(b.project) / CONFIG_NAME))
            out(
                f"approved {approval.id}: {b.qualified}'s new definition is pinned on this "
                f"machine ({where}); record it for review with `bundlectl pins update`"
            )
        else:
            out(f"denied {approval.id}: {b.qualified} stays refused as it is now")
        return 0
    if approve and approval.status == "pending":  # more people must approve
        left = approval.needed - len(approval.approved_by)
        out(f"approved {approval.id}: {approval.progress}; {left} more must approve it")
    elif approve:
        scope = f"for {duration}" if duration else "once"
        out(
            f"approved {approval.id}: agent {b.agent!r} may call {b.qualified} {scope} "
            "with exactly these arguments"
        )
    else:
        out(f"denied {approval.id}: agent {b.agent!r} may not call {b.qualified}")
    return 0


def ui(config: Path | None, *, port: int, browser: bool) -> int:
    """Serve the approvers' page on loopback until Ctrl-C: the requests of this project (every
    project's outside one), a sign-in link good once."""
    # A web server: loaded only for this command.
    from bundlectl.browser import open_url  # noqa: PLC0415
    from bundlectl.gateway.approvers import ApprovalsPage, Approvers  # noqa: PLC0415
    from bundlectl.gateway.http import bind, serve_routes, trusted  # noqa: PLC0415
    from bundlectl.mcpio import runner  # noqa: PLC0415

    project = optional_project(config)
    root = str(project.root) if project is not None else None
    store = _store(config)
    sock = bind("127.0.0.1", port)
    token = secrets.token_urlsafe(24)
    page = ApprovalsPage(
        Approvers(token, once=True),
        lambda: store,
        project=lambda: root,
        trusted=lambda request: trusted(request, "127.0.0.1"),
        schema=declared_schemas(),
    )
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/approvals?token={token}"
    out(url)
    err("the approvers' page for " + (display_path(Path(root)) if root else "every project"))
    err("the link signs in once; Ctrl-C stops the page")
    if browser:
        open_url(url)
    routes = page.routes()

    async def serving() -> None:
        await serve_routes(routes, sock)

    runner.run(serving)
    return 0
