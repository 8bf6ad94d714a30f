"""3xx: secrets and environment — no literal secrets in files, required inputs present."""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from collections.abc import Iterator

from bundlectl.expand import references
from bundlectl.lint.context import Context, at
from bundlectl.lint.rules import Finding
from bundlectl.models import ServerSpec
from bundlectl.requirements import requirement_name

_TOKENS = [
    ("a GitHub token", re.compile(r"\b(gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,})")),
    ("an AWS access key", re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("a Slack token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    ("an OpenAI-style API key", re.compile(r"\bsk-(proj-|ant-)?[A-Za-z0-9_-]{20,}")),
    ("a Google API key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b")),
    ("a private key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")),
    ("a password in a URL", re.compile(r"[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@", re.I)),
]
SECRET_NAME = re.compile(r"(secret|token|passw|pwd|api[_-]?key|auth|credential|private)", re.I)


def _entropy(text: str) -> float:
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def _secret_kind(key: str, value: str) -> str | None:
    """What kind of literal secret `value` is, if any. References (${VAR}) are never secrets."""
    literal = re.sub(r"\$\{[^}]*\}", "", value)
    for kind, pattern in _TOKENS:
        if pattern.search(literal):
            return kind
    candidate = literal.removeprefix("Bearer ").removeprefix("Basic ").strip()
    if (
        SECRET_NAME.search(key)
        and len(candidate) >= 16
        and " " not in candidate
        and _entropy(candidate) >= 3.5
    ):
        return "a high-entropy value in a secret-named key"
    return None


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
            kind = _secret_kind(key, value)
            if kind:
                yield at(
                    "BCL301",
                    doc,
                    ("servers", name, *path),
                    f"{kind} is written in the file (servers.{name}); use a ${{VAR}} reference",
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
                f"a literal bearer token is written in the file (agents.{name}.token); "
                "use a ${VAR} reference",
                anchor=f"{name}:token",
            )


def missing_env(ctx: Context) -> Iterator[Finding]:
    """BCL302: a resolved bundle's required input that is neither set nor defaulted."""
    if ctx.resolution is None or ctx.config is None or ctx.config_model is None:
        return
    listed = {requirement_name(r): i for i, r in enumerate(ctx.config_model.bundles)}
    used: set[str] = set()
    for server in ctx.resolution.merged.servers.values():
        for value in [
            *server.spec.env.values(),
            *server.spec.args,
            *server.spec.headers.values(),
            server.spec.url or "",
        ]:
            used.update(references(value))
    for need in ctx.resolution.merged.env:
        if not need.spec.required or need.spec.default is not None or need.name in os.environ:
            continue
        bundle = need.bundle.split("@")[0]
        path: tuple[str | int, ...] = (
            ("bundles", listed[bundle]) if bundle in listed else ("bundles",)
        )
        where = "used by its servers" if need.name in used else "declared"
        yield at(
            "BCL302",
            ctx.config.doc,
            path,
            f"bundle {need.bundle} needs {need.name} "
            f"({where}: {need.spec.description or 'no description'}), which is not set",
            anchor=f"{bundle}:{need.name}",
            hint=f"export {need.name}=... before starting the servers",
        )
