"""Shell completion of real names: agents, servers, tools (`server.tool`), bundles, client names
and lint rule ids, from the project the shell is in.

Each function takes what has been typed and returns the names that start with it. They run at
every Tab, so they read only what they need (agents: the project file; tools: the resolved
project, never a server) and never import the MCP SDK; a project that does not load completes
nothing rather than printing an error into the shell.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any


def _quietly(names: Callable[[], Iterable[str]], incomplete: str) -> list[str]:
    try:
        return sorted({n for n in names() if n.startswith(incomplete)})
    except Exception:  # completion must never fail the shell (a broken or missing project)
        return []


def _locked() -> dict[str, Any] | None:
    """The project's lock as plain data (it names every agent, server and tool the project
    resolves to), or None when there is none: reading it is a fraction of resolving."""
    from pathlib import Path  # noqa: PLC0415

    from ruamel.yaml import YAML  # noqa: PLC0415

    from bundlectl.config import paths  # noqa: PLC0415

    config = paths.find_config(Path.cwd())
    lock = paths.lock_path_for(config) if config is not None else None
    if lock is None or not lock.is_file():
        return None
    data = YAML(typ="safe").load(lock.read_text("utf-8"))
    return data if isinstance(data, dict) else None


def _project() -> Any:
    from bundlectl.config.project import load_project  # noqa: PLC0415 - at Tab only

    return load_project(None)


def _resolution() -> Any:
    from bundlectl.resolve.resolved import resolve_project  # noqa: PLC0415 - at Tab only

    return resolve_project(_project())


def agents(incomplete: str) -> list[str]:
    """The agents of the project (its own and those its bundles bring): the lock's, else the
    resolved project's."""

    def names() -> Iterable[str]:
        locked = _locked()
        found: Iterable[str] = (
            locked["agents"] if locked is not None else _resolution().policy.agents
        )
        return found

    return _quietly(names, incomplete)


def _servers() -> dict[str, list[str]]:
    """Each server and its declared tools: the lock's, else the resolved project's."""
    locked = _locked()
    if locked is not None:
        return {name: list(s.get("tools") or {}) for name, s in locked["servers"].items()}
    merged = _resolution().merged.servers
    return {name: [t.name for t in m.spec.tools] for name, m in merged.items()}


def servers(incomplete: str) -> list[str]:
    return _quietly(_servers, incomplete)


def tools(incomplete: str) -> list[str]:
    """`server.tool` for every declared tool, and `server.` for servers without a catalog."""

    def names() -> list[str]:
        found = _servers()
        return [f"{s}.{t}" for s, ts in found.items() for t in ts] + [
            f"{s}." for s, ts in found.items() if not ts
        ]

    return _quietly(names, incomplete)


def bundles(incomplete: str) -> list[str]:
    """Bundle names from the project's registries (or the built-in and user ones)."""

    def names() -> list[str]:
        from bundlectl.config.project import optional_project  # noqa: PLC0415
        from bundlectl.config.registry import Registry  # noqa: PLC0415

        project = optional_project(None)
        registry = project.registry if project is not None else Registry.default()
        return list(registry.names())

    return _quietly(names, incomplete)


def clients(incomplete: str) -> list[str]:
    from bundlectl.clients import NAMES as CLIENT_NAMES  # noqa: PLC0415

    return _quietly(lambda: CLIENT_NAMES, incomplete)


def formats(incomplete: str) -> list[str]:
    from bundlectl.clients import NAMES as CLIENT_NAMES  # noqa: PLC0415

    return _quietly(lambda: [*CLIENT_NAMES, "agix", "server-json"], incomplete)


def rule_ids(incomplete: str) -> list[str]:
    from bundlectl.lint.rules import RULES  # noqa: PLC0415

    return _quietly(lambda: RULES, incomplete.upper())
