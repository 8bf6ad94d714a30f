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
from bundlectl.mcpio.results import is_plain

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


def plain(result: JsonObject, version: str) -> bytes | None:
    """`shaped` for the common result the protocol's types would pass unchanged: text blocks
    only, and nothing but `content`, `isError`, `structuredContent`, `_meta` and a `resultType`
    of complete (which an older protocol's types drop: every session's result carries it).
    None: anything else, which the protocol's types check. (The types cost a warm call more
    than anything else the door does; `test_gateway_express` holds this to what they give, on
    every protocol.)"""
    if not is_plain(result):
        return None
    meta = result.get("_meta", {})
    if version in MODERN_PROTOCOL_VERSIONS:
        if result.get("resultType", "complete") != "complete":
            return None
        result = {**result, "resultType": "complete"}
        if SERVER_INFO_KEY not in meta:
            result["_meta"] = {**meta, SERVER_INFO_KEY: _STAMP}
    elif "resultType" in result:  # the sessions' results say so; older protocols lack it
        if result["resultType"] != "complete":
            return None
        result = {key: value for key, value in result.items() if key != "resultType"}
    return json_line(result)[:-1]


@functools.cache
def _surface(version: str) -> TypeAdapter[Any]:
    """The type of a tools/call result on `version` (`serialize_server_result`'s)."""
    surface: Any = SERVER_RESULTS[("tools/call", version)]
    return TypeAdapter(surface)
