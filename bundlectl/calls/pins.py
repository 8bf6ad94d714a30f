"""`policy.pin_tools` on a live tool: what the lock recorded, what a person reviewed since, and a
changed, renamed or moved tool held for a person (#60).

A live tool passes when its definition is the one the lock recorded (and its catalog entry is
unchanged), or a definition a person approved — `policy.pins` in the reviewed file, or this
machine's `bundlectl.local.yaml` pins. Otherwise it is refused; and when something reviewed
stands behind it — its own recorded definition, or (renamed, moved) another recorded tool's with
the very same definition — a "tool changed" approval request is opened for a person
(`toolchange.py` says how it reads), one per new definition.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bundlectl.config.lockfile import digest_json
from bundlectl.errors import PolicyDenied
from bundlectl.output import err
from bundlectl.state import TOOL_CHANGE, Binding, StateError

if TYPE_CHECKING:
    from bundlectl.calls.confirm import Admitting
    from bundlectl.resolve.resolved import Resolution

CHANGE_TTL = 86400.0  # seconds a "tool changed" request waits for a person


@dataclass(frozen=True)
class DefinitionChange:
    """How a live tool differs from what was reviewed: `before` None for a tool nothing was
    recorded of (refused, not held); else the definitions a person compares."""

    qualified: str
    digest: str  # of the live definition (`live.definition_digest`)
    reason: str
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None


def refusal(pipeline: Admitting, server: str, live: Any) -> PolicyDenied | None:
    """Why `pin_tools` refuses `server`'s live tool `live` (None: it may be used); a change a
    person can review is held for them, and the refusal names the request."""
    if not pipeline.resolution.policy.set.pin_tools:
        return None
    change = changed(pipeline.resolution, server, live)
    if change is None:
        return None
    held = _held(pipeline, change) if change.before is not None else None
    if held is None:
        return PolicyDenied(change.reason)
    return PolicyDenied(
        f"{change.reason}; held for a person to review: approval {held} "
        f"(`bundlectl approvals show {held}`)",
        hint=f"an approver pins the new definition with `bundlectl approvals approve {held}`",
    )


def changed(resolution: Resolution, server: str, live: Any) -> DefinitionChange | None:
    """How the live tool differs from what was reviewed; None: it is what the lock records,
    or a definition a person approved (`policy.pins`, or this machine's pins)."""
    from bundlectl.mcpio import live as live_tools  # noqa: PLC0415 - with pin_tools only

    lock = resolution.project.lock
    locked = lock.servers.get(server) if lock is not None else None
    merged = resolution.merged.servers.get(server)
    declared = next((t for t in (merged.spec.tools if merged else []) if t.name == live.name), None)
    qualified = f"{server}.{live.name}"
    recorded = None  # the reviewed definition, when the lock records the tool
    if locked is not None and declared is not None and live.name in locked.tools:
        if (
            digest_json(declared.model_dump(mode="json")) == locked.tools[live.name]
            and not live_tools.compare(server, [declared], [live]).changed
        ):
            return None
        recorded = declared
    digest = live_tools.definition_digest(live)
    if digest in (
        resolution.policy.set.pins.get(qualified),
        _local_pins(resolution).get(qualified),
    ):
        return None
    after = {"name": qualified, **live_tools.definition(live)}
    if recorded is not None:
        # What ends it depends on where the catalog lives: the project's own servers record
        # theirs in bundlectl.yaml, a bundle's comes with a new version of the bundle.
        then = (
            f"`bundlectl tools --live --record --server {server}`"
            if merged is not None and merged.bundle is None
            else "`bundlectl lock --upgrade`"
        )
        before = {"name": qualified, **live_tools.definition(recorded)}
        return DefinitionChange(
            qualified,
            digest,
            f"{qualified} changed since it was locked — review with "
            f"`bundlectl tools --live --server {server}` and record it with {then}",
            before,
            after,
        )
    origin = _origin_of(resolution, live_tools.definition(live), qualified)
    if origin is None:
        return DefinitionChange(
            qualified, digest, f"{qualified} is not recorded in the lock (policy.pin_tools)"
        )
    old, spec = origin
    how = "renamed" if old.split(".")[0] == server else f"moved to server {server!r}"
    return DefinitionChange(
        qualified,
        digest,
        f"{qualified} is not recorded in the lock: it is {old}, {how} (policy.pin_tools)",
        {"name": old, **live_tools.definition(spec)},
        after,
    )


def _origin_of(
    resolution: Resolution, definition: dict[str, Any], qualified: str
) -> tuple[str, Any] | None:
    """A locked tool of another name (on this server or another) with the very definition a
    live tool has: the tool was renamed, or moved to another server."""
    from bundlectl.mcpio import live as live_tools  # noqa: PLC0415 - with pin_tools only

    lock = resolution.project.lock
    for name, merged in resolution.merged.servers.items():
        locked = lock.servers.get(name) if lock is not None else None
        for spec in merged.spec.tools:
            old = f"{name}.{spec.name}"
            if (
                old != qualified
                and locked is not None
                and spec.name in locked.tools
                and live_tools.definition(spec) == definition
            ):
                return old, spec
    return None


def _local_pins(resolution: Resolution) -> Mapping[str, str]:
    local = resolution.project.local
    return local.config.pins if local is not None else {}


def _held(pipeline: Admitting, change: DefinitionChange) -> str | None:
    """The "tool changed" approval request of `change` (one per definition; audited when it is
    made, made again once one expires unanswered): its id; None when the state store cannot
    be used (a warning; the tool stays refused)."""
    key = (change.qualified, change.digest)
    known = pipeline.changes.get(key)
    if known is not None:
        try:
            kept = pipeline.store().get(known)
        except StateError:
            return known
        if kept is not None and kept.state() not in ("expired", "withdrawn"):
            return known  # pending, or decided (a denial stands: it is not asked again)
    server, tool = change.qualified.split(".", 1)
    root = str(pipeline.resolution.project.root)
    binding = Binding(root, "", server, tool, TOOL_CHANGE + change.digest)
    shown = json.dumps({"before": change.before, "after": change.after}, ensure_ascii=False)
    try:
        approval, made = pipeline.store().request(
            binding, rule=change.reason, shown=shown, ttl=CHANGE_TTL
        )
    except StateError as exc:
        err(f"warning: {exc.message}")
        return None
    pipeline.changes[key] = approval.id
    if made:
        pipeline.audit.tool_changed(server, tool, approval.id, change.reason)
        settings = pipeline.approvals
        if settings is not None and settings.notify is not None:
            from bundlectl.calls.notify import announce  # noqa: PLC0415 - HTTP: only then

            announce(settings.notify, approval)  # approvers hear of it as of a held call
    return approval.id
