"""What the JSON clients share: an object of server entries (`mcpServers`, or VS Code's
`servers`), each `{command, args, env}` or `{url, headers}`, edited in place (`jsonc`)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bundlectl.clients import jsonc
from bundlectl.clients.base import (
    GATEWAY_ENTRY,
    Client,
    Export,
    Imported,
    Misfit,
    ServerPlan,
    gateway_agent,
    gateway_spec,
    references,
    rewrite_refs,
    rule_label,
)
from bundlectl.config.secretscan import SECRET_NAME, secret_kind

RefStyle = Callable[[str, str | None], str]
# How a client writes a remote server: (transport) → the keys of the entry.
Remote = Callable[[str, str, dict[str, str]], dict[str, Any]]


def plain_ref(var: str, default: str | None) -> str:
    return f"${{{var}:-{default}}}" if default is not None else f"${{{var}}}"


def env_ref(var: str, default: str | None) -> str:
    return f"${{env:{var}}}"


@dataclass
class Style:
    """The parts of a JSON client's format that differ between clients."""

    key: str = "mcpServers"
    ref: RefStyle = plain_ref
    defaults: bool = True  # `${VAR:-x}` understood
    expands: bool = True  # references are expanded at all (Claude Desktop: no)
    stdio_type: str | None = None  # VS Code writes "type": "stdio"
    remote: Remote | None = None
    # What a client needs added to the gateway entry (Gemini: the environment, trust).
    gateway: Callable[[dict[str, Any], Export], dict[str, Any]] | None = None
    # An entry of the shared shape in the client's own (Kilo: `{type: local, command: [...]}`).
    shape: Callable[[dict[str, Any]], dict[str, Any]] | None = None


def default_remote(transport: str, url: str, headers: dict[str, str]) -> dict[str, Any]:
    entry: dict[str, Any] = {"type": "http" if transport == "streamable-http" else "sse"}
    entry["url"] = url
    if headers:
        entry["headers"] = headers
    return entry


def entry(plan: ServerPlan, style: Style, misfits: list[Misfit]) -> dict[str, Any]:
    """One server as the client writes it, references in its syntax (never a value)."""
    spec = plan.spec

    def ref(text: str, where: str) -> str:
        found = references(text)
        if found and not style.expands:
            misfits.append(
                Misfit(
                    f"servers.{plan.name}.{where}",
                    "this client does not expand ${VAR} references, and a value is never "
                    "written into its file",
                )
            )
        if any(default is not None for _, default in found) and not style.defaults:
            misfits.append(
                Misfit(
                    f"servers.{plan.name}.{where}",
                    "this client has no ${VAR:-default} syntax",
                )
            )
        return rewrite_refs(text, style.ref)

    if spec.transport == "stdio":
        out: dict[str, Any] = {}
        if style.stdio_type:
            out["type"] = style.stdio_type
        out["command"] = ref(spec.command or "", "command")
        if spec.args:
            out["args"] = [ref(a, f"args[{i}]") for i, a in enumerate(spec.args)]
        if spec.env:
            out["env"] = {k: ref(v, f"env.{k}") for k, v in spec.env.items()}
        if spec.cwd:
            out["cwd"] = ref(spec.cwd, "cwd")
        return out
    headers = {k: ref(v, f"headers.{k}") for k, v in spec.headers.items()}
    remote = style.remote or default_remote
    return remote(spec.transport, ref(spec.url or "", "url"), headers)


def write_servers(
    text: str,
    export: Export,
    managed: set[str],
    file: str,
    *,
    style: Style,
    filters: Callable[[ServerPlan, dict[str, Any], list[Misfit]], None] | None,
    gateway: bool,
) -> tuple[str, list[Misfit]]:
    """Merge the agent's servers (or the one gateway entry) into the file's server object;
    entries of servers bundlectl manages that the agent no longer gets are removed."""
    misfits: list[Misfit] = []
    wanted: dict[str, dict[str, Any]] = {}
    if gateway:
        wanted[GATEWAY_ENTRY] = gateway_spec(export, absolute=False)
        if style.stdio_type:
            wanted[GATEWAY_ENTRY] = {"type": style.stdio_type, **wanted[GATEWAY_ENTRY]}
        if style.gateway is not None:
            wanted[GATEWAY_ENTRY] = style.gateway(wanted[GATEWAY_ENTRY], export)
        if style.shape is not None:
            wanted[GATEWAY_ENTRY] = style.shape(wanted[GATEWAY_ENTRY])
    else:
        for plan in export.servers:
            item = entry(plan, style, misfits)
            if filters is not None:
                filters(plan, item, misfits)
            elif not whole_allowed(plan):
                misfits.extend(
                    Misfit(label, "this client has no per-tool filter in its file")
                    for label in partial_rules(plan)
                )
            wanted[plan.name] = style.shape(item) if style.shape is not None else item
    existing = jsonc.parse(text, file).value.get(style.key) if text.strip() else None
    present = set(existing) if isinstance(existing, dict) else set()
    for name in sorted(present & (managed | {GATEWAY_ENTRY}) - set(wanted)):
        text = jsonc.remove_member(text, [style.key, name], file)
    for name, item in wanted.items():
        current = existing.get(name) if isinstance(existing, dict) else None
        merged = kept_settings(current, item)
        if merged != current:
            text = jsonc.set_member(text, [style.key, name], merged, file)
    return text, misfits


