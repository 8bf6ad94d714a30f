"""`bundlectl codegen`: write the agent's tools as a typed Python package (SPEC 9)."""

from __future__ import annotations

import json
import keyword
import sys
from pathlib import Path
from typing import Any

from bundlectl.clients.planning import undeclared
from bundlectl.codemode.codegen import Place, generate
from bundlectl.codemode.skills import read_skills, skill_seed
from bundlectl.codemode.typescript import generate_typescript
from bundlectl.config.fsio import atomic_write
from bundlectl.config.paths import display_path
from bundlectl.config.project import load_project
from bundlectl.errors import ReportedFailure, UsageError
from bundlectl.output import err
from bundlectl.policy.rules import default_agent
from bundlectl.resolve.resolved import resolve_project

# The files codegen wrote into a folder: the only ones it replaces or removes there.
MANIFEST = ".bundlectl-codegen.json"


def run(
    config: Path | None,
    *,
    agent: str | None,
    out: Path,
    check: bool,
    lang: str = "python",
    live: bool = False,
    unlisted: bool = False,
) -> int:

    project = load_project(config)
    resolution = resolve_project(project)
    who = default_agent(agent)
    resolution.policy.require_listed([who], unlisted=unlisted)
    compiled = resolution.policy.agent(who)
    enabled = {n: m for n, m in resolution.merged.servers.items() if not m.spec.disabled}
    catalogs: dict[str, list[Any]] = {n: list(m.spec.tools) for n, m in enabled.items()}
    skipped = undeclared(resolution, who)
    if live:  # servers that declare no catalog are asked for their tools
        # only now: asking servers costs the import of the transports
        from bundlectl.mcpio.live import catalogs as live_catalogs  # noqa: PLC0415

        catalogs.update(live_catalogs(skipped, project.root))
    servers = []
    for name, tools in catalogs.items():
        usable = compiled.usable(name, tools, _name)
        if usable:
            servers.append((name, [_with_conditions(compiled, name, t) for t in usable]))
    shown = display_path(project.config_path)
    make = generate_typescript if lang == "typescript" else generate
    skills, skill_problems = read_skills(out / "skills")
    generated = make(
        who,
        servers,
        config=shown,
        names=project.config.gateway.names,
        place=_place(out, project.root),
        skills=skills,
    )
    wanted = {out / rel: text for rel, text in generated.files.items()}
    owned = _owned(out)
    foreign = [p for p in wanted if p.exists() and p not in owned]
    if foreign:
        names = ", ".join(display_path(p) for p in foreign[:5])
        raise UsageError(
            f"codegen would overwrite {len(foreign)} file(s) it did not write: {names}",
            hint="give --out a folder of its own (for example --out gen), or move those files",
        )
    stale = sorted(p for p in owned if p not in wanted and p.is_file())
    changed = [p for p, text in wanted.items() if not p.exists() or p.read_bytes() != text.encode()]
    count = sum(len(tools) for _, tools in servers)
    if check:
        if changed or stale:
            names = ", ".join(display_path(p) for p in [*changed, *stale][:5])
            raise ReportedFailure(
                f"{len(changed) + len(stale)} generated file(s) differ: {names}",
                hint=f"run bundlectl codegen --agent {who} --out {display_path(out)}",
            )
        err(f"{display_path(out)} is up to date ({count} tools)")
        return 0

    _write(out, wanted, stale, changed, who=who, lang=lang)
    err(
        f"wrote {len(changed)} file(s) to {display_path(out)}: {count} tools of "
        f"{len(servers)} server(s) for agent {who!r}"
    )
    for problem in skill_problems:
        err(f"note: {problem}")
    if skipped and not live:
        names = ", ".join(skipped)
        err(
            f"note: {len(skipped)} server(s) declare no tools, so none of theirs were "
            f"generated: {names} (bundlectl codegen --live asks the servers)"
        )
    if not count:
        listed = who in resolution.policy.agents
        why = "its rules allow no declared tool" if listed else "it is not listed under agents"
        err(f"note: agent {who!r} may call no tool: {why} (bundlectl tools --agent {who})")
    return 0


