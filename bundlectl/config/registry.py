"""Where bundle manifests come from: project registries, the user registry, the built-in one.

A bundle name is served by the first source that has it, in that order, and only by it: versions
of one name are never mixed across sources, so a name published elsewhere cannot shadow a
project's bundle (dependency confusion).
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.version import InvalidVersion, Version

from bundlectl.config import fields, models, paths, settings
from bundlectl.config.bounded_read import read_bounded
from bundlectl.config.models import BundleManifest
from bundlectl.config.requirements import NAME_HELP, NAME_RE
from bundlectl.config.validation import validate_doc
from bundlectl.config.yamlio import YamlDoc, parse_bytes
from bundlectl.errors import InputFileError, Problem, UsageError

if TYPE_CHECKING:
    from bundlectl.config.remote import Mirror


def is_remote(entry: str) -> bool:
    """Whether a `registries:` entry names a registry on a server (a static index or an OCI
    repository) rather than a folder."""
    return entry.startswith(("https://", "http://", "oci://"))


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
        """The bundle folders with a valid name and at least one manifest file."""
        return [folder.name for folder, _ in self._folders() if _NAME.match(folder.name)]

    def versions(self, name: str) -> dict[Version, Path]:
        """The manifest files of a bundle whose names are versions (others: `layout_problems`)."""
        found: dict[Version, Path] = {}
        for file in sorted((self.root / name).glob("*.yaml")):
            with contextlib.suppress(InvalidVersion):
                found[Version(file.stem)] = file
        return found

    def layout_problems(self) -> list[Problem]:
        """Bundle folders that are not bundle names, and manifest files not named by a version.

        Such files would otherwise vanish from the registry without a word ("available: none").
        """
        problems: list[Problem] = []
        for folder, files in self._folders():
            if not _NAME.match(folder.name):
                problems.append(
                    _file_problem(
                        files[0],
                        f"bundle folder {folder.name!r} is not a valid bundle name, so none of "
                        "its manifests can be used",
                        f"rename the folder: {NAME_HELP}",
                    )
                )
                continue
            for file in files:
                try:
                    Version(file.stem)
                except InvalidVersion:
                    problems.append(
                        _file_problem(
                            file,
                            f"manifest file name {file.name!r} is not a PEP 440 version, so the "
                            "manifest is not part of the registry",
                            "name it <version>.yaml after its version: key (e.g. 1.0.0.yaml)",
                        )
                    )
        return problems

    def _folders(self) -> list[tuple[Path, list[Path]]]:
        if not self.root.is_dir():
            return []
        found = []
        for folder in sorted(self.root.iterdir()):
            files = sorted(folder.glob("*.yaml")) if folder.is_dir() else []
            if files:
                found.append((folder, files))
        return found


class RemoteSource(Source):
    """A registry on a web server (`remote`): its index fetched (or found unreachable) on first
    use in a process, each bundle's manifests when that bundle is first used, all read from the
    mirror in the user cache folder."""

    def _mirror(self) -> Mirror:
        """The registry's mirror, brought up to date once per loaded registry (a command)."""
        found: Mirror | None = self.__dict__.get("_synced")
        if found is None:
            from bundlectl.config import remote  # noqa: PLC0415 - only for a project with one

            found = remote.mirror(self.label)
            object.__setattr__(self, "_synced", found)  # frozen: a memo, not a field
        return found

    def names(self) -> list[str]:
        return sorted(self._mirror().bundles)  # (the index's names are checked when read)

    def versions(self, name: str) -> dict[Version, Path]:
        return {Version(v): file for v, file in self._mirror().fetch(name).items()}

    def layout_problems(self) -> list[Problem]:
        self._mirror()  # an index that lists a malformed name or version is refused whole
        return []


_NAME = re.compile(NAME_RE)


def _file_problem(file: Path, message: str, hint: str) -> Problem:
    return Problem(paths.display_path(file), 1, 1, message, "", hint, "registry_layout")


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
        raw = read_bounded(path)
    except OSError as exc:
        problem = Problem(shown, 1, 1, f"cannot read manifest: {exc.strerror}")
        raise InputFileError([problem]) from None
    digest = digest_bytes(raw)
    cached = _cache_get(digest)
    if cached is not None:
        doc, manifest = cached
        doc.file = shown
    else:
        doc = parse_bytes(raw, shown)
        manifest = validate_doc(doc, BundleManifest, what="bundle manifest")
        _cache_put(digest, doc, manifest)
    return LoadedManifest(manifest, source, path, digest, doc)


def _cache_entry(digest: str) -> Path:
    # Keyed by content and by the models' source, so a changed model never sees a stale entry.

    stamps = [Path(m.__file__).stat() for m in (models, fields, settings) if m.__file__]
    source = "-".join(f"{s.st_size}-{s.st_mtime_ns}" for s in stamps)
    key = f"{digest.removeprefix('sha256:')}-{source}"
    return paths.cache_dir() / "manifests" / f"{key}.pickle"


