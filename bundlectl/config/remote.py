"""Registries on a web server (SPEC 14): a static index of bundles (`index.json`, written by
`bundlectl registry build`) with the manifests beside it, the shape of a Helm chart
repository or a PEP 503 index, served by anything that serves files.

A remote registry is mirrored into the user cache folder (`<cache>/registries/<key>/`, laid out
as any registry folder) and read from there: the index is fetched again when the cached one is
older than `FRESH` seconds (with `If-None-Match`, so an unchanged index costs a 304), and
each manifest is fetched once and kept by its digest. Every manifest is checked against the
sha256 the index gives for it — a manifest that differs is refused with both digests (exit 2),
never used. When the server cannot be reached, the cached index and manifests are used (a
locked project checks and installs offline), with a note; with nothing cached it is an error
naming the URL.
"""

from __future__ import annotations

import hashlib
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from bundlectl.config import paths, urls
from bundlectl.config.remote_index import (
    INDEX,
    MAX_BYTES,
    REQUESTS,
    Unreachable,
    digest,
    parse_index,
    problem,
)
from bundlectl.errors import UsageError
from bundlectl.output import err, status

FRESH = 300.0  # seconds a fetched index is used before it is asked for again
FETCHERS = 8  # manifests fetched at once (a bundle's versions, `list` of a whole registry)


def _hint(why: str, otherwise: str) -> str:
    """The hint for a registry that could not be reached: a slow one may be given longer."""
    if "timed out" in why:
        seconds = REQUESTS.timeout
        return f"it gave no answer within {seconds:g} s; give it longer with --timeout SECONDS"
    return otherwise


def mirror_folder(url: str) -> Path:
    """Where the registry at `url` is mirrored (known before anything is fetched)."""
    return _folder(url)


def _folder(url: str) -> Path:
    key = hashlib.sha256(url.encode()).hexdigest()[:20]
    return paths.cache_dir() / "registries" / key


def _base(url: str) -> str:
    """The URL of the folder that holds `index.json` (a URL naming the index itself works)."""
    if url.endswith("/" + INDEX):
        url = url[: -len(INDEX)]
    return url if url.endswith("/") else url + "/"


def _get(url: str, etag: str | None = None) -> tuple[int, bytes, str | None]:
    """The status, body and ETag of a GET (304 with an empty body when unchanged)."""
    headers = {"Accept": "application/json, application/yaml, */*"}
    if etag:
        headers["If-None-Match"] = etag
    request = urllib.request.Request(url, headers=headers)
    try:
        with urls.fetch(request, timeout=REQUESTS.timeout) as response:
            body = response.read(MAX_BYTES + 1)
            expected = response.headers.get("Content-Length")
            if expected is not None and expected.isdigit() and len(body) < int(expected):
                raise OSError(f"the answer was cut short ({len(body)} of {expected} bytes)")
            return response.status, body, response.headers.get("ETag")
    except urllib.error.HTTPError as exc:
        if exc.code == 304:
            return 304, b"", etag
        raise


class Fetcher(Protocol):
    """How one kind of remote registry is read: its index, and a manifest by its digest."""

    where: str  # the index's address, as messages name it

    def index(self, etag: str | None) -> tuple[bytes | None, str | None]:
        """The index's bytes and a tag of its version (None, etag: unchanged since `etag`)."""
        ...

    def manifest(self, name: str, version: str, entry: dict[str, str]) -> tuple[bytes, str]:
        """One manifest's bytes and where they came from (`Unreachable` when the server could
        not give them)."""
        ...


class _Static:
    """A static index (`index.json`) with the manifests beside it, on a web server."""

    def __init__(self, url: str) -> None:
        self.base = _base(url)
        self.where = self.base + INDEX

    def index(self, etag: str | None) -> tuple[bytes | None, str | None]:
        try:
            code, body, new_etag = _get(self.where, etag)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                raise problem(
                    self.where,
                    "the registry has no index.json (HTTP 404)",
                    "check the URL under registries:, and that the index was published",
                ) from None
            raise Unreachable(f"HTTP {exc.code}") from None
        except (OSError, ValueError) as exc:
            raise Unreachable(str(getattr(exc, "reason", exc))) from None
        return (None, etag) if code == 304 else (body, new_etag)

    def manifest(self, name: str, version: str, entry: dict[str, str]) -> tuple[bytes, str]:
        url = urllib.parse.urljoin(self.base, entry["path"])  # a relative_path: below base
        try:
            _, body, _ = _get(url)
        except (OSError, ValueError) as exc:
            raise Unreachable(f"{url}: {getattr(exc, 'reason', exc)}") from None
        return body, url


@dataclass
class Mirror:
    """A remote registry's mirror: its index (fetched, or cached when the server cannot be
    reached) and the manifests fetched so far. A bundle's manifests are fetched when the bundle
    is first used (`fetch`), so a project that uses ten bundles of a registry of hundreds fetches
    ten; `registry build` checked every manifest when the registry was published."""

    url: str
    folder: Path
    fetcher: Fetcher
    bundles: dict[str, dict[str, dict[str, str]]]  # the index: name → version → path, sha256
    offline: bool = False  # the server could not be reached: what is cached is what there is

    def fetch(self, name: str) -> dict[str, Path]:
        """Every version of bundle `name` the mirror holds (version → file), its missing
        manifests fetched first and checked against the index's digests; offline, the cached
        ones only."""
        versions = self.bundles.get(name, {})
        _manifests(self.fetcher, self.folder, {name: versions}, offline=self.offline)
        files = {version: self.folder / name / f"{version}.yaml" for version in versions}
        return {version: file for version, file in files.items() if file.exists()}


