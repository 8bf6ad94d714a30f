"""`bundlectl export CLIENT`: write an agent's servers and policy into a client's own config file
(SPEC 8) — directly, as the client's native tool filter, or as one gateway entry."""

from __future__ import annotations

import difflib
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bundlectl.cli.options import ExportVia, Format
from bundlectl.clients import get
from bundlectl.clients.base import Client, Export, Misfit, launcher
from bundlectl.clients.planning import plan, unchecked
from bundlectl.config.fsio import atomic_write
from bundlectl.config.paths import display_path
from bundlectl.config.project import load_project
from bundlectl.config.yamlio import read_text
from bundlectl.errors import ReportedFailure, UsageError
from bundlectl.output import JSON_FORMAT_VERSION, emit_json, err, write
from bundlectl.policy.rules import default_agent
from bundlectl.resolve.resolved import resolve_project


def run(
    config: Path | None,
    client_name: str,
    *,
    agent: str | None,
    via: ExportVia,
    output: Path | None,
    check: bool,
    dry_run: bool,
    live: bool = False,
    unlisted: bool = False,
    absolute: bool = False,
    fmt: Format = Format.text,
) -> int:
    client = get(client_name)
    project = load_project(config)
    resolution = resolve_project(project)
    who = default_agent(agent)
    # An unknown name would export no tools and remove the servers bundlectl manages.
    resolution.policy.require_listed([who], unlisted=unlisted)
    catalogs = None
    if live and via is not ExportVia.gateway:
        # only now: asking servers costs the import of the transports
        from bundlectl.mcpio.live import catalogs as live_catalogs  # noqa: PLC0415

        catalogs = live_catalogs(unchecked(resolution, who), project.root)
    export = plan(resolution, who, catalogs)
    for line in export.cannot_start:
        err(f"note: {line}: the client will not start it either")
    target = (output or client.default_path(project.root)).absolute()
    export.absolute = absolute or not target.is_relative_to(project.root)
    managed = set(resolution.merged.servers)
    originals: dict[Path, str] = {}

    def current(path: Path) -> str:
        if path not in originals:
            originals[path] = read_text(path, display_path(path)) if path.exists() else ""
        return originals[path]

    chosen = via
    misfits: list[Misfit] = []
    if via is not ExportVia.gateway:
        texts, misfits = client.write(target, current, export, managed, False)
        misfits += [
            Misfit(label, "no client file can express a rule's argument conditions")
            for label in export.conditional
        ]
        misfits += [
            Misfit(
                f"server {name!r} (policy.sandbox)",
                "a client starts its servers itself, outside bundlectl's sandbox",
            )
            for name in export.sandboxed
        ]
        if misfits and via is ExportVia.direct:
            lines = "\n".join(f"  {m.what}: {m.why}" for m in misfits)
            raise ReportedFailure(
                f"{client.title} cannot express the policy of agent {who!r} exactly; "
                f"{len(misfits)} rule(s) do not fit:\n{lines}",
                hint=f"bundlectl export {client.name} --agent {who} --via gateway "
                "(the gateway enforces every rule)",
            )
        chosen = ExportVia.gateway if misfits else ExportVia.direct
    if chosen is ExportVia.gateway:
        texts, _ = client.write(target, current, export, managed, True)
    changed = {path: text for path, text in texts.items() if text != current(path)}
    done = _Done(client, export, chosen, _how(chosen, export), misfits, target)
    if check:
        return _checked(done, changed, fmt)
    if dry_run:
        return _dry_run(done, changed, current, fmt)
    for path in changed:
        _inside(path, export.project_root)
    for path, text in changed.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, text)
    return _wrote(done, list(changed), project.root, fmt)


@dataclass
class _Done:
    """What an export chose, for its report."""

    client: Client
    export: Export
    chosen: ExportVia
    how: str
    misfits: list[Misfit]
    target: Path

    def json(self, files: list[Path], **state: bool) -> dict[str, object]:
        """`export --format json`: what was (or would be) written, how, and why."""
        exact = self.chosen is not ExportVia.gateway
        return {
            "format_version": JSON_FORMAT_VERSION,
            "client": self.client.name,
            "agent": self.export.agent,
            "via": self.chosen.value,
            "summary": self.how,
            "files": [display_path(p) for p in files],
            "not_exact": [] if exact else [{"rule": m.what, "why": m.why} for m in self.misfits],
            **state,
        }


