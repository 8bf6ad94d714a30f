"""`bundlectl show NAME[SPEC]`: one bundle in detail."""

from __future__ import annotations

from pathlib import Path

from bundlectl.cli.describe import endpoint, first_line, tool_flags
from bundlectl.cli.options import Format
from bundlectl.config.project import optional_project
from bundlectl.config.registry import LoadedManifest, Registry
from bundlectl.config.requirements import parse_requirement
from bundlectl.errors import UsageError
from bundlectl.mcpio.launchers import needs
from bundlectl.mcpio.sandbox import profile_for
from bundlectl.output import JSON_FORMAT_VERSION, emit_json, out, visible
from bundlectl.resolve.versions import constraint, resolve


def run(config: Path | None, requirement: str, *, fmt: Format) -> int:
    try:
        parse_requirement(requirement)
    except ValueError as exc:
        raise UsageError(str(exc), hint="write NAME or NAME<spec>, e.g. 'github>=1,<2'") from None
    project = optional_project(config)
    registry = project.registry if project else Registry.default()
    wanted = constraint(requirement, "the command line")
    registry.require_names([wanted.name])  # a typo: a usage error, as install says it
    # The resolver gives the same "no bundle named … did you mean" and conflict messages as install.
    chosen = resolve([wanted], registry)[wanted.name]
    loaded = registry.get(wanted.name, chosen)
    versions = [str(v) for v in registry.versions(wanted.name)]
    if fmt is Format.json:
        emit_json(_as_json(loaded, versions))
    else:
        _print(loaded, versions)
    return 0


def _as_json(loaded: LoadedManifest, versions: list[str]) -> dict[str, object]:
    data = loaded.manifest.model_dump(mode="json")
    return {
        "format_version": JSON_FORMAT_VERSION,
        "source": loaded.source.label,
        "versions": versions,
        "digest": loaded.digest,
        "bundle": data,
    }


def _print(loaded: LoadedManifest, versions: list[str]) -> None:
    m = loaded.manifest
    _shown(f"{m.name} {m.version} ({loaded.source.label}): {m.description}")
    _shown(f"versions: {', '.join(versions)}")
    _shown(f"requires: {', '.join(m.requires) if m.requires else '-'}")
    if m.env:
        _shown("inputs:")
        for key, wanted in m.env.items():
            marks = [
                w for w, on in (("required", wanted.required), ("secret", wanted.secret)) if on
            ]
            default = f" (default {wanted.default})" if wanted.default is not None else ""
            _shown(f"  {key}  {', '.join(marks) or 'optional'}{default}  {wanted.description}")
    _shown("servers:")
    for name, spec in m.servers.items():
        _shown(f"  {name}  {endpoint(spec)}")
        if spec.description:
            _shown(f"    {spec.description}")
        _shown(f"    needs: {needs(spec)}")
        for key, values in (("env", spec.env), ("headers", spec.headers)):
            if values:
                _shown(f"    {key}: " + ", ".join(f"{k}={v}" for k, v in values.items()))
        _shown(f"    timeout: {spec.timeout}s")
        boxed = profile_for(name, spec, Path("."), "on")  # as it runs by default (#55)
        if boxed is not None:
            drawn = "" if boxed.container else " (and where a project's rules bound its writes)"
            _shown(f"    sandbox: {boxed.described()}{drawn}")
        _shown(f"    tools ({len(spec.tools)}):")
        width = max((len(t.name) for t in spec.tools), default=0)
        for tool in spec.tools:
            line = f"      {tool.name.ljust(width)}  {first_line(tool.description)}"
            flags = tool_flags(tool)
            _shown(f"{line}  {flags}".rstrip() if flags else line.rstrip())
    if m.agents:
        _shown("agent defaults:")
        for name, rules in m.agents.items():
            parts = [
                f"{effect}: {', '.join(getattr(rules, effect))}"
                for effect in ("allow", "ask", "deny")
                if getattr(rules, effect)
            ]
            if rules.extends:
                parts.insert(0, f"extends: {', '.join(rules.extends)}")
            _shown(f"  {name}  {'; '.join(parts) or 'no rules'}")


def _shown(line: str) -> None:
    """A line of what a registry wrote (descriptions, names, values), shown by `visible`."""
    out(visible(line))
