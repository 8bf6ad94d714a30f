"""Where bundle manifests come from: project registries, the user registry, the built-in one.

A bundle name is served by the first source that has it, in that order, and only by it: versions
of one name are never mixed across sources, so a name published elsewhere cannot shadow a
project's bundle (dependency confusion).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from packaging.version import InvalidVersion, Version

from bundlectl import paths
from bundlectl.errors import InputFileError, Problem, UsageError
from bundlectl.models import BundleManifest
from bundlectl.validation import validate_doc
from bundlectl.yamlio import YamlDoc, parse_yaml


@dataclass(frozen=True)
class Source:
    """One registry folder: `<root>/<name>/<version>.yaml`."""

    label: str  # what the lock and the listings show: "builtin", "user", or the configured path
    root: Path

    @property
    def is_project(self) -> bool:
        """A registry the project lists in bundlectl.yaml (not the user's or the built-in)."""
        return self.label not in ("user", "builtin")

    def names(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and _has_versions(p))

    def versions(self, name: str) -> dict[Version, Path]:
        folder = self.root / name
        found: dict[Version, Path] = {}
        if folder.is_dir():
            for file in folder.glob("*.yaml"):
                try:
                    found[Version(file.stem)] = file
                except InvalidVersion:
                    continue  # not a manifest; `bundlectl lint` reports such files
        return found


def _has_versions(folder: Path) -> bool:
    return any(folder.glob("*.yaml"))


@dataclass(frozen=True)
class LoadedManifest:
    """A validated manifest with the file it came from and its digest."""

    manifest: BundleManifest
    source: Source
    path: Path
    digest: str
    doc: YamlDoc

    @property
    def version(self) -> Version:
        return Version(self.manifest.version)

    @property
    def pin(self) -> str:
        return f"{self.manifest.name}@{self.manifest.version}"


def digest_bytes(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def load_manifest_file(path: Path, source: Source, display: str | None = None) -> LoadedManifest:
    """Read, parse and validate one manifest file (every problem reported at once)."""
    shown = display or str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        problem = Problem(shown, 1, 1, f"cannot read manifest: {exc.strerror}")
        raise InputFileError([problem]) from None
    digest = digest_bytes(raw)
    cached = _cache_get(digest)
    if cached is not None:
        doc, manifest = cached
        doc.file = shown
    else:
        doc = parse_yaml(raw.decode("utf-8", errors="replace"), shown)
        manifest = validate_doc(doc, BundleManifest, what="bundle manifest")
        _cache_put(digest, doc, manifest)
    return LoadedManifest(manifest, source, path, digest, doc)


def _cache_entry(digest: str) -> Path:
    # Keyed by content and by the models' source, so a changed model never sees a stale entry.
    from bundlectl import models

    stamp = Path(models.__file__).stat()
    key = f"{digest.removeprefix('sha256:')}-{stamp.st_size}-{stamp.st_mtime_ns}"
    return paths.cache_dir() / "manifests" / f"{key}.pickle"


def _cache_get(digest: str) -> tuple[YamlDoc, BundleManifest] | None:
    """A manifest validated before. Parsing and validating a large tool catalog costs tens of
    milliseconds; this costs well under one. Only valid manifests are ever stored."""
    import pickle

    try:
        with _cache_entry(digest).open("rb") as handle:
            doc, manifest = pickle.load(handle)
    except (OSError, EOFError, pickle.UnpicklingError, AttributeError, TypeError, ValueError):
        return None
    if isinstance(doc, YamlDoc) and isinstance(manifest, BundleManifest):
        return doc, manifest
    return None


def _cache_put(digest: str, doc: YamlDoc, manifest: BundleManifest) -> None:
    import pickle

    from bundlectl.fsio import atomic_write_bytes

    with contextlib.suppress(OSError):
        atomic_write_bytes(_cache_entry(digest), pickle.dumps((doc, manifest)))


class Registry:
    """The ordered sources, with manifests loaded lazily and cached."""

    def __init__(self, sources: list[Source]) -> None:
        self.sources = sources
        self._cache: dict[tuple[str, Version], LoadedManifest] = {}
        self._files: dict[str, dict[Version, Path]] = {}

    @classmethod
    def default(
        cls, project_dir: Path | None = None, project_registries: Sequence[str] = ()
    ) -> Registry:
        """Project registries (relative to `project_dir`), then the user's, then the built-in."""
        sources = [
            Source(entry, (project_dir / entry) if project_dir else Path(entry))
            for entry in project_registries
        ]
        sources.append(Source("user", paths.user_registry_dir()))
        sources.append(Source("builtin", paths.builtin_registry_dir()))
        return cls(sources)

    @cached_property
    def _owners(self) -> dict[str, Source]:
        owners: dict[str, Source] = {}
        for source in self.sources:
            for name in source.names():
                owners.setdefault(name, source)
        return owners

    def names(self) -> list[str]:
        """Every bundle name, sorted."""
        return sorted(self._owners)

    def source_of(self, name: str) -> Source | None:
        return self._owners.get(name)

    def _version_files(self, name: str) -> dict[Version, Path]:
        """The manifest files of `name` in its owning source (scanned once per command)."""
        if name not in self._files:
            source = self.source_of(name)
            found = source.versions(name) if source else {}
            self._files[name] = dict(sorted(found.items()))
        return self._files[name]

    def versions(self, name: str) -> list[Version]:
        """The versions of `name` in its owning source, oldest first."""
        return list(self._version_files(name))

    def get(self, name: str, version: Version) -> LoadedManifest:
        key = (name, version)
        if key not in self._cache:
            source = self.source_of(name)
            files = self._version_files(name)
            if source is None or version not in files:
                raise UsageError(f"bundle {name} {version} is not in any registry")
            loaded = load_manifest_file(files[version], source, _display(files[version]))
            _check_identity(loaded, name, version)
            self._cache[key] = loaded
        return self._cache[key]

    def requires(self, name: str, version: Version) -> list[str]:
        """What a bundle version requires (the resolver's view of the registry)."""
        return list(self.get(name, version).manifest.requires)


def _display(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _check_identity(loaded: LoadedManifest, name: str, version: Version) -> None:
    problems = []
    if loaded.manifest.name != name:
        problems.append(
            loaded.doc.problem(
                ("name",),
                f"manifest name {loaded.manifest.name!r} does not match its folder {name!r}",
            )
        )
    if loaded.version != version:
        problems.append(
            loaded.doc.problem(
                ("version",),
                f"manifest version "
                f"{loaded.manifest.version} does not match its file "
                f"name {version}",
            )
        )
    if problems:
        raise InputFileError(problems, hint="a manifest lives at <registry>/<name>/<version>.yaml")
