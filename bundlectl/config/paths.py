"""Every on-disk location bundlectl uses. The only module that knows platformdirs.

`BUNDLECTL_HOME=DIR` replaces all user locations with sub-folders of DIR (tests always set it).
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

CONFIG_NAME = "bundlectl.yaml"
LOCK_NAME = "bundlectl.lock"
LOCAL_NAME = "bundlectl.local.yaml"  # this machine's "always allow" rules (SPEC 11)
_APP = "bundlectl"


def display_path(path: Path) -> str:
    """How every message names a file: relative to the working directory when it is below it or
    up to two folders above (a project found by walking up), absolute otherwise (the built-in
    registry inside site-packages, a user registry)."""
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive, on Windows
        return str(path)
    climbs = sum(1 for part in Path(relative).parts if part == "..")
    return relative if climbs <= 2 else str(Path(path).absolute())


def _home(kind: str) -> Path:
    override = os.environ.get("BUNDLECTL_HOME")
    if override:
        return Path(override).expanduser() / kind

    getter = {
        "config": platformdirs.user_config_dir,
        "data": platformdirs.user_data_dir,
        "state": platformdirs.user_state_dir,
        "cache": platformdirs.user_cache_dir,
    }[kind]
    return Path(getter(_APP, appauthor=False))


def user_config_file() -> Path:
    """The user's `config.yaml`."""
    return _home("config") / "config.yaml"


class _UserConfigSwitch:
    """Whether commands read the user-level file: `bundlectl --no-user-config` (or
    BUNDLECTL_NO_USER_CONFIG=1) turns it off for one run; the CLI sets it on every run."""

    enabled = True


def use_user_config(enabled: bool) -> None:
    _UserConfigSwitch.enabled = enabled


def user_project_file() -> Path | None:
    """The user-level `bundlectl.yaml`: servers, bundles and agents for every project, merged
    under the project's own (SPEC 15); None when --no-user-config turned it off."""
    return _home("config") / CONFIG_NAME if _UserConfigSwitch.enabled else None


def user_registry_dir() -> Path:
    """Where `bundlectl registry add` publishes manifests."""
    return _home("data") / "registry"


def state_dir() -> Path:
    """Audit log, crash reports."""
    return _home("state")


def server_log(server: str) -> Path:
    """Where a stdio server's stderr goes under `--quiet`."""
    return state_dir() / "logs" / f"{server}.log"


def cache_dir() -> Path:
    """Lock files for read-modify-write and other disposable data."""
    return _home("cache")


def audit_log_file(configured: str | None = None) -> Path:
    """The audit log: `BUNDLECTL_AUDIT_LOG`, else `audit.path` of the user config, else state."""
    env = os.environ.get("BUNDLECTL_AUDIT_LOG")
    if env:
        return Path(env).expanduser()
    if configured:
        return Path(configured).expanduser()
    return state_dir() / "audit.jsonl"


def builtin_registry_dir() -> Path:
    """The registry shipped with bundlectl (in the wheel, or `registry/` of a source checkout)."""
    package = Path(__file__).resolve().parent.parent  # bundlectl/
    packaged = package / "_registry"
    return packaged if packaged.is_dir() else package.parent / "registry"


def find_config(start: Path, explicit: Path | None = None) -> Path | None:
    """`--config`/`BUNDLECTL_CONFIG` if given, else the nearest `bundlectl.yaml` walking up."""
    if explicit is not None:
        return explicit
    env = os.environ.get("BUNDLECTL_CONFIG")
    if env:
        return Path(env)
    for folder in (start, *start.parents):
        candidate = folder / CONFIG_NAME
        if candidate.is_file():
            return candidate
    return None


def lock_path_for(config: Path) -> Path:
    """The lock sits beside the config."""
    return config.with_name(LOCK_NAME)


def local_path_for(config: Path) -> Path:
    """So does the local rules' file."""
    return config.with_name(LOCAL_NAME)


def project_files(config: Path) -> tuple[Path, ...]:
    """The files a project is loaded from, present or not: its config, lock and local rules,
    and the user-level config when it is turned on."""
    user = user_project_file()
    own = (config, lock_path_for(config), local_path_for(config))
    return (*own, user) if user is not None else own