def _checked(done: _Done, changed: dict[Path, str], fmt: Format) -> int:
    """`--check`: exit 1 when the file differs from what export writes."""
    if changed:
        names = ", ".join(display_path(p) for p in changed)
        raise ReportedFailure(
            f"{names} {'differs' if len(changed) == 1 else 'differ'} from what "
            f"`bundlectl export {done.client.name}` writes ({done.how})",
            hint=f"run bundlectl export {done.client.name} --agent {done.export.agent} and "
            "commit the result",
        )
    if fmt is Format.json:
        emit_json(done.json([], up_to_date=True))
        return 0
    _say(f"{display_path(done.target)} is up to date ({done.how})", _reasons(done))
    return 0


def _dry_run(
    done: _Done, changed: dict[Path, str], current: Callable[[Path], str], fmt: Format
) -> int:
    if fmt is Format.json:
        emit_json(done.json(list(changed), dry_run=True))
        return 0
    _diff(changed, current)
    _say(f"dry run: {len(changed)} file(s) would change ({done.how})", _reasons(done))
    return 0


def _wrote(done: _Done, changed: list[Path], root: Path, fmt: Format) -> int:
    notes = list(done.client.notes(done.target, root))
    gateway = done.chosen is ExportVia.gateway and not done.export.absolute
    warning = _on_path() if gateway else None
    if fmt is Format.json:
        emit_json({**done.json(changed), "notes": notes, "warnings": [warning] if warning else []})
        return 0
    nothing = "already up to date" if done.export.servers else "the agent may use no server"
    written = ", ".join(display_path(p) for p in changed) or f"nothing: {nothing}"
    _say(f"wrote {written} ({done.how})", _reasons(done))
    for note in notes:
        err(f"note: {note}")
    if warning is not None:
        err(f"warning: {warning}")
    return 0


def _on_path() -> str | None:
    """A portable gateway entry runs `bundlectl` from the PATH the client sees: a warning when
    none is there, or when it is another installation, with the ways out (#37)."""
    found = shutil.which("bundlectl")
    ours = launcher()
    way = (
        "install it where clients find it (`pipx install bundlectl` or `uv tool install "
        "bundlectl`), or export with --absolute to name this one"
    )
    if found is None:
        return (
            "no `bundlectl` is on PATH, so the client cannot start the gateway this entry "
            f"runs; {way}"
        )
    if len(ours) == 1 and Path(found).resolve() != Path(ours[0]).resolve():
        return (
            f"`bundlectl` on PATH is {found}, not the one that wrote this entry "
            f"({ours[0]}): the client will run that installation; {way}"
        )
    return None


def _inside(path: Path, root: Path) -> None:
    """A file of the project (by its path) must stay in the project once symlinks are followed:
    a `.claude` folder that is a symlink out of it is not written through. (Files outside the
    project by design, a client's user-level file, are not checked.)"""
    base = root.resolve()
    absolute = path if path.is_absolute() else Path.cwd() / path
    if not absolute.is_relative_to(root.absolute()) and not absolute.is_relative_to(base):
        return
    real = absolute.resolve()
    if real != base and not real.is_relative_to(base):
        raise UsageError(
            f"{display_path(path)} leads outside the project (to {real}) through a symbolic link; "
            "nothing was written",
            hint="replace the link with a folder of the project, or give --output a file in it",
        )


def _how(chosen: ExportVia, export: Export) -> str:
    """How the agent was exported (why direct would not be exact: `_reasons`)."""
    if chosen is ExportVia.direct:
        return f"direct: {len(export.servers)} server(s), the tool filter of agent {export.agent!r}"
    return f"gateway: bundlectl serve --agent {export.agent}"


def _say(line: str, more: list[str]) -> None:
    for text in (line, *more):
        err(text)


def _diff(changed: dict[Path, str], current: Callable[[Path], str]) -> None:
    """`--dry-run`: each file's change as a unified diff."""
    for path, text in changed.items():
        shown = display_path(path)
        diff = difflib.unified_diff(
            current(path).splitlines(keepends=True),
            text.splitlines(keepends=True),
            fromfile=f"a/{shown}",
            tofile=f"b/{shown}",
        )
        write("".join(diff))


def _reasons(done: _Done) -> list[str]:
    """Why direct would not be exact: one line a rule, naming it."""
    if done.chosen is not ExportVia.gateway or not done.misfits:
        return []
    return ["direct would not be exact:", *(f"  {m.what}: {m.why}" for m in done.misfits)]
