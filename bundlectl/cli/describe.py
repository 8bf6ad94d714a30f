"""Plain descriptions of servers, shared by `show`, `resolve` and `tools`."""

from __future__ import annotations

import shlex
from typing import Any

from bundlectl.config.models import ServerSpec, ToolSpec
from bundlectl.policy.catalog import is_destructive


def endpoint(spec: ServerSpec) -> str:
    """`stdio: npx -y pkg@1` or `streamable-http: https://…` — references stay unexpanded."""
    if spec.transport == "stdio":
        return "stdio: " + shlex.join([spec.command or "", *spec.args])
    return f"{spec.transport}: {spec.url}"


def tool_flags(tool: ToolSpec) -> str:
    """Short markers from the tool's annotations."""
    notes = tool.annotations
    flags = []
    if notes.get("readOnlyHint"):
        flags.append("read-only")
    if is_destructive(tool):  # the same judgement as lint's BCL204
        flags.append("destructive")
    if notes.get("openWorldHint"):
        flags.append("open-world")
    return f"[{', '.join(flags)}]" if flags else ""


def first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def server_json(spec: ServerSpec) -> dict[str, Any]:
    """A server as JSON, without the tool catalog; values are as written (references)."""
    return spec.model_dump(mode="json", exclude={"tools"}, exclude_defaults=True) | {
        "transport": spec.transport
    }


def uncatalogued_note(servers: list[str]) -> str | None:
    """What a listing of declared tools says of the servers it has no tools of."""
    if not servers:
        return None
    which = (
        f"server {servers[0]} declares"
        if len(servers) == 1
        else f"servers {', '.join(servers)} declare"
    )
    one = len(servers) == 1
    return (
        f"{which} no tool catalog, so no tool of {'it' if one else 'theirs'} is listed; "
        f"`bundlectl tools --live --record` records what {'it offers' if one else 'they offer'}"
    )