# The cache entries this process has read or written, by their file's name: a process that
# resolves again (a reload of `serve`, a batch, `policy diff`'s two sides) unpickles them
# without reading the file. A fresh object each time: callers may change what they get.
_KEPT: dict[str, bytes] = {}
_KEPT_BYTES = 32 << 20  # past this, the oldest go first
_KEEPING = threading.Lock()


def _cache_get(digest: str) -> tuple[YamlDoc, BundleManifest] | None:
    """A manifest validated before. Parsing and validating a large tool catalog costs tens of
    milliseconds; this costs well under one. Only valid manifests are ever stored."""
    import pickle  # noqa: PLC0415  # start-up: `list` reads summaries, never a pickle

    entry = _cache_entry(digest)
    try:
        data = _KEPT.get(entry.name)
        if data is None:
            data = entry.read_bytes()
            _keep(entry.name, data)
        elif not entry.exists():  # kept from another cache folder (another BUNDLECTL_HOME)
            with contextlib.suppress(OSError):
                _write_cache(entry, data)
        doc, manifest = pickle.loads(data)
    except (OSError, EOFError, pickle.UnpicklingError, AttributeError, TypeError, ValueError):
        return None
    if isinstance(doc, YamlDoc) and isinstance(manifest, BundleManifest):
        return doc, manifest
    return None


def _cache_put(digest: str, doc: YamlDoc, manifest: BundleManifest) -> None:
    import pickle  # noqa: PLC0415  # start-up: `list` reads summaries, never a pickle

    entry, data = _cache_entry(digest), pickle.dumps((doc, manifest))
    _keep(entry.name, data)
    with contextlib.suppress(OSError):
        _write_cache(entry, data)


def _keep(name: str, data: bytes) -> None:
    with _KEEPING:  # a gateway's threads may load manifests at once
        _KEPT[name] = data
        while sum(map(len, _KEPT.values())) > _KEPT_BYTES and len(_KEPT) > 1:
            del _KEPT[next(iter(_KEPT))]


def _write_cache(path: Path, data: bytes) -> None:
    """Only a cache miss writes; `fsio` (file locks, temp files) is loaded for that alone."""
    from bundlectl.config.fsio import atomic_write_bytes  # noqa: PLC0415  # start-up, as above

    atomic_write_bytes(path, data)


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
            _remote_source(entry)
            if is_remote(entry)
            else Source(entry, (project_dir / entry) if project_dir else Path(entry))
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

    def require_names(self, names: Sequence[str]) -> None:
        """A bundle name given on the command line that no registry has is a usage error about
        that argument, with a did-you-mean (`install`, `show`, `lock --upgrade` alike)."""
        from bundlectl.suggest import Suggester  # noqa: PLC0415 - only for a wrong name

        unknown = [name for name in names if name not in self._owners]
        if not unknown:
            return
        close = Suggester(self.names()).closest(unknown[0])
        raise UsageError(
            f"no bundle named {', '.join(map(repr, unknown))} in any registry",
            hint=f"did you mean {close[0]!r}?"
            if close and len(unknown) == 1
            else "`bundlectl list` shows the available bundles",
        )

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
            loaded = load_manifest_file(files[version], source, paths.display_path(files[version]))
            _check_identity(loaded, name, version)
            self._cache[key] = loaded
        return self._cache[key]

    def description(self, name: str, version: Version) -> str:
        """A bundle version's description (`list`): from a small summary kept beside the cached
        manifest once it was loaded and checked, so listing unpickles no manifest."""
        path = self._version_files(name).get(version)
        if path is not None:
            with contextlib.suppress(OSError, UnicodeDecodeError):
                summary = _cache_entry(digest_bytes(path.read_bytes())).with_suffix(".summary")
                return summary.read_text(encoding="utf-8")
        loaded = self.get(name, version)
        with contextlib.suppress(OSError):
            summary = _cache_entry(loaded.digest).with_suffix(".summary")
            _write_cache(summary, loaded.manifest.description.encode())
        return loaded.manifest.description

    def problems(self) -> list[Problem]:
        """What is wrong in the registries a project brings: every manifest of its project
        registries is loaded and checked; every non-built-in registry's layout is checked."""
        problems: list[Problem] = []
        for source in self.sources:
            if source.label != "builtin":
                problems += source.layout_problems()
            if not source.is_project or isinstance(source, RemoteSource):
                continue  # a remote registry was checked whole when it was published
            for name in source.names():
                if self.source_of(name) is not source:
                    continue  # served by an earlier project registry
                for version in self.versions(name):
                    try:
                        self.get(name, version)
                    except InputFileError as exc:
                        problems += exc.problems
        return problems

    def requires(self, name: str, version: Version) -> list[str]:
        """What a bundle version requires (the resolver's view of the registry)."""
        return list(self.get(name, version).manifest.requires)


def _remote_source(url: str) -> Source:
    from bundlectl.config import remote  # noqa: PLC0415 - only for a project with one

    return RemoteSource(url, remote.mirror_folder(url))


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
