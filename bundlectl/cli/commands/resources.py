"""`bundlectl read` and `bundlectl prompt`: a server's resources and prompts from the command line,
under the policy `serve` applies to them — an agent reads the resources and gets the prompts of
the servers it may use (a tool it may call or be asked about), and each read or get is audited.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

from bundlectl.calls.audit import AuditLog
from bundlectl.calls.pipeline import Pipeline
from bundlectl.calls.render import OutputDir, render_text
from bundlectl.cli.options import Format
from bundlectl.config.project import load_project
from bundlectl.errors import (
    BundlectlError,
    CallTimeout,
    PolicyDenied,
    ServerError,
    ToolCallError,
    UsageError,
)
from bundlectl.mcpio import runner
from bundlectl.mcpio.connect import connect
from bundlectl.mcpio.session import SdkSession, ServerSession, ToolResult
from bundlectl.output import (
    JSON_FORMAT_VERSION,
    emit_json,
    err,
    out,
    terminal_safe,
    visible,
)
from bundlectl.policy.rules import default_agent
from bundlectl.resolve.resolved import resolve_project

# What servers answer for a name or URI they do not have (MCP's resource-not-found, and the
# invalid-params most servers use for both).
_NOT_FOUND = (-32002, -32602)


def run_read(
    config: Path | None,
    *,
    server: str,
    uri: str,
    agent: str | None,
    fmt: Format,
    output_dir: Path | None,
    timeout: float,
) -> int:
    """Read one resource of `server`; text printed, binary contents saved as files."""

    async def read(session: ServerSession) -> dict[str, Any]:
        return _json(await session.read(uri))

    who, data = _ask(
        config,
        server,
        agent,
        method="resources/read",
        key={"uri": uri},
        request=read,
        timeout=timeout,
    )
    if fmt is Format.json:
        _emit(who, server, {"uri": uri, "result": data})
        return 0
    saved = OutputDir(output_dir)
    for item in data.get("contents") or []:
        if "text" in item:
            out(terminal_safe(str(item["text"])))  # the resource, as it is (a pipe, a file)
        elif "blob" in item:
            blob = base64.b64decode(item["blob"])
            path = saved.save(blob, item.get("mimeType"), "resource")
            out(f"[resource: {path} ({item.get('mimeType') or 'binary'}, {len(blob):,} bytes)]")
    return 0


def run_prompt(
    config: Path | None,
    *,
    server: str,
    name: str,
    arguments: list[str],
    agent: str | None,
    fmt: Format,
    output_dir: Path | None,
    timeout: float,
) -> int:
    """Get one prompt of `server`, filled in with KEY=VALUE arguments; its messages printed."""
    values: dict[str, str] = {}
    for item in arguments:
        field, sep, value = item.partition("=")
        if not sep or not field:
            raise UsageError(
                f"{item!r} is not KEY=VALUE", hint="prompt arguments are strings: name=value"
            )
        values[field] = value

    async def get(session: ServerSession) -> dict[str, Any]:
        listed = {p.name: p for p in await session.prompts()}
        declared = listed.get(name)
        if declared is not None:  # its declared arguments say what is missing (MCP's error
            # for a missing one reads as "no such prompt" from many servers)
            wanted = [a.name for a in declared.arguments or [] if a.required]
            missing = [a for a in wanted if a not in values]
            if missing:
                raise UsageError(
                    f"prompt {name!r} of server {server!r} needs argument(s) {', '.join(missing)}",
                    hint=f"bundlectl prompt {server} {name} "
                    + " ".join(f"{a}=..." for a in wanted),
                )
        return _json(await session.prompt(name, values or None))

    who, data = _ask(
        config,
        server,
        agent,
        method="prompts/get",
        key={"name": name, "arguments": values},
        request=get,
        timeout=timeout,
    )
    if fmt is Format.json:
        _emit(who, server, {"prompt": name, "result": data})
        return 0
    saved = OutputDir(output_dir)
    if data.get("description"):
        out(f"# {visible(str(data['description']))}")
    for message in data.get("messages") or []:
        # a message's content is one content block: shown as exec shows a result's blocks
        block = ToolResult({"content": [message.get("content") or {}]})
        shown = "\n".join(render_text(block, saved, "prompt"))
        out(f"{visible(str(message.get('role', '?')))}: {terminal_safe(shown)}")
    return 0


def _ask(
    config: Path | None,
    server: str,
    agent: str | None,
    *,
    method: str,
    key: dict[str, Any],
    request: Callable[[ServerSession], Awaitable[dict[str, Any]]],
    timeout: float,
) -> tuple[str, dict[str, Any]]:
    """Decide, connect, send `request` (a coroutine function of the session), audit; the agent
    and the answer as MCP JSON. The agent may use the server's resources and prompts when it
    may call or be asked about one of its tools, as `serve` decides."""
    resolution = resolve_project(load_project(config))
    who = default_agent(agent)
    policy = resolution.policy
    if (note := policy.unlisted(who)) is not None and agent is not None:
        err(f"note: {note}")
    pipeline = Pipeline(resolution, AuditLog(resolution, via="exec"), None)
    declared = [tool.name for tool in resolution.server(server).spec.tools]  # usage error: none
    compiled = policy.agent(who)
    refusal = _refusal(who, server, method)
    if not compiled.may_reach(server) or (declared and not compiled.opens(server, declared)):
        pipeline.access(who, server, method, key, "denied")
        raise refusal
    target = pipeline.target(server, agents=[who])
    what = key.get("uri") or key.get("name")

    async def go() -> dict[str, Any]:
        from mcp.shared.exceptions import MCPError  # start-up: only when a server is asked

        try:
            with anyio.fail_after(timeout):
                async with connect(target, connect_timeout=timeout) as client:
                    session = SdkSession(client)
                    if not declared:  # the rule decides on the tools the server has
                        live = [tool.name for tool in await session.tools()]
                        if not compiled.opens(server, live):
                            raise refusal
                    try:
                        return await request(session)
                    except MCPError as exc:  # the server's answer: named here, not as a crash
                        code = exc.error.code
                        if code in _NOT_FOUND:
                            raise ToolCallError(
                                f"server {server!r} has no {_kind(method)} {what!r}: "
                                f"{exc.error.message}",
                                hint=f"`bundlectl {_command(method)} {server}` lists them",
                            ) from None
                        raise ServerError(
                            f"server {server!r} returned an error for {method} {what!r}: "
                            f"{exc.error.message} (code {code})"
                        ) from None
        except TimeoutError:
            raise CallTimeout(
                f"{method} {what!r} on server {server!r} took longer than {timeout:g} s",
                hint="raise --timeout",
            ) from None

    outcome = "ok"
    try:
        result = runner.run(go)
    except BundlectlError as exc:
        outcome = next((o for kind, o in _OUTCOMES if isinstance(exc, kind)), "server-error")
        raise
    finally:
        target.close()
        pipeline.access(who, server, method, key, outcome)
    return who, result


# The audit's outcome of a read or get that failed, by the error (else server-error).
_OUTCOMES: tuple[tuple[type[BundlectlError], str], ...] = (
    (CallTimeout, "timeout"),
    (PolicyDenied, "denied"),
    (ToolCallError, "not-found"),
    (UsageError, "usage-error"),
)


def _refusal(agent: str, server: str, method: str) -> PolicyDenied:
    """Why the agent may not read the server's resources or get its prompts (`opens`)."""
    what = "read the resources" if _kind(method) == "resource" else "get the prompts"
    return PolicyDenied(
        f"agent {agent!r} may not {what} of server {server!r}: that needs one of its tools "
        "allowed outright (not only after a person confirms it, nor only for some arguments)",
        hint=f"bundlectl tools --agent {agent} --server {server} shows what it may call",
    )


