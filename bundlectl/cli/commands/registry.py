"""`bundlectl registry add|build|push|list|catalog`: publish manifests (into the user registry, as
a static index, to an OCI registry), list the registries a project sees, and write a manifest's
tool catalogs from its running servers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bundlectl.cli.options import Format
from bundlectl.config import paths
from bundlectl.config.bounded_read import read_bounded
from bundlectl.config.edits import set_entries
from bundlectl.config.fsio import atomic_write, project_lock
from bundlectl.config.models import BundleManifest
from bundlectl.config.project import optional_project
from bundlectl.config.registry import Registry, Source, load_manifest_file
from bundlectl.config.validation import validate_doc
from bundlectl.config.yamlio import parse_bytes, read_text
from bundlectl.errors import ReportedFailure, UsageError
from bundlectl.output import JSON_FORMAT_VERSION, emit_json, err, note, out, table


def add(path: Path, *, fmt: Format) -> int:
    user = Source("user", paths.user_registry_dir())
    loaded = load_manifest_file(path, user, str(path))
    m = loaded.manifest
    target = user.root / m.name / f"{m.version}.yaml"
    raw = read_bounded(path)  # the manifest as loaded above (load_manifest_file bounds it too)
    with project_lock(target):
        if target.exists():
            if target.read_bytes() != raw:
                raise ReportedFailure(
                    f"{m.name} {m.version} is already published with different content",
                    hint="a published version is immutable: bump `version` and publish again",
                )
            status = "unchanged"
        else:
            atomic_write(target, raw.decode("utf-8"))
            status = "published"
    if fmt is Format.json:
        emit_json(
            {
                "format_version": JSON_FORMAT_VERSION,
                "name": m.name,
                "version": m.version,
                "status": status,
                "path": str(target),
                "digest": loaded.digest,
            }
        )
    else:
        out(f"{status} {m.name} {m.version} to {target}")
    if (paths.builtin_registry_dir() / m.name).is_dir():
        note(
            f"bundle {m.name!r} now hides the built-in bundle {m.name!r} in every project that "
            "uses it: their locks are stale until `bundlectl lock` (lint reports BCL402)"
        )
    return 0


def catalog(path: Path, *, servers: list[str]) -> int:
    """Start the manifest's servers (or those named), ask each for its tools, and write them
    into the manifest as their `tools:` catalogs: comments kept, the file replaced whole and
    only when the result is still a valid manifest."""
    from bundlectl.mcpio.live import catalog_entry, catalogs, changes  # noqa: PLC0415 - anyio

    shown = str(path)
    loaded = load_manifest_file(path, Source("manifest", path.parent), shown)
    every = {n: s for n, s in loaded.manifest.servers.items() if not s.disabled}
    unknown = [name for name in servers if name not in every]
    if unknown:
        raise UsageError(
            f"{shown} has no enabled server {unknown[0]!r}",
            hint="its servers: " + (", ".join(every) or "none"),
        )
    chosen = {name: every[name] for name in servers} if servers else every
    if not chosen:
        raise UsageError(f"{shown} has no enabled servers to ask", hint="add one under servers:")
    found = catalogs(chosen, path.resolve().parent)
    after = read_text(path, shown)
    for name, tools in found.items():
        after = set_entries(after, ("servers", name), {"tools": [catalog_entry(t) for t in tools]})
    validate_doc(parse_bytes(after.encode(), shown), BundleManifest, what="bundle manifest")
    with project_lock(path):
        atomic_write(path, after)
    for name, tools in found.items():
        err(f"recorded {len(tools)} tool(s) of {name} ({changes(name, chosen[name].tools, tools)})")
    err(f"wrote {shown}; check it with `bundlectl lint {shown}`, then publish it")
    return 0


def list_sources(config: Path | None, *, fmt: Format) -> int:
    project = optional_project(config)
    registry = project.registry if project else Registry.default()
    rows: list[dict[str, Any]] = []
    for source in registry.sources:
        names = source.names()
        served = [n for n in names if registry.source_of(n) is source]
        rows.append(
            {
                "source": source.label,
                "path": str(source.root),
                "bundles": names,
                "shadowed": sorted(set(names) - set(served)),
            }
        )
    if fmt is Format.json:
        emit_json({"format_version": JSON_FORMAT_VERSION, "registries": rows})
        return 0
    table(
        [
            [
                r["source"],
                r["path"],
                ", ".join(r["bundles"]) or "-",
                ", ".join(r["shadowed"]) or "-",
            ]
            for r in rows
        ],
        header=["SOURCE", "PATH", "BUNDLES", "SHADOWED"],
    )
    return 0


def build(folder: Path, *, into: Path | None, fmt: Format) -> int:
    from bundlectl.config import registry_index  # noqa: PLC0415 - only for this command

    if not folder.is_dir():
        raise UsageError(f"{folder} is not a folder", hint="give a folder of <name>/<version>.yaml")
    target, index = registry_index.build(folder, into)
    versions = sum(len(v) for v in index["bundles"].values())
    if fmt is Format.json:
        emit_json({"format_version": JSON_FORMAT_VERSION, "index": str(target), **index})
        return 0
    said = f"wrote {paths.display_path(target)}: {len(index['bundles'])} bundle(s), "
    out(said + f"{versions} version(s); serve its folder and list its URL under registries:")
    return 0


def push(folder: Path, reference: str, *, fmt: Format) -> int:
    from bundlectl.config import oci_push  # noqa: PLC0415 - only for this command (loads oras)
    from bundlectl.config.oci import tag_of  # noqa: PLC0415

    if not folder.is_dir():
        raise UsageError(f"{folder} is not a folder", hint="give a folder of <name>/<version>.yaml")
    if not reference.startswith("oci://"):
        raise UsageError(
            f"{reference!r} is not an OCI reference",
            hint="write oci://HOST[:PORT]/REPOSITORY; for a web server use `registry build`",
        )
    done = oci_push.push(folder, reference)
    if fmt is Format.json:
        emit_json(
            {
                "format_version": JSON_FORMAT_VERSION,
                "registry": reference,
                "published": [{"name": n, "version": v} for n, v in done.published],
                "unchanged": [{"name": n, "version": v} for n, v in done.unchanged],
            }
        )
        return 0
    for name, version in done.published:
        out(f"published {name} {version} to {reference} (tag {tag_of(name, version)})")
    if done.unchanged:
        out(f"{len(done.unchanged)} version(s) already there, unchanged")
    if not done.published and not done.unchanged:
        out("the folder holds no manifests; nothing published")
    return 0


def search(
    query: str,
    *,
    where: str,
    url: str | None,
    limit: int,
    timeout: float,
    config: Path | None,
    fmt: Format,
) -> int:
    """Bundles of the project's registries, or servers of an MCP Registry, by name."""
    if limit < 1:
        raise UsageError(f"--limit {limit}: give 1 or more")
    if timeout <= 0:
        raise UsageError(f"--timeout {timeout:g}: give a number of seconds above 0")
    if where == "mcp-registry":
        return _search_mcp_registry(query, url, limit, timeout, fmt)
    if url is not None:
        raise UsageError("--url is for --from mcp-registry", hint="drop --url, or add that")
    project = optional_project(config)
    registry = project.registry if project else Registry.default()
    wanted = query.lower()
    rows = []
    for name in registry.names():
        versions = registry.versions(name)
        if not versions:
            continue  # no manifest named by a version (lint reports the layout)
        newest = versions[-1]
        description = registry.description(name, newest)
        if wanted in name.lower() or wanted in description.lower():
            source = registry.source_of(name)
            rows.append(
                {
                    "name": name,
                    "version": str(newest),
                    "source": source.label if source else "?",
                    "description": description,
                }
            )
    rows = rows[:limit]
    if fmt is Format.json:
        emit_json({"format_version": JSON_FORMAT_VERSION, "from": "registries", "bundles": rows})
        return 0
    if not rows:
        out(f"no bundle's name or description holds {query!r}")
        note("the official MCP Registry too: bundlectl registry search QUERY --from mcp-registry")
        return 0
    table(
        [[r["name"], r["version"], r["source"], r["description"]] for r in rows],
        header=["NAME", "NEWEST", "SOURCE", "DESCRIPTION"],
    )
    return 0


def _search_mcp_registry(
    query: str, url: str | None, limit: int, timeout: float, fmt: Format
) -> int:
    from bundlectl.config import mcp_registry  # noqa: PLC0415 - only for this search

    found = mcp_registry.search(
        query, url=url or mcp_registry.OFFICIAL, limit=limit, timeout=timeout
    )
    if fmt is Format.json:
        emit_json(
            {
                "format_version": JSON_FORMAT_VERSION,
                "from": "mcp-registry",
                "servers": [vars(f) for f in found],
            }
        )
        return 0
    if not found:
        out(f"the registry has no server whose name holds {query!r}")
        return 0
    table(
        [[f.name, f.version, ", ".join(f.runs) or "-", f.status, f.description] for f in found],
        header=["NAME", "VERSION", "RUNS", "STATUS", "DESCRIPTION"],
    )
    note(f"import one into the project: bundlectl import server-json {found[0].url}")
    return 0
