"""A project on disk: find and load `bundlectl.yaml`, resolve it, read and write its lock."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from bundlectl.config import paths
from bundlectl.config.local import LocalLayer, load_local
from bundlectl.config.lockfile import read_lock
from bundlectl.config.models import ProjectConfig
from bundlectl.config.registry import Registry, is_remote
from bundlectl.config.requirements import requirement_name
from bundlectl.config.validation import validate_doc
from bundlectl.config.yamlio import YamlDoc, parse_yaml, read_yaml
from bundlectl.errors import InputFileError, Problem, UsageError
from bundlectl.suggest import Suggester

if TYPE_CHECKING:  # resolution-only modules stay unimported for `show`, `list`, `schema`
    from bundlectl.config.models import LockFile


# The keys a user-level bundlectl.yaml may hold: what it adds (servers, bundles, agents) and the
# policy it may tighten. Registries, tests, lint, privacy and gateway settings are the project's.
USER_KEYS = ("version", "bundles", "servers", "agents", "policy")


@dataclass(frozen=True)
class UserLayer:
    """The user-level `bundlectl.yaml` (SPEC 15): merged under the project's, which wins on
    every name and whose `policy` it can only tighten."""

    path: Path
    doc: YamlDoc
    config: ProjectConfig

    @property
    def display(self) -> str:
        return self.doc.file


def load_user_layer(project_path: Path) -> UserLayer | None:
    """The user-level file when there is one, it is turned on, and it is not the project's own."""
    path = paths.user_project_file()
    if path is None:
        return None
    if not path.is_file() or path.resolve() == project_path.resolve():
        return None
    doc = read_yaml(path, paths.display_path(path))
    config = validate_doc(doc, ProjectConfig, what="user config")
    data = doc.data if isinstance(doc.data, dict) else {}
    problems = [
        doc.problem(
            (key,),
            f"{key!r} is read from a project's bundlectl.yaml, not from the user-level file",
            hint=(
                "publish your own bundles with `bundlectl registry add`"
                if key == "registries"
                else f"move {key!r} into the project's bundlectl.yaml"
            ),
            key=True,
        )
        for key in data
        if key not in USER_KEYS
    ]
    if problems:
        raise InputFileError(
            problems,
            hint="the user-level file adds servers, bundles and agents and may tighten the "
            "policy; or run with --no-user-config",
        )
    return UserLayer(path.resolve(), doc, config)


@dataclass
class Project:
    """A loaded, validated project config and the registries it can see."""

    config_path: Path
    doc: YamlDoc
    config: ProjectConfig
    # The user-level file merged under this one; None for lint, for --no-user-config and when
    # there is none. Never part of the lock.
    user: UserLayer | None = None
    # `bundlectl.local.yaml`: allow rules added on this machine ("always allow"); never locked.
    local: LocalLayer | None = None

    def unreviewed_pins(self) -> dict[str, str]:
        """This machine's pins (the local layer) that the reviewed `policy.pins` lacks."""
        if self.local is None:
            return {}
        reviewed = self.config.policy.pins
        return {n: d for n, d in self.local.config.pins.items() if reviewed.get(n) != d}

    def watched_files(self) -> tuple[Path, ...]:
        """The files whose edits change what this project resolves to (the gateway reloads)."""
        return paths.project_files(self.config_path)

    def local_registries(self) -> list[Path] | None:
        """The registry folders the config lists; None when it lists a remote registry (what
        that resolves to is on a web server, not in a file here)."""
        entries = self.config.registries
        return None if any(map(is_remote, entries)) else [self.root / e for e in entries]

    @cached_property
    def root(self) -> Path:
        return self.config_path.parent

    @property
    def display(self) -> str:
        return self.doc.file

    @cached_property
    def lock_path(self) -> Path:
        return paths.lock_path_for(self.config_path)

    @cached_property
    def registry(self) -> Registry:
        return Registry.default(self.root, self.config.registries)

    def registry_problems(self) -> list[Problem]:
        """Registries that do not exist, and invalid entries or manifests in the others."""
        problems = []
        for index, entry in enumerate(self.config.registries):
            if is_remote(entry):
                continue  # a remote registry: its own errors come when it is read
            folder = self.root / entry
            if not folder.is_dir():
                what = "is not a folder" if folder.exists() else "does not exist"
                problem = self.doc.problem(
                    ("registries", index),
                    f"registry {entry!r} {what}",
                    hint=f"create the folder or fix the path; it is relative to {self.display}",
                )
                problems.append(replace(problem, code="missing_registry"))
        return problems + self.registry.problems()

    def unknown_bundles(self) -> list[Problem]:
        """Requirements in `bundles:` (of this file and the user-level one) that name no bundle
        in any registry."""
        known = self.registry.names()
        problems = []
        layers = [(self.config, self.doc)]
        if self.user is not None:
            layers.append((self.user.config, self.user.doc))
        for config, doc in layers:
            for index, text in enumerate(config.bundles):
                name = requirement_name(text)
                if name in known:
                    continue
                close = Suggester(known).closest(name)
                problem = doc.problem(
                    ("bundles", index),
                    f"no bundle named {name!r} in any registry",
                    hint=f"did you mean {close[0]}?"
                    if close
                    else "`bundlectl list` shows the available bundles",
                )
                problems.append(replace(problem, code="unknown_bundle"))
        return problems

    @cached_property
    def lock(self) -> LockFile | None:
        return read_lock(self.lock_path, paths.display_path(self.lock_path))


def find_project(config: Path | None, cwd: Path | None = None) -> Path:
    """The config file to use, or a usage error saying how to create one."""
    found = paths.find_config(cwd or Path.cwd(), config)
    if found is None:
        raise UsageError(
            f"no {paths.CONFIG_NAME} in {Path.cwd()} or any parent folder",
            hint="run `bundlectl init` to create one, or pass --config PATH",
        )
    if not found.is_file():
        raise UsageError(
            f"config file {found} does not exist",
            hint="check --config / BUNDLECTL_CONFIG, or run `bundlectl init`",
        )
    return found


def load_project(config: Path | None = None) -> Project:
    """Find, parse and validate the project config (every problem at once, exit 2)."""
    path = find_project(config)
    doc = read_yaml(path, paths.display_path(path))
    model = validate_doc(doc, ProjectConfig, what="config")
    return Project(path.resolve(), doc, model, load_user_layer(path), load_local(path))


def project_from_text(path: Path, text: str) -> Project:
    """A project as it would be with `text` as its config (for edits before they are written)."""
    doc = parse_yaml(text, paths.display_path(path))
    model = validate_doc(doc, ProjectConfig, what="config")
    return Project(path.resolve(), doc, model, load_user_layer(path), load_local(path))


def optional_project(config: Path | None) -> Project | None:
    """The project when there is a config to find; commands like `show` also work without."""
    path = paths.find_config(Path.cwd(), config)
    return load_project(path) if path is not None else None
