"""`bundlectl import FORMAT FILE`: a client's config file, or an agix `config.yaml`, as
`bundlectl.yaml` entries (SPEC 8) — servers and the agent's rules, every implicit permission
spelled out, literal secrets turned into `${NAME}` references. An existing `bundlectl.yaml` is
edited in place: its comments and formatting stay."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

from bundlectl.clients import NAMES, claude_code, get, jsonc
from bundlectl.clients.agix import read_agix
from bundlectl.clients.base import Imported
from bundlectl.clients.server_json import RECORD_NOTE, read_server_json
from bundlectl.config.edits import edit_bundles, set_entries
from bundlectl.config.fsio import project_lock, write_project_file
from bundlectl.config.paths import display_path
from bundlectl.config.project import find_project, load_project, project_from_text
from bundlectl.config.requirements import requirement_name
from bundlectl.config.yamlio import parse_yaml, read_text
from bundlectl.errors import BundlectlError, ReportedFailure, UsageError
from bundlectl.output import err, write
from bundlectl.resolve.resolved import resolve_project

NAME = re.compile(r"[^a-z0-9_-]+")


def run(
    config: Path | None,
    fmt: str,
    given: str | Path,
    *,
    agent: str | None,
    dry_run: bool,
    replace: list[str] | None = None,
    record: bool = False,
) -> int:
    """`record`: start each imported server and write its live tools as its catalog, as
    `tools --live --record` does."""
    if record and dry_run:
        raise UsageError(
            "--record starts the imported servers and writes their tools; --dry-run writes nothing",
            hint="import first, then `bundlectl tools --live --record --server NAME`",
        )
    source, (imported, notes) = _source(fmt, given, config)
    if imported.gateways:
        notes += _without_gateways(imported, display_path(source))
        if not (imported.servers or imported.allow or imported.ask or imported.deny):
            for line in notes:
                err(f"note: {line}")
            err(f"nothing to import from {display_path(source)}")
            return 0
    if not (imported.servers or imported.allow or imported.ask or imported.deny) and not (
        imported.agents or imported.bundles
    ):  # a file of another client (or an empty one) would import an agent with no tools
        raise UsageError(
            f"{display_path(source)} holds no MCP servers or tool rules in {fmt}'s format",
            hint=f"check the file and the format (formats: agix, server-json, {', '.join(NAMES)})",
        )
    who = agent or NAME.sub("-", fmt)
    target = _config_path(config)
    existing = _existing_servers(target)
    notes += _drop_known(imported, existing)
    _refuse_replacements(imported, existing, replace or [], display_path(source))
    notes += _spell_out_unlisted(imported, existing)
    fresh = not target.exists()
    before = "version: 1\n" if fresh else read_text(target, display_path(target))
    after = merge(before, imported, who, imported.bundles)
    if fresh and not imported.default_allow:  # as `init` writes: unlisted agents get nothing
        after = set_entries(after, "policy", {"default": "deny"})
        notes.append(
            f"a new {display_path(target)}: policy.default is deny, as `bundlectl init` "
            "writes (an agent not listed under agents: may call nothing)"
        )
    # Resolved like `install` does, before anything is written: the lock is written with it.
    resolution = resolve_project(project_from_text(target, after))
    if dry_run:
        shown = display_path(target)
        diff = difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile=f"a/{shown}",
            tofile=f"b/{shown}",
        )
        write("".join(diff))
    else:
        with project_lock(target):
            write_project_file(target, after)
            resolution.write_lock()
    servers = len(imported.servers)
    agents = len(imported.agents) if imported.agents is not None else 1
    verb = "would import" if dry_run else "imported"
    lock = display_path(resolution.project.lock_path)
    err(
        f"{verb} {servers} server(s) and {agents} agent(s) into {display_path(target)}"
        + (f" (and {lock} would be rewritten)" if dry_run else f", and wrote {lock}")
    )
    for var, where in sorted(imported.secrets.items()):
        err(f"note: a literal secret in {where} became ${{{var}}}: export {var}=... before use")
    if imported.default_allow:
        notes.append(
            "policy.default is now allow: agix gives agents it does not list every tool "
            "(lint BCL205 warns about it; set deny once every agent is listed)"
        )
    for line in [*notes, *imported.notes]:
        if not (record and line.startswith(RECORD_NOTE)):  # done now, not a thing to do
            err(f"note: {line}")
    return _record(target, list(imported.servers)) if record else 0


def _refuse_record_dry_run(*, record: bool, dry_run: bool) -> None:
    if record and dry_run:
        raise UsageError(
            "--record starts the imported servers and writes their tools; --dry-run writes nothing",
            hint="import first, then `bundlectl tools --live --record --server NAME`",
        )


def _record(target: Path, servers: list[str]) -> int:
    """`import --record`: the imported servers' live tools written as their catalogs."""
    if not servers:
        return 0
    from bundlectl.cli.commands.tools import run_record  # noqa: PLC0415 - it starts servers

    return run_record(resolve_project(load_project(target)), servers=servers)


