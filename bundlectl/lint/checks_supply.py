"""4xx: supply chain — packages run by npx, uvx, pipx and docker are pinned."""

from __future__ import annotations

import re
from collections.abc import Iterator

from bundlectl.config import paths
from bundlectl.config.hosts import whole_domain
from bundlectl.config.launchcheck import (
    LAUNCHER_OPTIONS,
    docker_run,
    loads_code,
    options_taking_code,
)
from bundlectl.config.requirements import requirement_name
from bundlectl.lint.context import Context, at
from bundlectl.lint.rules import Finding

_NPM_PINNED = re.compile(r"^(@[^/@\s]+/)?[^@\s]+@\d+\.\d+\.\d+([-+][\w.-]+)?$")
_PY_PINNED = re.compile(r"^[A-Za-z0-9._\[\],-]+(==|@)\d[\w.!+-]*$")
_IMAGE_PINNED = re.compile(r"(@sha256:[0-9a-f]{64}$)|(:(?!latest$)[\w][\w.-]*$)")


def _package_index(command: str, args: list[str]) -> tuple[int, str] | None:
    """The index of the package argument, and what kind of package it is."""
    positional = [(i, a) for i, a in enumerate(args) if not a.startswith("-")]
    base = command.rsplit("/", 1)[-1]
    if base == "npx" and positional:
        return positional[0][0], "npm"
    if base in ("uvx", "uv") and positional:
        index = positional[0][0]
        if base == "uv":  # uv tool run PKG
            rest = [p for p in positional if p[1] not in ("tool", "run")]
            if not rest:
                return None
            index = rest[0][0]
        return index, "python"
    if base == "pipx" and len(positional) >= 2 and positional[0][1] == "run":
        return positional[1][0], "python"
    if base in ("docker", "podman") and positional and positional[0][1] == "run":
        image, _ = docker_run(args)  # options read by their arity (`--pid host IMAGE`)
        return (image, "image") if image is not None else None
    return None


def unpinned(ctx: Context) -> Iterator[Finding]:
    """BCL401."""
    for doc, name, spec in ctx.servers():
        if spec.transport != "stdio" or not spec.command:
            continue
        found = _package_index(spec.command, spec.args)
        if found is None or found[0] >= len(spec.args):
            continue
        index, kind = found
        package = spec.args[index]
        pinned = {"npm": _NPM_PINNED, "python": _PY_PINNED, "image": _IMAGE_PINNED}[kind]
        if not pinned.search(package):
            yield at(
                "BCL401",
                doc,
                ("servers", name, "args", index),
                f"{spec.command} runs {package!r} without an exact version",
                anchor=f"{name}:{package}",
            )


def shadowed_builtins(ctx: Context) -> Iterator[Finding]:
    """BCL402, at the requirement of a bundle that a registry of the project or the user's
    serves under a built-in bundle's name."""
    config, model = ctx.config, ctx.config_model
    if ctx.resolution is None or config is None or model is None:
        return
    builtin = paths.builtin_registry_dir()
    for loaded in ctx.resolution.merged.bundles:
        name = loaded.manifest.name
        if loaded.source.label == "builtin" or not (builtin / name).is_dir():
            continue
        yield at(
            "BCL402",
            config.doc,
            _requirement_at(model.bundles, name),
            f"bundle {name!r} comes from registry {loaded.source.label}, which hides the "
            f"built-in bundle {name!r}",
            anchor=name,
        )


def _requirement_at(requirements: list[str], name: str) -> tuple[str | int, ...]:
    """Where the project requires bundle `name` (`bundles[i]`; `bundles` when only the user's
    file or another bundle does)."""
    index = next((i for i, r in enumerate(requirements) if requirement_name(r) == name), None)
    return ("bundles", index) if index is not None else ("bundles",)


def replaced_bundle_servers(ctx: Context) -> Iterator[Finding]:
    """BCL403, at the key of a project server that replaces a bundle's server."""
    config, model = ctx.config, ctx.config_model
    if ctx.resolution is None or config is None or model is None:
        return
    provided = {
        server: f"{loaded.manifest.name}@{loaded.manifest.version}"
        for loaded in ctx.resolution.merged.bundles
        for server in loaded.manifest.servers
    }
    for name in model.servers:
        if name in provided:
            yield at(
                "BCL403",
                config.doc,
                ("servers", name),
                f"server {name!r} replaces the server of that name from bundle {provided[name]}",
                key=True,
                anchor=name,
            )


def launcher_options(ctx: Context) -> Iterator[Finding]:
    """BCL404, at an npx or uvx option that runs a command or takes code from elsewhere (read
    by `launchcheck.options_taking_code`, as the launcher reads its command line)."""
    for doc, name, spec in ctx.servers():
        if spec.transport != "stdio" or not spec.command:
            continue
        base = spec.command.rsplit("/", 1)[-1]
        if base not in LAUNCHER_OPTIONS:
            continue
        for index, option in options_taking_code(base, spec.args):
            yield at(
                "BCL404",
                doc,
                ("servers", name, "args", index),
                f"{base} option {option} makes it run a command or take code from elsewhere",
                anchor=f"{name}:{option}",
            )


