"""`bundlectl policy export --format cedar [--out DIR]`: the policy in Cedar (#59)."""

from __future__ import annotations

import json
from pathlib import Path

from bundlectl.config.fsio import atomic_write
from bundlectl.config.paths import display_path
from bundlectl.config.project import load_project
from bundlectl.errors import UsageError
from bundlectl.output import err, write
from bundlectl.resolve.cedar import export
from bundlectl.resolve.resolved import resolve_project

FILES = ("policies.cedar", "schema.cedarschema.json", "entities.json")


def run(config: Path | None, out: Path | None) -> int:
    resolution = resolve_project(load_project(config))
    found = export(resolution)
    if found.refused:
        raise UsageError(
            "the policy cannot be written in Cedar exactly: " + "; ".join(found.refused),
            hint="Cedar has no argument conditions and no `?` in patterns; nothing was written",
        )
    if out is None:
        write(found.policies)
        return 0
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / FILES[0], found.policies)
    atomic_write(out / FILES[1], json.dumps(found.schema, indent=2) + "\n")
    atomic_write(out / FILES[2], json.dumps(found.entities, indent=2) + "\n")
    err(f"wrote {', '.join(display_path(out / f) for f in FILES)}")
    return 0
