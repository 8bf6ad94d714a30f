"""A remote registry's index and manifests as they travel: the index read (`parse_index`, each
manifest's path a plain relative one) and written (`index_bytes`), a digest, the size bound,
how this process asks (`REQUESTS`), and the errors of a fetch. Below the mirror (`remote`), the
OCI registries (`oci`, `oci_push`) and building an index (`registry_index`), which all read it.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from packaging.version import InvalidVersion, Version

from bundlectl.config.requirements import NAME_RE
from bundlectl.errors import InputFileError, Problem

_NAME = re.compile(NAME_RE)
# One name of a manifest's path in an index: never empty, `.` or `..` (see `relative_path`).
_PATH_PART = re.compile(r"(?!\.{1,2}\Z)[A-Za-z0-9._+~-]+")
INDEX = "index.json"  # the index's name beside the manifests
MAX_BYTES = 32 << 20  # an index or a manifest larger than this is refused


@dataclass
class Requests:
    """How this process asks remote registries (a command sets it from its options)."""

    timeout: float = 20.0  # seconds one request may take (`lock`/`install`/`remove --timeout`)
    # Ask for every index again, however fresh the cached one (`lock --upgrade`, `--refresh`):
    # once each per process (an unchanged index costs a 304).
    revalidate: bool = False
    revalidated: set[str] = field(default_factory=set)


REQUESTS = Requests()


def problem(url: str, message: str, hint: str | None = None) -> InputFileError:
    return InputFileError([Problem(url, 1, 1, message, "", hint, "remote_registry")])


def parse_index(url: str, data: bytes) -> dict[str, dict[str, dict[str, str]]]:
    """The bundles of an index: name → version → {path, sha256}; a malformed index is an
    error naming what is wrong."""
    if len(data) > MAX_BYTES:
        raise problem(url, f"the index is larger than {MAX_BYTES >> 20} MiB")
    try:
        index = json.loads(data)
    except ValueError as exc:
        raise problem(
            url, f"the index is not JSON: {exc}", "rebuild it: bundlectl registry build"
        ) from None
    bundles = index.get("bundles") if isinstance(index, dict) else None
    if not isinstance(bundles, dict) or index.get("format_version") != 1:
        raise problem(
            url,
            "not a bundlectl registry index (format_version 1 with bundles)",
            "write it with `bundlectl registry build FOLDER`",
        )
    for name, versions in bundles.items():
        if not _NAME.match(name):  # it becomes a folder of the mirror: never `..` or a path
            raise problem(url, f"bundle name {name!r} is not a bundle name")
        if not isinstance(versions, dict) or not all(map(_entry, versions.values())):
            raise problem(url, f"bundle {name!r}: each version needs a path and a sha256")
        for version, entry in versions.items():
            if not relative_path(entry["path"]):
                raise problem(
                    url,
                    f"bundle {name!r} {version}: path {entry['path']!r} is not a relative path "
                    "below the index (no scheme, no leading '/', no '..')",
                    "rebuild the index with `bundlectl registry build`",
                )
        for version in versions:
            try:
                Version(version)
            except InvalidVersion:
                raise problem(url, f"bundle {name!r}: {version!r} is not a version") from None
    return bundles


def relative_path(path: str) -> bool:
    """A manifest's path in an index: a plain relative path below the index's own folder, of
    names made of letters, digits and `._+~-` (what `registry build` writes) — never a URL of
    its own (`file://`, plain http to another host), an absolute path, a `..` step, a
    backslash, a query, an escape, or a space or control character, which a URL parser drops
    (`"a/.\\n./x"` is `a/../x`, `"\\t/x"` is `/x`). The sha256 limits the damage of a hostile
    index; this limits where it can make us go."""
    return all(_PATH_PART.fullmatch(part) for part in path.split("/"))


def _entry(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("path"), str)
        and isinstance(value.get("sha256"), str)
    )


class Unreachable(Exception):
    """The registry could not be reached (network, timeout, a server error): the mirror falls
    back to what is cached."""


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def index_bytes(index: dict[str, Any]) -> bytes:
    """An index as it is published (stable: the same bundles give the same bytes)."""
    return (json.dumps(index, indent=2, sort_keys=True) + "\n").encode()