def _write(
    out: Path,
    wanted: dict[Path, str],
    stale: list[Path],
    changed: list[Path],
    *,
    who: str,
    lang: str,
) -> None:
    """Remove what codegen wrote before and no longer writes, write what changed, record the
    files in the manifest, and seed `skills/` the first time (never in the manifest: the agent's
    own from then on)."""
    try:
        for path in stale:
            path.unlink()
            _prune(path.parent, out)
        for path in changed:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, wanted[path])
        files = sorted(p.relative_to(out).as_posix() for p in wanted)
        manifest = {"generated_by": "bundlectl codegen", "agent": who, "files": files}
        atomic_write(out / MANIFEST, json.dumps(manifest, indent=2) + "\n")
        if not (out / "skills").exists():  # the agent's own from then on: never in the manifest
            for rel, text in skill_seed(lang).items():
                (out / rel).parent.mkdir(parents=True, exist_ok=True)
                atomic_write(out / rel, text)
    except OSError as exc:
        raise UsageError(
            f"cannot write {display_path(Path(exc.filename or out))}: {exc.strerror}",
            hint="give --out a folder you can write to",
        ) from None


def _place(out: Path, root: Path) -> Place:
    """Where `out` is from the project root, and its import path from there (if any)."""
    try:
        rel = out.resolve().relative_to(root.resolve())
    except ValueError:  # outside the project
        return Place(out.resolve().as_posix(), None)
    parts = rel.parts
    importable = all(p.isidentifier() and not keyword.iskeyword(p) for p in parts) and not (
        parts and parts[0] in sys.stdlib_module_names  # `code/` would import the stdlib's
    )
    return Place(rel.as_posix(), ".".join(parts) if importable else None)


def _owned(out: Path) -> set[Path]:
    """The files codegen wrote into `out` last time: those its manifest lists, or (a folder
    generated before the manifest existed) the files under `servers/` with its header."""
    manifest = out / MANIFEST
    if manifest.is_file():
        try:
            files = json.loads(manifest.read_text())["files"]
            return {out / rel for rel in files if isinstance(rel, str) and _inside(rel)}
        except (OSError, ValueError, KeyError, TypeError):
            raise UsageError(
                f"{display_path(manifest)} is not a codegen manifest",
                hint="delete it and run codegen again: files it does not list are never replaced",
            ) from None
    legacy = out / "servers"
    return {p for p in legacy.rglob("*") if p.is_file() and _ours(p)} if legacy.is_dir() else set()


def _inside(rel: str) -> bool:
    """A manifest entry that names a file below the folder (never `/x` or `../x`)."""
    return bool(rel) and not rel.startswith("/") and ".." not in rel.split("/")


def _ours(path: Path) -> bool:
    if path.name == "py.typed":
        return True
    try:
        return path.read_bytes().lstrip(b"#/ ").startswith(b"Generated by `bundlectl codegen`")
    except OSError:
        return False


def _prune(folder: Path, out: Path) -> None:
    """Remove folders a stale file leaves empty, up to (not including) `out`."""
    while folder != out and folder.is_relative_to(out) and not any(folder.iterdir()):
        folder.rmdir()
        folder = folder.parent


def _name(tool: Any) -> str:
    return str(tool.name)


def _with_conditions(compiled: Any, server: str, tool: Any) -> Any:
    """The tool, its description followed by the agent's argument conditions on it (SPEC 10):
    the generated docstring tells the code's author which calls the policy lets through."""
    rules = [r for r in compiled.conditional_matching(server, _name(tool)) if r.condition]
    if not rules:
        return tool
    said = "; ".join(f"{r.effect} if {r.condition.describe()}" for r in rules)
    note = f"Policy of agent {compiled.name!r} on the arguments: {said}."
    description = f"{tool.description}\n\n{note}" if tool.description else note
    return tool.model_copy(update={"description": description})