def _read(fmt: str, source: Path, project: Path) -> tuple[Imported, list[str]]:
    """The file in bundlectl's terms, and notes on what was read beside it or left out."""
    text = read_text(source, display_path(source))
    if fmt == "agix":
        return read_agix(text, display_path(source))
    if fmt == "server-json":
        return read_server_json(text, display_path(source))
    client = get(fmt)
    imported = client.read(text, display_path(source))
    notes: list[str] = []
    if fmt == "claude-code":  # its permissions live beside .mcp.json
        settings = source.parent / ".claude" / "settings.json"
        if settings.is_file():
            shown = display_path(settings)
            extra = client.read(read_text(settings, shown), shown)
            imported.allow += extra.allow
            imported.ask += extra.ask
            imported.deny += extra.deny
        data = jsonc.parse(text, display_path(source)).value
        notes += claude_code.local_scope(data, project, imported)
    return imported, notes


def _source(
    fmt: str, given: str | Path, config: Path | None
) -> tuple[Path, tuple[Imported, list[str]]]:
    """The file named (a server.json may also be a URL), and what it holds."""
    if fmt == "server-json" and str(given).startswith(("https://", "http://")):
        source = Path(str(given).rsplit("/", 1)[-1] or "server.json")
        return source, read_server_json(_fetched(str(given)), str(given))
    source = Path(given)
    if not source.is_file():
        raise UsageError(
            f"{display_path(source)}: no such file", hint="give the client's config file"
        )
    return source, _read(fmt, source, _config_path(config).parent.resolve())


