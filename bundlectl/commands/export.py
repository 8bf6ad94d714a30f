"""`bundlectl export CLIENT`: write an agent's servers and policy into a client's own config file
(SPEC 8) — directly, as the client's native tool filter, or as one gateway entry."""

from __future__ import annotations

import difflib
import uuid
from pathlib import Path

from bundlectl.calls.pipeline import default_agent
from bundlectl.clients import Export, Misfit, ServerPlan, get
from bundlectl.errors import ReportedFailure, UsageError
from bundlectl.expand import references
from bundlectl.fsio import atomic_write
from bundlectl.output import ExportVia, err, write
from bundlectl.paths import display_path
from bundlectl.patterns import part_matches
from bundlectl.policy import CompiledAgent
from bundlectl.project import load_project
from bundlectl.resolution import Resolution, resolve_project
from bundlectl.secretscan import SECRET_NAME
from bundlectl.yamlio import read_text


def plan(resolution: Resolution, agent: str) -> Export:
    """The servers `agent` may use, each with the decision on every declared tool."""
    compiled = resolution.policy.agent(agent)
    secret_inputs = {need.name for need in resolution.merged.env if need.spec.secret}
    servers = []
    for name, merged in resolution.merged.servers.items():
        spec = merged.spec
        if spec.disabled:
            continue
        decisions = [compiled.decide(name, tool.name, interactive=True) for tool in spec.tools]
        whole = _whole(compiled, name)
        if not any(d.effect != "deny" for d in decisions) and whole is None:
            continue
        values = [*spec.env.items(), *spec.headers.items()]
        secret = {
            var
            for key, value in values
            for var in references(value)
            if var in secret_inputs or SECRET_NAME.search(key) or SECRET_NAME.search(var)
        }
        servers.append(ServerPlan(name, spec, decisions, whole, frozenset(secret)))
    project = resolution.project
    return Export(agent, servers, project.config_path, project.root)


def _whole(compiled: CompiledAgent, server: str) -> str | None:
    """ "allow"/"ask" when every tool of `server`, declared or not, gets that effect: every rule
    that can match the server matches all of its tools."""
    if compiled.policy.pin_tools:
        return None  # tools the lock does not record are denied

    for rule in compiled.rules:
        server_part, tool_part = rule.parts
        if part_matches(server_part, server) and tool_part != "*":
            return None
    effect = compiled.decide(server, f"any-tool-{uuid.uuid4().hex}", interactive=True).effect
    return effect if effect != "deny" else None


def run(
    config: Path | None,
    client_name: str,
    *,
    agent: str | None,
    via: ExportVia,
    output: Path | None,
    check: bool,
    dry_run: bool,
    unlisted: bool = False,
) -> int:
    client = get(client_name)
    project = load_project(config)
    resolution = resolve_project(project)
    who = default_agent(agent)
    # An unknown name would export no tools and remove the servers bundlectl manages.
    resolution.policy.require_listed([who], unlisted=unlisted)
    export = plan(resolution, who)
    target = (output or client.default_path(project.root)).absolute()
    export.absolute = not target.is_relative_to(project.root)
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
        if misfits and via is ExportVia.direct:
            lines = "\n".join(f"  {m.what}: {m.why}" for m in misfits)
            raise ReportedFailure(
                f"{client.title} cannot express agent {who!r}'s policy exactly; "
                f"{len(misfits)} rule(s) do not fit:\n{lines}",
                hint=f"bundlectl export {client.name} --agent {who} --via gateway "
                "(the gateway enforces every rule)",
            )
        chosen = ExportVia.gateway if misfits else ExportVia.direct
    if chosen is ExportVia.gateway:
        texts, _ = client.write(target, current, export, managed, True)
    changed = {path: text for path, text in texts.items() if text != current(path)}
    how = _how(chosen, export, misfits, via)
    if check:
        if changed:
            names = ", ".join(display_path(p) for p in changed)
            raise ReportedFailure(
                f"{names} differ from what `bundlectl export {client.name}` writes ({how})",
                hint=f"run bundlectl export {client.name} --agent {who} and commit the result",
            )
        err(f"{display_path(target)} is up to date ({how})")
        return 0
    if dry_run:
        for path, text in changed.items():
            shown = display_path(path)
            diff = difflib.unified_diff(
                current(path).splitlines(keepends=True),
                text.splitlines(keepends=True),
                fromfile=f"a/{shown}",
                tofile=f"b/{shown}",
            )
            write("".join(diff))
        err(f"dry run: {len(changed)} file(s) would change ({how})")
        return 0

    for path in changed:
        _inside(path, export.project_root)
    for path, text in changed.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, text)
    nothing = (
        "nothing: already up to date" if export.servers else "nothing: the agent may use no server"
    )
    written = ", ".join(display_path(p) for p in changed) or nothing
    err(f"wrote {written} ({how})")
    return 0


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


def _how(chosen: ExportVia, export: Export, misfits: list[Misfit], asked: ExportVia) -> str:
    if chosen is ExportVia.direct:
        return f"direct: {len(export.servers)} server(s), agent {export.agent!r}'s tool filter"
    why = ""
    if asked is ExportVia.auto and misfits:
        why = f"; direct would not be exact: {misfits[0].what} ({misfits[0].why})"
        if len(misfits) > 1:
            why += f" and {len(misfits) - 1} more"
    return f"gateway: bundlectl serve --agent {export.agent}{why}"
