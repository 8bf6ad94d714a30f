"""`bundlectl list`: the bundles every registry offers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bundlectl.cli.options import Format
from bundlectl.config.project import load_project, optional_project
from bundlectl.config.registry import Registry
from bundlectl.output import JSON_FORMAT_VERSION, emit_json, table


def run(config: Path | None, *, installed: bool, fmt: Format) -> int:
    project = load_project(config) if installed else optional_project(config)
    registry = project.registry if project else Registry.default()
    locked = project.lock.bundles if project and project.lock else {}
    names = sorted(locked) if installed else registry.names()
    rows: list[dict[str, Any]] = []
    for name in names:
        versions = registry.versions(name)
        source = registry.source_of(name)
        description = registry.description(name, versions[-1]) if versions else ""
        rows.append(
            {
                "name": name,
                "newest": str(versions[-1]) if versions else None,
                "versions": [str(v) for v in versions],
                "installed": locked[name].version if name in locked else None,
                "source": source.label if source else None,
                "description": description,
            }
        )
    if fmt is Format.json:
        emit_json({"format_version": JSON_FORMAT_VERSION, "bundles": rows})
        return 0
    table(
        [
            [
                r["name"],
                r["newest"] or "-",
                ", ".join(r["versions"]),
                r["installed"] or "-",
                r["source"] or "-",
                r["description"],
            ]
            for r in rows
        ],
        header=["NAME", "NEWEST", "VERSIONS", "INSTALLED", "SOURCE", "DESCRIPTION"],
    )
    return 0