def code_loading_env(ctx: Context) -> Iterator[Finding]:
    """BCL405, at a server's variable that makes it load other code (LD_PRELOAD,
    NODE_OPTIONS, PYTHONPATH, ...)."""
    for doc, name, spec in ctx.servers():
        for variable, value in spec.env.items():
            if loads_code(variable, value):
                yield at(
                    "BCL405",
                    doc,
                    ("servers", name, "env", variable),
                    f"server {name!r} sets {variable}, which makes it load other code",
                    key=True,
                    anchor=f"{name}:{variable}",
                )


def container_widening(ctx: Context) -> Iterator[Finding]:
    """BCL406, at a `docker run` option that widens what the container reaches."""
    for doc, name, spec in ctx.servers():
        if spec.transport != "stdio" or not spec.command:
            continue
        if spec.command.rsplit("/", 1)[-1] not in ("docker", "podman"):
            continue
        _, widening = docker_run(spec.args)
        for found in widening:
            yield at(
                "BCL406",
                doc,
                ("servers", name, "args", found.index),
                f"server {name!r}: {found.why}",
                anchor=f"{name}:{spec.args[found.index]}",
            )


def sandbox_write_unneeded(ctx: Context) -> Iterator[Finding]:
    """BCL408, at a `sandbox.write` entry outside every folder the policy's rules need."""
    resolution = ctx.resolution
    if resolution is None:
        return
    from bundlectl.resolve.sandboxing import writes_needed  # noqa: PLC0415

    for doc, name, spec in ctx.servers():
        sandbox = spec.sandbox
        if spec.transport != "stdio" or sandbox is None or not sandbox.write:
            continue
        needed = writes_needed(resolution, name)
        if needed is None or "." in needed:
            continue
        for index, entry in enumerate(sandbox.write):
            folder = entry.strip("/") or "."
            if any(folder == n or folder.startswith(n + "/") for n in needed):
                continue
            where = ", ".join(needed) if needed else "nowhere"
            yield at(
                "BCL408",
                doc,
                ("servers", name, "sandbox", "write", index),
                f"server {name!r} may write in {entry!r}, but the rules of its agents let "
                f"its calls write {where}",
                anchor=f"{name}:write:{entry}",
            )


def sandbox_widened(ctx: Context) -> Iterator[Finding]:
    """BCL407, at a server's `sandbox:` entry that gives it the network or no sandbox."""
    for doc, name, spec in ctx.servers():
        sandbox = spec.sandbox
        if spec.transport != "stdio" or sandbox is None:
            continue
        if sandbox.off:
            yield at(
                "BCL407",
                doc,
                ("servers", name, "sandbox", "off"),
                f"server {name!r} runs unsandboxed ({sandbox.reason}): it can reach whatever "
                "the user can",
                anchor=f"{name}:off",
            )
        elif sandbox.network == "host":
            yield at(
                "BCL407",
                doc,
                ("servers", name, "sandbox", "network"),
                f"server {name!r} reaches the machine's network from its sandbox: every host, "
                "unfiltered",
                anchor=f"{name}:network",
            )
        elif isinstance(sandbox.network, list):
            for index, host in enumerate(sandbox.network):
                domain = whole_domain(host)
                if domain is not None:
                    yield at(
                        "BCL407",
                        doc,
                        ("servers", name, "sandbox", "network", index),
                        f"server {name!r} may reach every host under .{domain} from its "
                        f"sandbox ({host!r}): name the hosts it needs",
                        anchor=f"{name}:network:{host}",
                    )


def sandbox_declared_later(ctx: Context) -> Iterator[Finding]:
    """BCL409, at the requirement of a bundle whose servers run in the sandbox as the chosen
    version leaves them — no network, none of the home — while a newer version of the bundle
    declares what they need (versions published before servers ran sandboxed by default)."""
    config, model = ctx.config, ctx.config_model
    resolution = ctx.resolution
    if resolution is None or config is None or model is None:
        return
    if model.policy.sandbox_mode == "off":
        return
    from packaging.version import Version  # noqa: PLC0415 - packaging is light; lint only

    from bundlectl.servers import builtin_of  # noqa: PLC0415 - cheap; keeps lint's start light

    registry = resolution.project.registry
    for loaded in resolution.merged.bundles:
        manifest = loaded.manifest
        bare = [
            name
            for name, spec in manifest.servers.items()
            if spec.transport == "stdio" and spec.sandbox is None and builtin_of(spec) is None
        ]
        if not bare:
            continue
        chosen = Version(manifest.version)
        for version in reversed(registry.versions(manifest.name)):
            if version <= chosen:
                break
            later = registry.get(manifest.name, version).manifest.servers
            declared = [n for n in bare if n in later and later[n].sandbox is not None]
            if not declared:
                continue
            yield at(
                "BCL409",
                config.doc,
                _requirement_at(model.bundles, manifest.name),
                f"{manifest.name} {manifest.version} declares nothing its server(s) "
                f"{', '.join(declared)} need in the sandbox (no network, none of the home); "
                f"{manifest.name} {version} does",
                anchor=f"{manifest.name}:{version}",
            )
            break