def mirror(url: str) -> Mirror:
    """The mirror of the registry at `url` (an `https://` static index or an `oci://`
    repository), its index brought up to date as far as the server can be reached."""
    fetcher: Fetcher
    if url.startswith("oci://"):
        from bundlectl.config import oci  # noqa: PLC0415 - only for a project with one

        fetcher = oci.Fetcher(url)
    else:
        fetcher = _Static(url)
    return sync(url, _folder(url), fetcher)


def sync(url: str, folder: Path, fetcher: Fetcher) -> Mirror:
    """The index in `folder`, fetched again when the cached one is stale."""
    cached_index = folder / ".index.json"
    etag_file = folder / ".etag"
    fresh = cached_index.exists() and time.time() - cached_index.stat().st_mtime < FRESH
    if REQUESTS.revalidate and url not in REQUESTS.revalidated:
        REQUESTS.revalidated.add(url)
        fresh = False
    data: bytes | None = None
    if not fresh:
        etag = etag_file.read_text() if etag_file.exists() and cached_index.exists() else None
        try:
            body, new_etag = fetcher.index(etag)
        except Unreachable as exc:
            return _offline(url, folder, fetcher, str(exc))
        if body is None:
            cached_index.touch()
        else:
            # refuse a malformed index before it replaces a good one
            parse_index(fetcher.where, body)
            data = body
            _write(cached_index, body)
            if new_etag:
                _write(etag_file, new_etag.encode())
            else:
                etag_file.unlink(missing_ok=True)
    if data is None:
        data = cached_index.read_bytes()
    return Mirror(url, folder, fetcher, parse_index(fetcher.where, data))


def _offline(url: str, folder: Path, fetcher: Fetcher, why: str) -> Mirror:
    cached_index = folder / ".index.json"
    if not cached_index.exists():
        raise UsageError(
            f"cannot reach the registry {url} ({why}), and nothing of it is cached",
            hint=_hint(
                why, "check the URL and the network; once reached, it works offline from the cache"
            ),
        )
    err(f"note: registry {url} cannot be reached ({why}); using its cached index")
    bundles = parse_index(url, cached_index.read_bytes())
    return Mirror(url, folder, fetcher, bundles, offline=True)


def _manifests(
    fetcher: Fetcher,
    folder: Path,
    bundles: dict[str, dict[str, dict[str, str]]],
    offline: bool = False,
) -> None:
    """Each manifest of the index in the mirror, fetched when missing, checked by its digest
    (with a progress line on a terminal)."""
    missing = []
    for name, versions in bundles.items():
        for version, entry in versions.items():
            target = folder / name / f"{version}.yaml"
            if not (target.exists() and digest(target.read_bytes()) == entry["sha256"]):
                missing.append((name, version, entry, target))
    if offline or not missing:
        return  # offline: what is not cached is not available
    shown = sys.stderr.isatty()
    # The first one alone (a client's lazy set-up, a sign-in, happens once), the rest
    # `FETCHERS` at a time: a cold mirror of hundreds of manifests is a burst of small requests.
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415 - only when fetching

    pool = ThreadPoolExecutor(max_workers=FETCHERS)
    try:
        pending = [pool.submit(fetcher.manifest, *missing[0][:3])]
        pending[0].exception()  # done (its failure is raised below, in order)
        pending += [pool.submit(fetcher.manifest, *item[:3]) for item in missing[1:]]
        for done, ((name, version, entry, target), future) in enumerate(
            zip(missing, pending, strict=True), 1
        ):
            if shown:
                status(f"\rfetching {len(missing)} manifest(s) from {fetcher.where}: {done}")
            try:
                body, where = future.result()
            except Unreachable as exc:
                if shown:
                    status("\n")
                raise UsageError(
                    f"cannot fetch {name} {version} from the registry {fetcher.where}: {exc}",
                    hint=_hint(str(exc), "try again; what was fetched before stays cached"),
                ) from None
            got = digest(body)
            if got != entry["sha256"]:
                if shown:
                    status("\n")
                raise problem(
                    where,
                    f"{name} {version}: the manifest's digest {got} differs from the index's "
                    f"{entry['sha256']}; it was not used",
                    "the registry changed a published manifest, or the download was altered: "
                    "ask its owner",
                )
            _write(target, body)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    if shown:
        status("\r\033[K")


def _write(path: Path, data: bytes) -> None:
    """A file of the mirror: in place at once or not at all, not synced to disk (each manifest
    is checked against its digest whenever the mirror is read, so one cut short by a crash is
    fetched again; the index is parsed before it is used)."""
    from bundlectl.config.fsio import atomic_write_bytes  # noqa: PLC0415 - only when fetching

    atomic_write_bytes(path, data, durable=False)


def checked_at(url: str) -> str:
    """When the cached index of `url` was last fetched or found unchanged, as a person reads
    it ("just now", "4 min ago"); "never" when nothing is cached."""
    cached_index = _folder(url) / ".index.json"
    if not cached_index.exists():
        return "never"
    age = max(0.0, time.time() - cached_index.stat().st_mtime)
    if age < 60:
        return "just now"
    if age < 3600:
        return f"{age // 60:.0f} min ago"
    return f"{age // 3600:.0f} h ago"
