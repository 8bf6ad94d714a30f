"""`bundlectl schema`: JSON Schemas generated from the models, and a drift check."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from bundlectl.config.fsio import atomic_write
from bundlectl.config.models import BundleManifest, LockFile, ProjectConfig
from bundlectl.errors import UsageError
from bundlectl.output import err, out


def generate() -> dict[str, str]:
    """File name → schema text, for every on-disk format."""
    targets: dict[str, tuple[type[BaseModel], str]] = {
        "bundle.schema.json": (BundleManifest, "bundlectl bundle manifest"),
        "config.schema.json": (ProjectConfig, "bundlectl.yaml"),
        "lock.schema.json": (LockFile, "bundlectl.lock"),
    }
    files = {}
    for name, (model, title) in targets.items():
        schema = model.model_json_schema()
        schema = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": name,
            **schema,
            "title": title,
        }
        files[name] = json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    return files


def run(folder: Path, *, check: bool) -> int:
    files = generate()
    stale = [
        name
        for name, text in files.items()
        if not (folder / name).is_file() or (folder / name).read_text("utf-8") != text
    ]
    if check:
        for name in stale:
            err(f"{folder / name}: differs from the models")
        if stale:
            err("hint: run `bundlectl schema` and commit the result")
            return 1
        out(f"{folder}: {len(files)} schemas up to date")
        return 0
    try:
        for name, text in files.items():
            atomic_write(folder / name, text)
    except OSError as exc:
        raise UsageError(
            f"cannot write {exc.filename or folder}: {exc.strerror}",
            hint="give --out a folder you can write to",
        ) from None
    out(f"wrote {len(files)} schemas to {folder} ({len(stale)} changed)")
    return 0
