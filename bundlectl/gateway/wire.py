"""A tools/call result put on the wire as the SDK's server would send it on the client's
protocol version, for calls that bypass the SDK (the express lane): checked against that
protocol's types and cut to its fields — or, for the common all-text result those types would
pass unchanged, written directly (`plain`), which is most of a warm call's saving."""

from __future__ import annotations

import functools
from typing import Any

import mcp_types as types
from mcp_types.methods import SERVER_RESULTS
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import TypeAdapter

from bundlectl import __version__
from bundlectl.mcpio.pipes import json_line
from bundlectl.mcpio.requests import JsonObject

SERVER_INFO_KEY = types.SERVER_INFO_META_KEY


def shaped(result: JsonObject, version: str) -> bytes:
    """A tools/call result as the SDK's server sends it on `version`, as JSON: checked against
    that protocol and cut to its fields; on 2026-07-28 with `resultType` and the serverInfo
    stamp (the downstream server's when it gave one, as the SDK path passes it on)."""
    direct = plain(result, version)
    return direct if direct is not None else _typed(result, version)


def _typed(result: JsonObject, version: str) -> bytes:
    """`shaped` by the protocol's types."""
    if version in MODERN_PROTOCOL_VERSIONS:
        meta = result.get("_meta")
        stamp = isinstance(meta, dict | None) and (meta or {}).get(SERVER_INFO_KEY) is None
        result = {
            **result,
            # an older server's result: complete, by definition
            "resultType": result.get("resultType", "complete"),
            **({"_meta": {**(meta or {}), SERVER_INFO_KEY: _STAMP}} if stamp else {}),
        }
    adapter = _surface(version)
    return adapter.dump_json(
        adapter.validate_python(result, by_name=False), by_alias=True, exclude_none=True
    )


_STAMP = {"name": "bundlectl", "version": __version__}
_PLAIN_KEYS = frozenset({"content", "isError", "structuredContent", "resultType", "_meta"})


def plain(result: JsonObject, version: str) -> bytes | None:
    """`shaped` for the common result the protocol's types would pass unchanged: text blocks
    only, and nothing but `content`, `isError`, `structuredContent` and `_meta` (and on
    2026-07-28 a `resultType` of complete). None: anything else, which the protocol's types
    check. (The types cost the lane's warm call more than anything else it does;
    `test_gateway_express` holds this to what they give, on every protocol.)"""
    if not is_plain(result):
        return None
    meta = result.get("_meta", {})
    if version in MODERN_PROTOCOL_VERSIONS:
        if result.get("resultType", "complete") != "complete":
            return None
        result = {**result, "resultType": "complete"}
        if SERVER_INFO_KEY not in meta:
            result["_meta"] = {**meta, SERVER_INFO_KEY: _STAMP}
    elif "resultType" in result:
        return None
    return json_line(result)[:-1]


def is_plain(result: JsonObject) -> bool:
    """Whether a tools/call result is one the protocol's types pass unchanged on every
    version: text blocks only, and nothing but `content`, `isError`, `structuredContent`,
    `_meta` and `resultType`, each of its type (what `plain` writes without the types)."""
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


@functools.cache
def _surface(version: str) -> TypeAdapter[Any]:
    """The type of a tools/call result on `version` (`serialize_server_result`'s)."""
    surface: Any = SERVER_RESULTS[("tools/call", version)]
    return TypeAdapter(surface)