def _kind(method: str) -> str:
    return "resource" if method.startswith("resources/") else "prompt"


def _command(method: str) -> str:
    return "read" if method.startswith("resources/") else "prompt"


def run_list(
    config: Path | None, *, server: str, kind: str, agent: str | None, fmt: Format, timeout: float
) -> int:
    """`read SERVER` / `prompt SERVER`: what the server offers (resources and templates, or
    prompts with their arguments), under the same policy and audit as reading one."""
    method = "resources/list" if kind == "resources" else "prompts/list"

    async def listing(session: ServerSession) -> dict[str, Any]:
        if kind == "resources":
            return {
                "resources": [_json(r) for r in await session.resources()],
                "resourceTemplates": [_json(t) for t in await session.templates()],
            }
        return {"prompts": [_json(p) for p in await session.prompts()]}

    who, data = _ask(config, server, agent, method=method, key={}, request=listing, timeout=timeout)
    if fmt is Format.json:
        _emit(who, server, data)
        return 0
    for item in data.get("resources", []):
        mime = f" ({item['mimeType']})" if item.get("mimeType") else ""
        out(visible(f"{item['uri']}{mime}  {item.get('name', '')}".rstrip()))
    for item in data.get("resourceTemplates", []):
        out(visible(f"{item['uriTemplate']}  (template) {item.get('name', '')}".rstrip()))
    for item in data.get("prompts", []):
        names = [
            a["name"] + ("" if a.get("required") else "?") for a in item.get("arguments") or []
        ]
        shown = f"{item['name']} {' '.join(f'{n}=...' for n in names)}".rstrip()
        out(visible(f"{shown}  {item.get('description') or ''}".rstrip()))
    if not any(data.values()):
        err(f"server {server!r} offers no {kind}")
    return 0


def _emit(agent: str, server: str, data: dict[str, Any]) -> None:
    emit_json({"format_version": JSON_FORMAT_VERSION, "agent": agent, "server": server, **data})


def _json(model: Any) -> dict[str, Any]:
    data: dict[str, Any] = model.model_dump(by_alias=True, mode="json", exclude_none=True)
    return data
