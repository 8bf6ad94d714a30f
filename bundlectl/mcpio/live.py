"""The live catalog: ask the running servers for their tools (`export --live`, `codegen --live`),
and compare them with the declared catalog (`tools --live`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from bundlectl.config import paths
from bundlectl.config.lockfile import digest_json
from bundlectl.config.models import ServerSpec, ToolSpec
from bundlectl.errors import BundlectlError
from bundlectl.mcpio import runner
from bundlectl.mcpio.connect import connect
from bundlectl.mcpio.session import list_all_tools
from bundlectl.mcpio.target import Target
from bundlectl.policy.descriptions import scan_tool


@dataclass
class Drift:
    """How one server's live tools differ from its declared catalog."""

    server: str
    error: BundlectlError | None = None
    added: list[str] = field(default_factory=list)  # offered, not declared
    removed: list[str] = field(default_factory=list)  # declared, not offered
    changed: list[tuple[str, list[str]]] = field(default_factory=list)  # name, what differs
    live_count: int = 0
    # What the live definitions tell the model that a reviewer should read (#60): tool, rule,
    # what was found (the lint rules BCL601-604 and 606 on what the server says now).
    told: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return self.error is None and not (self.added or self.removed or self.changed or self.told)


def definition(tool: Any) -> dict[str, Any]:
    """What a person reviews of a tool, as `compare` reads it — its description, input schema
    and annotations (their `title` aside) — whether `tool` is a declared `ToolSpec` or a live
    definition (the SDK's `Tool`)."""
    notes = tool.annotations
    if notes is not None and not isinstance(notes, dict):
        notes = notes.model_dump(by_alias=True, exclude_none=True)
    notes = {k: v for k, v in (notes or {}).items() if k != "title"}
    return {
        "description": (tool.description or "").strip(),
        "input_schema": tool.input_schema or {"type": "object"},
        "annotations": notes,
    }


def definition_digest(tool: Any) -> str:
    """The sha256 of `definition(tool)`: what `policy.pins` records of a reviewed tool."""
    return digest_json(definition(tool))


def compare(server: str, declared: list[ToolSpec], live: list[Any]) -> Drift:
    drift = Drift(server, live_count=len(live))
    mine = {t.name: t for t in declared}
    theirs = {t.name: t for t in live}
    drift.added = sorted(set(theirs) - set(mine))
    drift.removed = sorted(set(mine) - set(theirs))
    for name in sorted(set(mine) & set(theirs)):
        ours, real = mine[name], theirs[name]
        what = []
        if ours.input_schema != (real.input_schema or {"type": "object"}):
            what.append("input schema")
        if ours.description.strip() != (real.description or "").strip():
            what.append("description")
        notes = (
            real.annotations.model_dump(by_alias=True, exclude_none=True)
            if real.annotations
            else {}
        )
        notes.pop("title", None)
        if ours.annotations != notes:
            what.append("annotations")
        if what:
            drift.changed.append((name, what))
    for tool in live:
        for hit in scan_tool(tool.name, tool.description or "", tool.input_schema):
            if hit.rule != "BCL605":  # a link alone is for lint's info, not a difference
                drift.told.append((tool.name, hit.rule, hit.message))
    return drift


async def survey(
    targets: list[Target], declared: dict[str, list[ToolSpec]], *, connect_timeout: float
) -> list[Drift]:
    """Every server at once; a server that fails is reported, the others still compared."""
    results: dict[str, Drift] = {}

    async def one(target: Target) -> None:
        try:
            async with connect(target, connect_timeout=connect_timeout) as client:
                tools = await list_all_tools(client)
            results[target.name] = compare(target.name, declared[target.name], tools)
        except BundlectlError as exc:
            results[target.name] = Drift(target.name, error=exc)

    async with anyio.create_task_group() as group:
        for target in targets:
            group.start_soon(one, target)
    return [results[t.name] for t in targets]


def changes(server: str, declared: list[ToolSpec], live: list[Any]) -> str:
    """What recording the live catalog over `declared` changes, as `lock` says it: tools added,
    removed, and changed (with what changed of each)."""
    if not declared:
        return "new"
    drift = compare(server, declared, live)
    said = [f"added {', '.join(drift.added)}"] if drift.added else []
    said += [f"removed {', '.join(drift.removed)}"] if drift.removed else []
    said += [f"changed {name} ({', '.join(what)})" for name, what in drift.changed]
    return "; ".join(said) or "no change"


def catalog_entry(tool: Any) -> dict[str, Any]:
    """A live tool (the SDK's `Tool`) as an entry of a `tools:` catalog (`ToolSpec`'s form)."""
    entry: dict[str, Any] = {"name": tool.name}
    if tool.title:
        entry["title"] = tool.title
    entry["description"] = (tool.description or "").strip()
    if tool.annotations:
        notes = tool.annotations.model_dump(by_alias=True, exclude_none=True)
        notes.pop("title", None)
        if notes:
            entry["annotations"] = notes
    entry["input_schema"] = tool.input_schema
    if tool.output_schema:
        entry["output_schema"] = tool.output_schema
    return entry


def catalogs(
    servers: Mapping[str, ServerSpec], root: Path, *, connect_timeout: float = 30.0
) -> dict[str, list[Any]]:
    """The live tools of `servers`, asked concurrently (their stderr to the state folder's logs);
    a server that cannot be asked is an error naming it."""
    if not servers:
        return {}
    logs = paths.state_dir() / "logs"
    targets = [
        Target(name, spec, root, log_file=logs / f"{name}.log") for name, spec in servers.items()
    ]
    found: dict[str, list[Any]] = {}

    async def one(target: Target) -> None:
        async with connect(target, connect_timeout=connect_timeout) as client:
            found[target.name] = await list_all_tools(client)

    async def every() -> None:
        async with anyio.create_task_group() as group:
            for target in targets:
                group.start_soon(one, target)

    try:
        runner.run(every)
    finally:
        for target in targets:
            target.close()
    return {name: found[name] for name in servers}
