"""`bundlectl install`, `remove` and `lock`: edit the config, resolve, write the lock."""

from __future__ import annotations

from pathlib import Path

from bundlectl.cli.options import Format
from bundlectl.config.edits import edit_bundles, set_entries
from bundlectl.config.fields import check_requirement
from bundlectl.config.fsio import project_lock, write_project_file
from bundlectl.config.local import unpin
from bundlectl.config.lockfile import describe_drift, dump_lock
from bundlectl.config.models import LockFile
from bundlectl.config.project import Project, load_project, project_from_text
from bundlectl.config.requirements import parse_requirement, requirement_name
from bundlectl.errors import ReportedFailure, UsageError
from bundlectl.output import JSON_FORMAT_VERSION, emit_json, note, out
from bundlectl.resolve.resolved import Resolution, resolve_project


def _changes(old: LockFile | None, new: LockFile) -> list[dict[str, str | None]]:
    """Bundles whose version or registry changes (a manifest published under a locked bundle's
    name moves it to another registry at the same version)."""
    before = dict(old.bundles) if old else {}
    after = dict(new.bundles)
    rows = []
    for name in sorted(set(before) | set(after)):
        was, now = before.get(name), after.get(name)
        if (was and was.version, was and was.source) != (now and now.version, now and now.source):
            row: dict[str, str | None] = {
                "name": name,
                "from": was.version if was else None,
                "to": now.version if now else None,
            }
            if was and now and was.source != now.source:
                row["from_source"], row["to_source"] = was.source, now.source
            rows.append(row)
    return rows


def _report(
    project: Project,
    before: LockFile | None,
    resolution: Resolution,
    *,
    dry_run: bool,
    fmt: Format,
    wrote_config: bool,
) -> None:
    changes = _changes(before, resolution.lock)
    if fmt is Format.json:
        emit_json(
            {
                "format_version": JSON_FORMAT_VERSION,
                "dry_run": dry_run,
                "changes": changes,
                "bundles": {n: b.version for n, b in resolution.lock.bundles.items()},
                "notes": resolution.merged.notes,
            }
        )
        return
    for line in resolution.merged.notes:
        note(line)
    brought = {b.manifest.name: sorted(b.manifest.agents) for b in resolution.merged.bundles}
    for change in changes:
        if change["from"] is None:
            out(f"+ {change['name']} {change['to']}")
            agents = brought.get(str(change["name"])) or []
            if agents:  # they are in the project's policy now, whatever bundlectl.yaml says
                note(
                    f"bundle {change['name']} brings agent(s) {', '.join(agents)}: "
                    f"`bundlectl resolve --agent {agents[0]}` shows what they may call"
                )
        elif change["to"] is None:
            out(f"- {change['name']} {change['from']}")
        elif "to_source" in change:
            out(
                f"~ {change['name']} {change['from']} ({change['from_source']}) -> "
                f"{change['to']} ({change['to_source']})"
            )
        else:
            out(f"~ {change['name']} {change['from']} -> {change['to']}")
    if not changes:
        out("no bundle versions change" + _indexes_checked(project))
    files = [project.display] if wrote_config else []
    files.append(project.lock_path.name)
    out(("would write " if dry_run else "wrote ") + " and ".join(files))


def _indexes_checked(project: Project) -> str:
    """When the project's remote registries' indexes were last checked, when it has any: a
    new version published since is not seen until they are checked again."""
    urls = [e for e in project.config.registries if e.startswith(("https://", "http://", "oci://"))]
    if not urls:
        return ""
    from bundlectl.config import remote, remote_index  # noqa: PLC0415 - only with one

    said = "; ".join(f"{url} checked {remote.checked_at(url)}" for url in urls)
    again = "" if remote_index.REQUESTS.revalidate else "; --refresh checks them again"
    return f" (registry index: {said}{again})"


def _apply(
    project: Project,
    new_text: str | None,
    *,
    dry_run: bool,
    fmt: Format,
    upgrade: set[str] | None = None,
) -> int:
    """Resolve the project as it would be with `new_text`, then write config and lock."""
    before = project.lock  # read now: it is about to be replaced
    target = project_from_text(project.config_path, new_text) if new_text else project
    resolution = resolve_project(target, upgrade=upgrade)
    if not dry_run:
        if new_text is not None:
            write_project_file(project.config_path, new_text)
        resolution.write_lock()
    _report(
        project, before, resolution, dry_run=dry_run, fmt=fmt, wrote_config=new_text is not None
    )
    return 0


def pins_update(config: Path | None, *, dry_run: bool, fmt: Format) -> int:
    """`bundlectl pins update`: this machine's approved pins into `policy.pins`, re-locked;
    then gone from bundlectl.local.yaml."""
    project = load_project(config)
    pending = project.unreviewed_pins()
    if not pending:
        if fmt is Format.json:
            emit_json({"format_version": JSON_FORMAT_VERSION, "recorded": {}})
        else:
            out(f"nothing to record: every pin of this machine is in {project.display}")
        return 0
    with project_lock(project.config_path):
        text = project.config_path.read_text(encoding="utf-8")
        policy = project.doc.data.get("policy") if isinstance(project.doc.data, dict) else None
        if isinstance(policy, dict) and isinstance(policy.get("pins"), dict):
            edited = set_entries(text, ("policy", "pins"), pending)
        else:
            pins = dict(policy.get("pins") or {}) if isinstance(policy, dict) else {}
            edited = set_entries(text, "policy", {"pins": {**pins, **pending}})
        if fmt is Format.text:
            for name, digest in sorted(pending.items()):
                out(f"{'would record' if dry_run else 'recorded'} policy.pins {name}: {digest}")
        code = _apply(project, edited, dry_run=dry_run, fmt=fmt)
    if not dry_run:
        unpin(project.config_path, list(pending))
    return code


