"""`bundlectl tools`: the tool catalog, filtered by policy, searched, at the detail asked for."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bundlectl.cli.describe import first_line, tool_flags, uncatalogued_note
from bundlectl.cli.options import Detail, Format, Names
from bundlectl.config.edits import set_entries
from bundlectl.config.fsio import project_lock, write_project_file
from bundlectl.config.models import ToolSpec
from bundlectl.config.paths import display_path
from bundlectl.config.project import load_project, project_from_text
from bundlectl.config.yamlio import read_text
from bundlectl.errors import UsageError
from bundlectl.mcpio import runner
from bundlectl.mcpio.live import catalog_entry, catalogs, changes, survey
from bundlectl.mcpio.target import Target
from bundlectl.output import JSON_FORMAT_VERSION, emit_json, err, note, out, visible
from bundlectl.policy.catalog import ToolRef, agent_row, search
from bundlectl.policy.patterns import gateway_name
from bundlectl.policy.rules import Rule
from bundlectl.resolve.resolved import Resolution, resolve_project

if TYPE_CHECKING:
    from bundlectl.mcpio.live import Drift


def select(
    resolution: Resolution, *, agent: str | None, server: str | None, query: str | None
) -> list[tuple[ToolRef, str | None]]:
    """The tools to show with the agent's effect on each (allow/ask), ranked when searching."""
    catalog = resolution.catalog
    if server is not None:
        resolution.server(server)  # a usage error when there is none
    refs = [t for t in catalog.tools if server is None or t.server == server]
    effects: dict[tuple[str, str], str | None] = {(t.server, t.tool): None for t in refs}
    if agent is not None:
        row = agent_row(resolution.policy.agent(agent), catalog)
        for ref in refs:
            effects[(ref.server, ref.tool)] = row.effect(catalog.index[(ref.server, ref.tool)])
        refs = [r for r in refs if effects[(r.server, r.tool)] != "deny"]
    if query:
        refs = [ref for _, ref in search(refs, query)]
    return [(ref, effects[(ref.server, ref.tool)]) for ref in refs]


def run(
    config: Path | None,
    *,
    agent: str | None,
    server: str | None,
    query: str | None,
    detail: Detail,
    fmt: Format,
    names: Names = Names.qualified,
    unlisted: bool = False,
) -> int:
    resolution = resolve_project(load_project(config))
    if agent is not None:
        resolution.policy.require_listed([agent], unlisted=unlisted)
    chosen = select(resolution, agent=agent, server=server, query=query)
    missing = [n for n in resolution.uncatalogued(agent) if server in (None, n)]
    if (said := uncatalogued_note(missing)) is not None:
        note(said)
    naming = resolution.project.config.gateway.names  # as `serve` names them
    compiled = resolution.policy.agent(agent) if agent is not None else None

    def conditions(ref: ToolRef) -> list[Rule]:
        """The agent's rules with argument conditions that name the tool (SPEC 10)."""
        if compiled is None or not compiled.with_conditions:
            return []
        return [r for r in compiled.conditional_matching(ref.server, ref.tool) if r.condition]

    if fmt is Format.json:
        items = []
        for ref, effect in chosen:
            item = _as_json(ref, _spec(ref), effect, detail, naming)
            if rules := conditions(ref):
                item["conditions"] = [
                    {"effect": r.effect, "if": _condition(r), "source": str(r.origin)}
                    for r in rules
                ]
            items.append(item)
        emit_json({"format_version": JSON_FORMAT_VERSION, "agent": agent, "tools": items})
        return 0
    for ref, effect in chosen:
        mark = "  [ask]" if effect == "ask" else ""
        if rules := conditions(ref):  # what the call's arguments decide
            mark += "  [" + "; ".join(f"{r.effect} if {_condition(r)}" for r in rules) + "]"
        shown = ref.qualified
        if names is Names.gateway:
            shown = f"{gateway_name(ref.server, ref.tool, naming)}  ({ref.qualified})"
        _print_tool(f"{shown}{mark}", _spec(ref), detail)
    if not chosen:
        out("(no tools)")
    return 0


def _condition(rule: Rule) -> str:
    assert rule.condition is not None
    return str(rule.condition.describe())


def _print_tool(head: str, spec: ToolSpec, detail: Detail) -> None:
    if detail == "name":
        out(visible(head))
        return
    flags = tool_flags(spec)  # a server's words: names and descriptions shown by `visible`
    out(visible(f"{head}  {first_line(spec.description)}" + (f"  {flags}" if flags else "")))
    if detail == "full":
        if spec.annotations:
            out(f"    annotations: {json.dumps(spec.annotations, sort_keys=True)}")
        schema = json.dumps(spec.input_schema, indent=2, sort_keys=True)
        out("    input schema:")
        for line in schema.splitlines():
            out(f"      {line}")


def _spec(ref: ToolRef) -> ToolSpec:
    assert ref.spec is not None  # the resolution's catalog carries every definition
    return ref.spec


def _as_json(
    ref: ToolRef, spec: ToolSpec, effect: str | None, detail: Detail, naming: str
) -> dict[str, Any]:
    item: dict[str, Any] = {
        "name": ref.qualified,
        "server": ref.server,
        "tool": ref.tool,
        "gateway_name": gateway_name(ref.server, ref.tool, naming),
    }
    if effect is not None:
        item["decision"] = effect
    if detail in ("summary", "full"):
        item["description"] = spec.description
    if detail == "full":
        item["annotations"] = spec.annotations
        item["input_schema"] = spec.input_schema
    return item


