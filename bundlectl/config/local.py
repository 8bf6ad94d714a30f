"""`bundlectl.local.yaml` (SPEC 11): the allow rules a person added on this machine by answering
"always allow" to an `ask` — beside the project's `bundlectl.yaml`, git-ignored, never written
into the reviewed config.

The file holds `agents: {NAME: {allow: [...]}}`: it can let an agent call without asking what
the reviewed policy asks about, never more (a deny still wins, and `policy.deny` holds). And
`pins: {server.tool: sha256:...}`: changed tool definitions a person approved on this machine
(`policy.pin_tools`, an approval of a "tool changed" request), until `bundlectl pins update`
moves them into the reviewed file (`lock --check` fails meanwhile).
Its rules count for every call on this machine (`policy explain` names their file and line,
`lint` notes them); the lock's policy digest covers the reviewed policy only.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from bundlectl.config import paths
from bundlectl.config.edits import remove_entries, set_entries
from bundlectl.config.fields import Name, PinnedTools, RuleEntry, StrictModel, empty_dict
from bundlectl.config.fsio import atomic_write, project_lock
from bundlectl.config.paths import display_path
from bundlectl.config.validation import validate_doc
from bundlectl.config.yamlio import YamlDoc, parse_yaml, read_text, read_yaml

LOCAL_FILE = paths.LOCAL_NAME
HEADER = (
    "# Allow rules added on this machine by answering 'always allow', and changed tools\n"
    "# approved on this machine (bundlectl, SPEC 11).\n"
    "# Not reviewed and not locked: keep this file out of version control.\n"
    "version: 1\n"
)


class LocalAgent(StrictModel):
    allow: list[RuleEntry] = Field(description="Tools the agent may call without being asked.")


class LocalConfig(StrictModel):
    """The local rules file."""

    version: Literal[1] = 1
    agents: dict[Name, LocalAgent] = Field(default_factory=dict)
    pins: PinnedTools = Field(
        default_factory=empty_dict,
        description="Changed tool definitions approved on this machine (`policy.pin_tools`); "
        "`bundlectl pins update` moves them into the reviewed bundlectl.yaml.",
    )


@dataclass(frozen=True)
class LocalLayer:
    path: Path
    doc: YamlDoc
    config: LocalConfig

    @property
    def rules(self) -> int:
        return sum(len(agent.allow) for agent in self.config.agents.values())


def local_path(project_file: Path) -> Path:
    return paths.local_path_for(project_file)


def load_local(project_file: Path) -> LocalLayer | None:
    """The project's local rules, if it has the file (a broken one: a positioned error)."""
    path = local_path(project_file)
    if not path.is_file():
        return None
    doc = read_yaml(path, display_path(path))
    return LocalLayer(path, doc, validate_doc(doc, LocalConfig, what="local rules"))


def always_allow(project_file: Path, agent: str, entry: str | dict[str, Any]) -> Path:
    """Add `entry` (a tool, or a tool with the conditions of the rule that asked) to the agent's
    local allow rules, creating the file (and its line in `.gitignore`) when needed. Written
    atomically under the project's lock; the file's other lines and comments stay."""
    path = local_path(project_file)
    with project_lock(project_file):
        text = read_text(path, display_path(path)) if path.is_file() else HEADER
        data = parse_yaml(text, display_path(path)).data
        agents = data.get("agents") if isinstance(data, dict) else None
        current = agents.get(agent) if isinstance(agents, dict) else None
        allow = list(current.get("allow") or []) if isinstance(current, dict) else []
        if entry not in allow:
            allow.append(entry)
        text = set_entries(text, ("agents",), {agent: {**(current or {}), "allow": allow}})
        validate_doc(parse_yaml(text, display_path(path)), LocalConfig, what="local rules")
        atomic_write(path, text)
        _ignored(project_file.parent)
    return path


def pin(project_file: Path, qualified: str, digest: str) -> Path:
    """Accept `digest` as `qualified`'s definition on this machine (an approved "tool
    changed" request): written as `always_allow` writes, the file created when needed."""
    path = local_path(project_file)
    with project_lock(project_file):
        text = read_text(path, display_path(path)) if path.is_file() else HEADER
        text = set_entries(text, "pins", {qualified: digest})
        validate_doc(parse_yaml(text, display_path(path)), LocalConfig, what="local rules")
        atomic_write(path, text)
        _ignored(project_file.parent)
    return path


def unpin(project_file: Path, names: Collection[str]) -> None:
    """Forget this machine's pins of `names` (moved into the reviewed file)."""
    path = local_path(project_file)
    with project_lock(project_file):
        if not path.is_file():
            return
        text = remove_entries(read_text(path, display_path(path)), "pins", names)
        validate_doc(parse_yaml(text, display_path(path)), LocalConfig, what="local rules")
        atomic_write(path, text)


def _ignored(root: Path) -> None:
    """`bundlectl.local.yaml` in the project's `.gitignore`, in a git checkout or beside an
    existing `.gitignore`."""
    ignore = root / ".gitignore"
    in_git = any((folder / ".git").exists() for folder in (root, *root.parents))
    if not ignore.is_file() and not in_git:
        return
    text = ignore.read_text(encoding="utf-8") if ignore.is_file() else ""
    if any(line.strip() in (LOCAL_FILE, f"/{LOCAL_FILE}") for line in text.splitlines()):
        return
    joined = text if not text or text.endswith("\n") else text + "\n"
    atomic_write(ignore, f"{joined}{LOCAL_FILE}\n")