# The keys of a server entry bundlectl writes, in one client or another; any other key of an
# entry it manages (Gemini's `timeout`, a `description`) is the user's and is kept.
OWNED = frozenset(
    {
        "type",
        "command",
        "args",
        "env",
        "environment",
        "cwd",
        "url",
        "httpUrl",
        "serverUrl",
        "headers",
        "includeTools",
        "excludeTools",
        "tools",
        "trust",
        "alwaysAllow",
        "disabledTools",
        "disabled",
        "enabled",
    }
)


def kept_settings(current: Any, item: dict[str, Any]) -> dict[str, Any]:
    """`item` in place of the keys bundlectl owns in the entry `current`, the user's keys kept
    where they were."""
    if not isinstance(current, dict):
        return item
    merged: dict[str, Any] = {}
    for key, value in current.items():
        if key not in OWNED:
            merged[key] = value
        elif key in item:
            merged[key] = item[key]
    merged.update({k: v for k, v in item.items() if k not in merged})
    return merged


def whole_allowed(plan: ServerPlan) -> bool:
    """Every tool of the server allowed, declared or not."""
    if plan.whole is not None:
        return plan.whole == "allow"
    if plan.stale_risk:  # a tool beyond the catalog could be one the policy denies
        return False
    return bool(plan.decisions) and all(d.effect == "allow" for d in plan.decisions)


NO_CATALOG = "`export --live` asks the server for its tools"  # why of `partial_rules`' first


def partial_rules(plan: ServerPlan) -> list[str]:
    """What makes a server only partly usable, as labels for misfits."""
    if not plan.exact_catalog:
        return [f"{plan.name}.*: the server declares no tool catalog to expand the rules over"]
    labels = [rule_label(d) for d in plan.decisions if d.effect != "allow"]
    return [*labels, plan.stale_rule()] if plan.stale_risk else labels


def read_servers(data: dict[str, Any], key: str, file: str) -> Imported:
    """Server entries of a JSON client file as bundlectl servers; literal secrets become
    `${NAME}` references (listed in `secrets`)."""
    imported = Imported()
    servers = data.get(key) or {}
    if not isinstance(servers, dict):
        return imported
    for name, raw in servers.items():
        served = gateway_agent(raw)
        if served is not None:
            imported.gateways[name] = served
        if not isinstance(raw, dict) or name == GATEWAY_ENTRY or served is not None:
            continue
        spec: dict[str, Any] = {}
        url = raw.get("url") or raw.get("httpUrl") or raw.get("serverUrl")
        if url:
            kind = raw.get("type", "")
            spec["transport"] = "sse" if kind == "sse" or "/sse" in url else "streamable-http"
            spec["url"] = secret_url(url, imported, name)
            headers = raw.get("headers") or {}
            if headers:
                spec["headers"] = {
                    k: literal_secret(k, str(v), imported, name) for k, v in headers.items()
                }
        else:
            spec["command"] = _from_client(str(raw.get("command", "")), imported, name, "command")
            if raw.get("args"):
                spec["args"] = secret_args([str(a) for a in raw["args"]], imported, name)
            env = raw.get("env") or {}
            if env:
                spec["env"] = {k: literal_secret(k, str(v), imported, name) for k, v in env.items()}
            if raw.get("cwd"):
                spec["cwd"] = str(raw["cwd"])
        if raw.get("disabled") is True:
            spec["disabled"] = True
        imported.servers[name] = spec
    return imported


_CLIENT_REF = re.compile(
    r"\$\{(?:env:|input:)?([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)"
)


def _from_client(text: str, imported: Imported, server: str, where: str) -> str:
    """A client's `${env:X}`, `${X}` or `$X` as bundlectl's `${X}`."""
    return _CLIENT_REF.sub(lambda m: f"${{{m.group(1) or m.group(2)}}}", text)


