"""The official MCP Registry (and any registry that serves its API), searched by name:
`bundlectl registry search QUERY --from mcp-registry [--url URL]`.

`GET {url}/v0.1/servers?search=QUERY&version=latest&limit=N` (the API's `ServerList`: each entry
a `server` — a `server.json` — beside the registry's `_meta`), with `/v0/servers` for
registries that have not moved to v0.1. What a search finds is imported with
`bundlectl import server-json URL`, the URL of that server's latest version.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from bundlectl.config import urls
from bundlectl.errors import UsageError

OFFICIAL = "https://registry.modelcontextprotocol.io"
_STATUS = "io.modelcontextprotocol.registry/official"


@dataclass(frozen=True)
class Found:
    """One server the registry found: enough to choose it and import it."""

    name: str
    version: str
    description: str
    runs: list[str]  # how it can run: npm, pypi, oci, streamable-http, sse
    status: str
    url: str  # its latest version's server.json: `bundlectl import server-json URL`


def search(
    query: str, *, url: str = OFFICIAL, limit: int = 20, timeout: float = 20.0
) -> list[Found]:
    """The servers whose names contain `query`, newest version of each, at most `limit`."""
    base = url.rstrip("/")
    params = urllib.parse.urlencode({"search": query, "version": "latest", "limit": limit})
    body = None
    for api in ("v0.1", "v0"):
        try:
            body = _get(f"{base}/{api}/servers?{params}", timeout)
            break
        except urllib.error.HTTPError as exc:
            if exc.code == 404 and api == "v0.1":
                continue  # an older registry: its API is v0
            raise UsageError(
                f"the registry {base} answered HTTP {exc.code} to a search",
                hint="check --url: it is the registry's base URL (without /v0.1/servers)",
            ) from None
        except (OSError, ValueError) as exc:
            why = getattr(exc, "reason", exc)
            if "timed out" in str(why):
                why = f"no answer within {timeout:g} s"
            raise UsageError(
                f"cannot reach the registry {base} ({why})",
                hint="check the network (or --url); a slow registry: raise --timeout",
            ) from None
    assert body is not None
    return [_found(entry, base, api) for entry in _entries(body, base)][:limit]


def _get(url: str, timeout: float) -> bytes:
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    with urls.fetch(request, timeout=timeout) as response:
        data: bytes = response.read(16 << 20)
        return data


def _entries(body: bytes, base: str) -> list[dict[str, Any]]:
    try:
        answer = json.loads(body)
    except ValueError:
        answer = None
    servers = answer.get("servers") if isinstance(answer, dict) else None
    if not isinstance(servers, list):
        raise UsageError(
            f"the registry {base} did not answer with a list of servers",
            hint="check --url: it should be an MCP Registry (GET /v0.1/servers)",
        )
    return [entry for entry in servers if isinstance(entry, dict)]


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _found(entry: dict[str, Any], base: str, api: str) -> Found:
    server: dict[str, Any] = _dict(entry.get("server")) or entry
    official = _dict(_dict(entry.get("_meta")).get(_STATUS))
    name = str(server.get("name", "?"))
    runs = [
        str(p.get("registryType", "?")) for p in server.get("packages") or [] if isinstance(p, dict)
    ]
    runs += [str(r.get("type", "?")) for r in server.get("remotes") or [] if isinstance(r, dict)]
    quoted = urllib.parse.quote(name, safe="")
    return Found(
        name=name,
        version=str(server.get("version", "?")),
        description=" ".join(str(server.get("description", "")).split()),
        runs=runs,
        status=str(official.get("status", server.get("status", "active"))),
        url=f"{base}/{api}/servers/{quoted}/versions/latest",
    )
