"""Publishing a registry folder to an OCI repository (`bundlectl registry push`): each manifest
not there yet as its own artifact, then the index of everything the repository holds."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bundlectl.config import remote_index
from bundlectl.config.oci import (
    ARTIFACT,
    INDEX,
    INDEX_TAG,
    MANIFEST,
    Reference,
    client_of,
    read_index,
    reason_of,
    tag_of,
)
from bundlectl.config.registry_index import index_of
from bundlectl.errors import ReportedFailure, UsageError


@dataclass
class Pushed:
    """What a push did, per bundle version."""

    published: list[tuple[str, str]]
    unchanged: list[tuple[str, str]]


def push(folder: Path, url: str) -> Pushed:
    """Publish a registry folder to the OCI repository `url`: each manifest not there yet as
    its own artifact, then the index of everything the repository holds. A version already
    published with other content is refused before anything is written."""
    import requests  # noqa: PLC0415

    ref = Reference.parse(url)
    index = index_of(folder)
    registry = client_of(ref)
    try:
        found = read_index(registry, ref, None)
    except remote_index.Unreachable as exc:
        raise UsageError(
            f"cannot reach the registry {url} ({exc})",
            hint="check the host and port; loopback registries are spoken to over plain HTTP",
        ) from None
    current: dict[str, dict[str, dict[str, str]]] = {}
    if found is not None:
        current = remote_index.parse_index(ref.where, found[0] or b"")
    changed = [
        f"{name} {version}: published as {current[name][version]['sha256']}, "
        f"the folder has {entry['sha256']}"
        for name, versions in index["bundles"].items()
        for version, entry in versions.items()
        if version in current.get(name, {}) and current[name][version]["sha256"] != entry["sha256"]
    ]
    if changed:
        raise ReportedFailure(
            f"{url} already holds other content for " + "; ".join(changed),
            hint="a published version is immutable: bump `version` and push again",
        )
    done = Pushed([], [])
    merged = {name: dict(versions) for name, versions in current.items()}
    try:
        with tempfile.TemporaryDirectory(prefix="bundlectl-push-") as tmp:
            for name, versions in index["bundles"].items():
                for version, entry in versions.items():
                    if version in current.get(name, {}):
                        done.unchanged.append((name, version))
                        continue
                    layer = Path(tmp) / f"{tag_of(name, version)}.yaml"
                    layer.write_bytes((folder / entry["path"]).read_bytes())
                    _push(registry, ref, tag_of(name, version), layer, MANIFEST)
                    merged.setdefault(name, {})[version] = entry
                    done.published.append((name, version))
            if done.published or found is None:
                layer = Path(tmp) / "index.json"
                layer.write_bytes(
                    remote_index.index_bytes({"format_version": 1, "bundles": merged})
                )
                _push(registry, ref, INDEX_TAG, layer, INDEX)
    except requests.RequestException as exc:
        raise UsageError(f"cannot push to {url}: {reason_of(exc)}") from None
    except ValueError as exc:  # oras: an answer other than 2xx to an upload
        raise UsageError(
            f"the registry {url} refused the push: {exc}",
            hint=f"check that you may push to {ref.host}/{ref.repository} (docker login)",
        ) from None
    return done


def _push(registry: Any, ref: Reference, tag: str, layer: Path, media_type: str) -> None:
    response = registry.push(
        target=ref.target(tag),
        files=[f"{layer}:{media_type}"],
        manifest_config=f":{ARTIFACT}",
        manifest_annotations={"org.opencontainers.image.title": layer.name},
        disable_path_validation=True,
        quiet=True,
    )
    if response.status_code not in (200, 201):
        detail = json.dumps(response.json()) if response.content else ""
        raise UsageError(f"the registry refused {tag}: HTTP {response.status_code} {detail}")