def literal_secret(key: str, value: str, imported: Imported, server: str) -> str:
    """A value that is a literal secret becomes a reference named after its key."""
    converted = _from_client(value, imported, server, key)
    if "${" in converted:
        return converted

    if secret_kind(key, value) or (SECRET_NAME.search(key) and len(value) >= 8):
        name = re.sub(r"[^A-Z0-9_]", "_", key.upper()) or "SECRET"
        imported.secrets[name] = f"servers.{server} ({key})"
        prefix = value[: len("Bearer ")] if value.startswith("Bearer ") else ""
        return f"{prefix}${{{name}}}"
    return converted


def secret_args(args: list[str], imported: Imported, server: str) -> list[str]:
    """A server's command-line arguments with literal secrets as references: a known token
    shape anywhere, or the value of a secret-named flag (`--token ghp_...`,
    `--api-key=sk-...`), named after the flag."""
    out: list[str] = []
    flag = ""
    for arg in args:
        if arg.startswith("-") and "=" in arg:
            key, _, value = arg.partition("=")
            out.append(f"{key}={_secret_value(key, value, imported, server, 'args')}")
        elif arg.startswith("-"):
            out.append(_from_client(arg, imported, server, "args"))
        else:
            out.append(_secret_value(flag, arg, imported, server, "args"))
        flag = arg if arg.startswith("-") and "=" not in arg else ""
    return out


def secret_url(url: str, imported: Imported, server: str) -> str:
    """A server's URL with literal secrets as references: a password in it
    (`https://user:pw@host`) and the values of secret-named or secret-shaped query parameters
    (`?api_key=sk-live-...`)."""
    url = _from_client(url, imported, server, "url")
    base, mark, query = url.partition("?")
    query, hash_mark, fragment = query.partition("#")
    scheme, sep, rest = base.partition("://")
    authority, slash, path = rest.partition("/")
    user, at, host = authority.rpartition("@")
    if at and ":" in user and "${" not in user:
        name, _, _password = user.partition(":")
        var = _variable(f"{server}_password", imported, server, "url")
        base = f"{scheme}{sep}{name}:${{{var}}}@{host}{slash}{path}"
    if not mark:
        return base
    params = []
    for param in query.split("&"):
        key, equals, value = param.partition("=")
        if equals and _query_secret(key, value):
            value = f"${{{_variable(key, imported, server, 'url')}}}"
        params.append(f"{key}{equals}{value}")
    return f"{base}?{'&'.join(params)}{hash_mark}{fragment}"


_QUERY_KEYS = re.compile(r"^(key|apikey|sig|signature|code|access_token|client_secret)$", re.I)


def _query_secret(key: str, value: str) -> bool:
    if "${" in value or not value:
        return False
    return bool(
        secret_kind(key, value)
        or ((SECRET_NAME.search(key) or _QUERY_KEYS.match(key)) and len(value) >= 8)
    )


def _secret_value(key: str, value: str, imported: Imported, server: str, where: str) -> str:
    """An argument's value (after the flag `key`, if any) as a reference when it is a
    literal secret."""
    converted = _from_client(value, imported, server, where)
    if "${" in converted:
        return converted
    named = bool(key) and bool(SECRET_NAME.search(key)) and len(value) >= 8
    if not (secret_kind(key, value) or named):
        return converted
    return f"${{{_variable(key or f'{server}_secret', imported, server, where)}}}"


def _variable(key: str, imported: Imported, server: str, where: str) -> str:
    """The environment variable a literal secret becomes: named after its key, and recorded
    (with where it was) for the note `import` prints."""
    name = re.sub(r"[^A-Z0-9_]", "_", key.lstrip("-").upper()).strip("_") or "SECRET"
    if name[0].isdigit():
        name = f"_{name}"
    imported.secrets[name] = f"servers.{server} ({where})"
    return name


def home() -> str:
    return os.path.expanduser("~")


def client(
    *,
    name: str,
    title: str,
    project_file: str | None,
    user_file: Callable[[], Any],
    style: Style,
    source: str,
    filters: Callable[[ServerPlan, dict[str, Any], list[Misfit]], None] | None = None,
    read_filter: Callable[[dict[str, Any], Imported], None] | None = None,
) -> Any:
    """A JSON client whose file is one object of server entries (the common case)."""

    def write(
        target: Path,
        current: Callable[[Path], str],
        export: Export,
        managed: set[str],
        gateway: bool,
    ) -> tuple[dict[Path, str], list[Misfit]]:
        text, misfits = write_servers(
            current(target),
            export,
            managed,
            str(target),
            style=style,
            filters=filters,
            gateway=gateway,
        )
        return {target: text}, misfits

    def read(text: str, file: str) -> Imported:
        data = jsonc.parse(text, file).value
        imported = read_servers(data, style.key, file)
        if read_filter is not None:
            read_filter(data.get(style.key) or {}, imported)
        return imported

    return Client(name, title, project_file, user_file, write, read, source)