def refuse_with_live(flags: list[str], record: bool) -> None:
    """`--live` compares servers with their catalogs: options that shape a listing of the
    declared catalog would be ignored there, so they are refused."""
    if flags:
        mode = "--live --record" if record else "--live"
        raise UsageError(
            f"{', '.join(flags)} cannot be used with {mode}: it compares what the servers offer "
            "with their declared catalogs",
            hint="run without --live to list, search or filter the declared catalog "
            "(--live --record first to make it what the servers offer)",
        )


def run_live_command(config: Path | None, *, server: str | None, fmt: Format, record: bool) -> int:
    resolution = resolve_project(load_project(config))
    if record:
        return run_record(resolution, servers=None if server is None else [server])
    return run_live(resolution, server=server, fmt=fmt)


def run_record(resolution: Resolution, *, servers: list[str] | None) -> int:
    """Write the live tools of the project's own servers (or those named) into bundlectl.yaml
    as their `tools:` catalogs, comments kept, and write the lock again (as `install` does)."""
    project = resolution.project
    every = {n: s for n, s in project.config.servers.items() if not s.disabled}
    own = every if servers is None else {}
    for server in servers or []:
        merged = resolution.merged.servers.get(server)
        if server not in every:
            origin = (
                f"comes from bundle {merged.bundle}"
                if merged and merged.bundle
                else ("is disabled" if server in project.config.servers else "is not a server here")
            )
            raise UsageError(
                f"server {server!r} {origin}: --record writes the catalogs of the project's own "
                "servers",
                hint="a bundle's catalog belongs to its manifest (`bundlectl registry catalog "
                "MANIFEST` writes one); servers here: " + (", ".join(every) or "none"),
            )
        own[server] = every[server]
    if not own:
        raise UsageError(
            "the project has no servers of its own to record",
            hint="servers from bundles keep the catalogs of their manifests",
        )
    found = catalogs(own, project.root)
    target = project.config_path
    before = read_text(target, display_path(target))
    after = before
    for name, tools in found.items():
        after = set_entries(after, ("servers", name), {"tools": [catalog_entry(t) for t in tools]})
    fresh = resolve_project(project_from_text(target, after))
    with project_lock(target):
        write_project_file(target, after)
        fresh.write_lock()
    for name, tools in found.items():
        err(f"recorded {len(tools)} tool(s) of {name} ({changes(name, own[name].tools, tools)})")
    err(f"wrote {display_path(target)} and {display_path(project.lock_path)}")
    return 0


def run_live(resolution: Resolution, *, server: str | None, fmt: Format) -> int:
    """Compare each enabled server's live tools with its declared catalog.

    Exit 0 when all match, 1 when any differs, 5 when a server could not be asked.
    """

    servers = {name: s for name, s in resolution.merged.servers.items() if not s.spec.disabled}
    if server is not None:
        if server not in servers:
            raise UsageError(
                f"no enabled server {server!r}", hint=f"servers: {', '.join(servers) or 'none'}"
            )
        servers = {server: servers[server]}
    targets = [Target(name, s.spec, resolution.project.root) for name, s in servers.items()]
    declared = {name: list(s.spec.tools) for name, s in servers.items()}
    try:
        drifts = runner.run(lambda: survey(targets, declared, connect_timeout=30.0))
    finally:
        for target in targets:
            target.close()
    if fmt is Format.json:
        emit_json(
            {
                "format_version": JSON_FORMAT_VERSION,
                "servers": {d.server: _drift_json(d) for d in drifts},
            }
        )
    else:
        for d in drifts:
            _print_drift(d)
    if any(d.error for d in drifts):
        return 5
    return 0 if all(d.clean for d in drifts) else 1


def _drift_json(d: Drift) -> dict[str, Any]:
    return {
        "status": "error" if d.error else "ok" if d.clean else "differs",
        "error": d.error.message if d.error else None,
        "added": d.added,
        "removed": d.removed,
        "changed": [{"tool": n, "differs": w} for n, w in d.changed],
        "descriptions": [{"tool": n, "rule": r, "message": m} for n, r, m in d.told],
    }


def _print_drift(d: Drift) -> None:
    if d.error is not None:
        out(f"{d.server}: could not ask it: {visible(d.error.message.split(chr(10))[0])}")
        return
    if d.clean:
        out(f"{d.server}: matches the declared catalog ({d.live_count} tools)")
        return
    if d.added or d.removed or d.changed:
        out(f"{d.server}: differs from the declared catalog")
    else:
        out(f"{d.server}: matches the declared catalog ({d.live_count} tools), but read this:")
    for name, rule, message in d.told:
        out(f"  ! {visible(name)}: {rule} {message}")
    for name in d.added:
        out(f"  + {visible(name)} (offered, not declared)")
    for name in d.removed:
        out(f"  - {visible(name)} (declared, not offered)")
    for name, what in d.changed:
        out(f"  ~ {visible(name)}: {', '.join(what)} {'differs' if len(what) == 1 else 'differ'}")
