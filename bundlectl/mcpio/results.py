"""A server's answer to `tools/call`, checked in one place whichever session received it.

The SDK's client checks an answer before it hands a result over: the JSON-RPC error, the
result's protocol types, and a successful result's structured content against the tool's output
schema. The raw-pipe calls (`plain.call_tool`: `exec`'s SDK-free client and the gateway's calls
over a warm server's pipes) make the same checks here, with the SDK's words.

The protocol's types cost half a second to import and most of a warm call's checking; the common
all-text result they would pass unchanged (`is_plain`) is taken as it came, and only other
results are read by them.
"""

from __future__ import annotations

from typing import Any

from bundlectl.mcpio.connect import broke_protocol, returned_error
from bundlectl.mcpio.requests import TASKS
from bundlectl.mcpio.schemas import checker
from bundlectl.mcpio.session import ToolResult
from bundlectl.mcpio.target import Target

_PLAIN_KEYS = frozenset({"content", "isError", "structuredContent", "resultType", "_meta"})


def needs_tasks(data: object) -> bool:
    """Whether a -32021 error's `data` names the tasks extension: a server that runs the tool
    only as a task refused a request that did not declare it (nothing ran; the SDK's client,
    which declares it, makes the call)."""
    required = data.get("requiredCapabilities") if isinstance(data, dict) else None
    extensions = required.get("extensions") if isinstance(required, dict) else None
    return isinstance(extensions, dict) and TASKS in extensions


def checked(
    target: Target, name: str, answer: dict[str, Any], output_schema: dict[str, Any] | None
) -> ToolResult | None:
    """The call's result from the server's JSON-RPC `answer`, or None when the server asks its
    client first (2026-07-28 `input_required`: the SDK's client runs those rounds). A JSON-RPC
    error, a result the protocol's types refuse, or structured content that fails the tool's
    output schema raises the server's error (`connect`'s words for every transport)."""
    error = answer.get("error")
    if error is not None:
        if not isinstance(error, dict):
            raise broke_protocol(target, "its error is not an object")
        raise returned_error(target, error.get("message", ""), error.get("code"), error.get("data"))
    result = answer.get("result")
    if not isinstance(result, dict):
        raise broke_protocol(target, "the result is not an object")
    if result.get("resultType") == "input_required":
        return None
    checked = ToolResult(result) if is_plain(result) else ToolResult(model=_typed(target, result))
    if output_schema and not checked.is_error:
        problem = structured_problem(result, output_schema, name)
        if problem is not None:
            raise broke_protocol(target, problem)
    return checked


def _typed(target: Target, result: dict[str, Any]) -> Any:
    """The result as the protocol's `CallToolResult`, or the server's protocol error."""
    import mcp_types as types  # half a second: only for results not plain
    from pydantic import ValidationError  # noqa: PLC0415

    try:
        return types.CallToolResult.model_validate(result)
    except ValidationError as exc:
        raise broke_protocol(target, str(exc).splitlines()[0]) from None


def is_plain(result: dict[str, Any]) -> bool:
    """Whether a tools/call result is one the protocol's types pass unchanged on every
    version: text blocks only, and nothing but `content`, `isError`, `structuredContent`,
    `_meta` and `resultType`, each of its type."""
    if not result.keys() <= _PLAIN_KEYS:
        return False
    content, failed = result.get("content"), result.get("isError", False)
    structured, meta = result.get("structuredContent", {}), result.get("_meta", {})
    return (
        type(content) is list
        and type(failed) is bool
        and type(structured) is dict
        and type(meta) is dict
        and None not in meta.values()
        and all(
            type(block) is dict
            and len(block) == 2
            and block.get("type") == "text"
            and type(block.get("text")) is str
            for block in content
        )
    )


def structured_problem(
    result: dict[str, Any], output_schema: dict[str, Any], tool: str
) -> str | None:
    """What is wrong with a successful result of a tool that declares an output schema (the
    check the SDK's client makes, with its words), or None."""
    if "structuredContent" not in result:
        return f"Tool {tool} has an output schema but did not return structured content"
    check = checker(output_schema)
    if check.valid(result["structuredContent"]):
        return None
    from jsonschema.exceptions import best_match

    try:
        error = best_match(check.full.iter_errors(result["structuredContent"]))
    except Exception as exc:  # jsonschema's and referencing's errors on the server's schema
        return f"Invalid schema for tool {tool}: {exc}".splitlines()[0]
    if error is None:
        return None
    return f"Invalid structured content returned by tool {tool}: {error}".splitlines()[0]
