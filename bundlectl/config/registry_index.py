"""A registry folder's index (`bundlectl registry build`, `registry push`): every manifest of the
folder loaded and checked first, so a broken one is never published."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bundlectl.config.fsio import atomic_write_bytes
from bundlectl.config.registry import Registry, Source
from bundlectl.config.remote_index import INDEX, index_bytes
from bundlectl.errors import InputFileError


def index_of(folder: Path) -> dict[str, Any]:
    """The index of a registry folder (`<name>/<version>.yaml`): every manifest loaded and
    checked first, so a broken one is never published."""
    source = Source(str(folder), folder)
    problems = source.layout_problems()
    if problems:
        raise InputFileError(problems)
    registry = Registry([source])
    bundles: dict[str, dict[str, dict[str, str]]] = {}
    for name in source.names():
        for version in registry.versions(name):
            loaded = registry.get(name, version)
            relative = loaded.path.relative_to(folder).as_posix()
            bundles.setdefault(name, {})[str(version)] = {
                "path": relative,
                "sha256": loaded.digest,
                "description": loaded.manifest.description,
            }
    return {"format_version": 1, "bundles": bundles}


def build(folder: Path, out: Path | None = None) -> tuple[Path, dict[str, Any]]:
    """Write `index.json` for a registry folder (and, with `out`, the manifests beside it)."""
    index = index_of(folder)
    target = (out or folder) / INDEX
    if out is not None:
        for versions in index["bundles"].values():
            for entry in versions.values():
                atomic_write_bytes(out / entry["path"], (folder / entry["path"]).read_bytes())
    atomic_write_bytes(target, index_bytes(index))
    return target, index