def _fetched(url: str) -> str:
    """A server.json from the web (the MCP Registry's API or a repository's raw file)."""
    import urllib.error  # noqa: PLC0415 - only for a URL
    import urllib.request  # noqa: PLC0415

    from bundlectl.config import urls  # noqa: PLC0415

    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with urls.fetch(request, timeout=30) as response:
            return str(response.read(4 << 20).decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise UsageError(
            f"cannot fetch {url}: {getattr(exc, 'reason', exc)}",
            hint="check the URL, or save the file and import it from disk",
        ) from None


def _without_gateways(imported: Imported, source: str) -> list[str]:
    """bundlectl's own gateway entries (an export of this or another project) import nothing:
    the policy they enforce is a bundlectl.yaml's already, and a rule for their tools
    (`bundlectl.*`) would name a server no project has."""
    gone = set(imported.gateways)
    for rules in (imported.allow, imported.ask, imported.deny):
        rules[:] = [r for r in rules if r.split(".", 1)[0] not in gone]
    return [
        f"{source}: {name!r} is bundlectl's own gateway entry (`bundlectl serve --agent "
        f"{agent}`); nothing is imported from it — the policy of agent {agent!r} is in the "
        "bundlectl.yaml it was exported from"
        for name, agent in sorted(imported.gateways.items())
    ]


def _existing_servers(target: Path) -> dict[str, Any]:
    """The servers the target project already resolves to (none when it does not resolve:
    everything is imported as written)."""
    if not target.exists():
        return {}

    try:
        return dict(resolve_project(load_project(target)).merged.servers)
    except BundlectlError:
        return {}


def _drop_known(imported: Imported, existing: dict[str, Any]) -> list[str]:
    """Servers the project already has, as they are (from its bundles, with their declared
    tools), are not added again: the imported rules apply to them."""
    keys = ("command", "args", "env", "cwd", "url", "headers")
    known = []
    for name, spec in list(imported.servers.items()):
        merged = existing.get(name)
        if merged is None:
            continue
        mine = {k: v for k, v in merged.spec.model_dump().items() if k in keys and v}
        theirs = {k: v for k, v in spec.items() if k in keys and v}
        if mine == theirs:
            del imported.servers[name]
            known.append(name)
    return [f"already configured, kept as is: {', '.join(known)}"] if known else []


def _refuse_replacements(
    imported: Imported, existing: dict[str, Any], replace: list[str], shown: str
) -> None:
    """A server of the file named like one the project has, but defined otherwise, would
    replace it for every agent (a hostile `files` entry replaced the built-in files server):
    refused unless `--replace` names it."""
    clashes = [name for name in imported.servers if name in existing and name not in replace]
    if not clashes:
        return
    lines = []
    for name in clashes:
        merged = existing[name]
        owner = f"bundle {merged.bundle}" if merged.bundle else "bundlectl.yaml"
        theirs = imported.servers[name]
        what = theirs.get("command") or theirs.get("url") or "?"
        lines.append(
            f"  {name}: the file runs {what!r}; the project's comes from {owner} "
            f"({merged.spec.command or merged.spec.url!r})"
        )
    raise ReportedFailure(
        f"{shown} defines {len(clashes)} server(s) the project already has, differently; "
        "importing would replace them for every agent:\n" + "\n".join(lines),
        hint="rename them in the file, or pass --replace "
        + " --replace ".join(clashes)
        + " to replace them on purpose",
    )


def _spell_out_unlisted(imported: Imported, existing: dict[str, Any]) -> list[str]:
    """Tools the client asks about because no list names them: named as `ask` rules where the
    project knows the server's catalog (bundlectl's ask beats allow, so a wildcard would not do);
    elsewhere they stay denied, and a note says so."""
    listed = {*imported.allow, *imported.ask, *imported.deny}
    unknown = []
    for server, effect in imported.unlisted.items():
        merged = existing.get(server)
        if server in imported.servers or merged is None or not merged.spec.tools:
            unknown.append(server)
            continue
        if f"{server}.*" in listed:
            continue
        for tool in merged.spec.tools:
            if f"{server}.{tool.name}" not in listed:
                getattr(imported, effect).append(f"{server}.{tool.name}")
    if not unknown:
        return []
    return [
        f"the client asks about tools of {', '.join(sorted(unknown))} that no list names; "
        "without a declared catalog they are denied here: add ask rules for the ones a person "
        "may confirm"
    ]


def _config_path(config: Path | None) -> Path:
    if config is not None:
        return config
    try:
        return find_project(None)
    except UsageError:
        return Path.cwd() / "bundlectl.yaml"


def merge(text: str, imported: Imported, agent: str, bundles: list[str]) -> str:
    """`text` (a bundlectl.yaml) with the imported servers, agents and bundles added; existing
    entries of the same name are replaced, every other byte — comments included — kept (the
    same text surgery as `install`)."""
    listed = {requirement_name(r) for r in (_data(text).get("bundles") or [])}
    new = edit_bundles(text, add=[b for b in _unique(bundles) if requirement_name(b) not in listed])
    new = set_entries(new, "servers", imported.servers)
    if imported.agents is not None:
        agents = {
            name: {k: v for k, v in rules.items() if v} for name, rules in imported.agents.items()
        }
    else:
        rules = {
            "allow": _unique(imported.allow),
            "ask": _unique(imported.ask),
            "deny": _unique(imported.deny),
        }
        agents = {agent: {k: v for k, v in rules.items() if v}}
    new = set_entries(new, "agents", agents)
    if imported.default_allow:  # agix: unlisted agents get every tool, spelled out
        new = set_entries(new, "policy", {"default": "allow"})
    return new


def _data(text: str) -> dict[str, Any]:
    data = parse_yaml(text, "bundlectl.yaml").data
    return data if isinstance(data, dict) else {}


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))
