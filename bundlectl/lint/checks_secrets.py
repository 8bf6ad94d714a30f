"""3xx: secrets and environment — no literal secrets in files, required inputs present."""

from __future__ import annotations

import os
from collections.abc import Iterator

from bundlectl.config.expand import references
from bundlectl.config.models import ServerSpec
from bundlectl.config.requirements import requirement_name
from bundlectl.config.secretscan import secret_kind
from bundlectl.lint.context import Context, at
from bundlectl.lint.rules import Finding


def _server_values(spec: ServerSpec) -> Iterator[tuple[tuple[str | int, ...], str, str]]:
    for key, value in spec.env.items():
        yield ("env", key), key, value
    for index, value in enumerate(spec.args):
        # Only an option names the value that follows it (--token VALUE, --token=VALUE).
        previous = spec.args[index - 1] if index else ""
        option, eq, rest = value.partition("=")
        if value.startswith("-") and eq:
            yield ("args", index), option, rest
        else:
            yield ("args", index), previous if previous.startswith("-") else "", value
    for key, value in spec.headers.items():
        yield ("headers", key), key, value
    if spec.url:
        yield ("url",), "url", spec.url


def plaintext_secrets(ctx: Context) -> Iterator[Finding]:
    """BCL301. The message never repeats the secret."""
    for doc, name, spec in ctx.servers():
        for path, key, value in _server_values(spec):
            kind = secret_kind(key, value)
            if kind:
                yield at(
                    "BCL301",
                    doc,
                    ("servers", name, *path),
                    f"{kind} is written in the file; use a ${{VAR}} reference",
                    anchor=f"{name}:{'.'.join(map(str, path))}",
                )


def literal_tokens(ctx: Context) -> Iterator[Finding]:
    """BCL301 for `agents.NAME.token`: a bearer token is a secret however it looks."""
    config, model = ctx.config, ctx.config_model
    if config is None or model is None:
        return
    for name, rules in model.agents.items():
        if rules.token is not None and not references(rules.token):
            yield at(
                "BCL301",
                config.doc,
                ("agents", name, "token"),
                "a literal bearer token is written in the file; use a ${VAR} reference",
                anchor=f"{name}:token",
            )


def missing_env(ctx: Context) -> Iterator[Finding]:
    """BCL302 (`lint --env` only: it reads this machine's environment): a resolved bundle's
    required input that is neither set nor defaulted."""
    if not ctx.environment:
        return
    if ctx.resolution is None or ctx.config is None or ctx.config_model is None:
        return
    listed = {requirement_name(r): i for i, r in enumerate(ctx.config_model.bundles)}
    used: dict[str, list[str]] = {}  # variable -> the servers that use it
    for name, server in ctx.resolution.merged.servers.items():
        for value in [
            *server.spec.env.values(),
            *server.spec.args,
            *server.spec.headers.values(),
            server.spec.url or "",
        ]:
            for variable in references(value):
                if name not in used.setdefault(variable, []):
                    used[variable].append(name)
    for need in ctx.resolution.merged.env:
        if not need.spec.required or need.spec.default is not None or need.name in os.environ:
            continue
        bundle = need.bundle.split("@")[0]
        path: tuple[str | int, ...] = (
            ("bundles", listed[bundle]) if bundle in listed else ("bundles",)
        )
        servers = used.get(need.name)
        where = f" for server {', '.join(servers)}" if servers else ""
        what = f" ({need.spec.description})" if need.spec.description else ""
        yield at(
            "BCL302",
            ctx.config.doc,
            path,
            f"bundle {need.bundle} needs {need.name}{what}{where}, which is not set in this "
            "environment",
            anchor=f"{bundle}:{need.name}",
            hint=f"export {need.name}=... before starting the servers",
        )