def install(config: Path | None, requirements: list[str], *, dry_run: bool, fmt: Format) -> int:
    for text in requirements:
        try:
            check_requirement(text)
        except ValueError as exc:
            raise UsageError(
                str(exc), hint="write NAME or NAME<spec>, e.g. 'github>=1,<2'"
            ) from None
    project = load_project(config)
    project.registry.require_names([requirement_name(text) for text in requirements])
    _satisfiable(project, requirements)
    with project_lock(project.config_path):
        text = project.config_path.read_text(encoding="utf-8")
        edited = edit_bundles(text, add=requirements)
        if edited == text and fmt is Format.text:  # every requirement is listed as given
            installed = resolve_project(project).lock.bundles
            for name in map(requirement_name, requirements):
                locked = installed.get(name)
                version = f" {locked.version}" if locked is not None else ""
                out(f"{name}{version} is already installed")
            return 0
        return _apply(project, edited, dry_run=dry_run, fmt=fmt)


def _satisfiable(project: Project, requirements: list[str]) -> None:
    """A requirement from the command line that no version of its bundle meets is a usage
    error about that argument (resolution would blame bundlectl.yaml, where it would go)."""
    for text in requirements:
        wanted = parse_requirement(text)
        versions = project.registry.versions(wanted.name)
        if wanted.specifier and not any(
            wanted.specifier.contains(v, prereleases=True) for v in versions
        ):
            raise UsageError(
                f"no version of {wanted.name!r} satisfies {text!r} (from the command line); "
                f"available: {', '.join(map(str, versions))}",
                hint=f"`bundlectl show {wanted.name}` lists its versions",
            )


def remove(config: Path | None, names: list[str], *, dry_run: bool, fmt: Format) -> int:
    """Remove bundles. A bundle installed only as a dependency may be named too, when everything
    that requires it goes as well; anything still required by a remaining bundle is refused."""
    project = load_project(config)
    listed = {requirement_name(r) for r in project.config.bundles}
    with project_lock(project.config_path):
        current = resolve_project(project)
        installed = {m.manifest.name for m in current.merged.bundles}
        unknown = [n for n in names if n not in listed and n not in installed]
        if unknown:
            raise UsageError(
                f"not installed: {', '.join(unknown)}",
                hint=f"listed in {project.display}: {', '.join(sorted(listed)) or 'nothing'}",
            )
        gone = set(names)
        for loaded in current.merged.bundles:
            if loaded.manifest.name in gone:
                continue
            needs = gone & {requirement_name(r) for r in loaded.manifest.requires}
            if needs:
                raise ReportedFailure(
                    f"cannot remove {', '.join(sorted(needs))}: required by {loaded.pin}",
                    hint=f"remove {loaded.manifest.name} as well, or keep "
                    f"{', '.join(sorted(needs))}",
                )
        text = project.config_path.read_text(encoding="utf-8")
        return _apply(project, edit_bundles(text, remove=gone & listed), dry_run=dry_run, fmt=fmt)


def lock(config: Path | None, names: list[str], *, check: bool, upgrade: bool, fmt: Format) -> int:
    if names and not upgrade:
        raise UsageError("bundle names go with --upgrade", hint="bundlectl lock --upgrade NAME")
    if check and upgrade:
        raise UsageError("--check and --upgrade cannot be combined")
    project = load_project(config)
    project.registry.require_names(names)
    if project.local is not None and project.local.rules and fmt is not Format.json:
        note(
            f"{project.local.rules} local rule(s) in {project.local.doc.file} add to this "
            "policy on this machine; the lock's policy digest covers bundlectl.yaml's only"
        )
    if not check:
        with project_lock(project.config_path):
            return _apply(
                project, None, dry_run=False, fmt=fmt, upgrade=set(names) if upgrade else None
            )
    resolution = resolve_project(project)
    fresh = dump_lock(resolution.lock)
    on_disk = project.lock_path.read_text("utf-8") if project.lock_path.exists() else None
    stale = fresh != on_disk
    drift = describe_drift(project.lock, resolution.lock) if stale else []
    unreviewed = project.unreviewed_pins()
    if unreviewed:  # approved on this machine, not yet in the reviewed file
        stale = True
        drift.append(
            f"{project.local.doc.file if project.local else 'bundlectl.local.yaml'} pins tool "
            f"definitions {project.display} does not: {', '.join(sorted(unreviewed))} "
            "(run `bundlectl pins update`)"
        )
    if fmt is Format.json:
        emit_json({"format_version": JSON_FORMAT_VERSION, "stale": stale, "reasons": drift})
        return 1 if stale else 0
    if stale:
        then = "`bundlectl pins update`" if unreviewed else "`bundlectl lock`"
        raise ReportedFailure(
            f"{project.lock_path.name} is stale:\n" + "\n".join(f"  {line}" for line in drift),
            hint=f"run {then} and commit the result",
        )
    out(f"{project.lock_path.name} is up to date")
    return 0
