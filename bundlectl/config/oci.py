"""Registries in an OCI registry (SPEC 14): `oci://HOST[:PORT]/REPOSITORY`, the way Helm charts
and ORAS artifacts travel.

One repository holds one registry. Each manifest is an OCI artifact of its own (config media
type `ARTIFACT`, one layer of media type `MANIFEST`), tagged `<name>-<version>`; the registry's
index (the JSON of a static index, `registry build`) is an artifact tagged `index`. A mirror reads
the `index` tag, then each manifest's blob by the sha256 the index gives, and checks it: the
lock's digests are the blobs' own addresses. `bundlectl registry push FOLDER oci://...` writes
them; a published name and version is immutable (a push that would change one is refused).

Pushed and pulled with the `oras` library (oras-py), loaded only for a project or a command
that names an `oci://` registry. Each request is one attempt with a timeout: oras's own retry
waits minutes for an unreachable registry, where a mirror should fall back to its cache at once.
Plain HTTP for loopback hosts (as Docker treats them), HTTPS everywhere else; credentials from
Docker's config file (`docker login` / `oras login`), as every OCI tool finds them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bundlectl.config import remote_index
from bundlectl.errors import UsageError

if TYPE_CHECKING:
    import requests

ARTIFACT = "application/vnd.bundlectl.bundle.v1"
MANIFEST = "application/vnd.bundlectl.bundle.manifest.v1+yaml"
INDEX = "application/vnd.bundlectl.registry.index.v1+json"
INDEX_TAG = "index"
_ACCEPT = "application/vnd.oci.image.manifest.v1+json"
_LOOPBACK = {"localhost", "127.0.0.1", "[::1]"}


@dataclass(frozen=True)
class Reference:
    """`oci://HOST[:PORT]/REPOSITORY`, split."""

    url: str
    host: str  # with the port
    repository: str

    @classmethod
    def parse(cls, url: str) -> Reference:
        rest = url.removeprefix("oci://")
        host, _, repository = rest.partition("/")
        repository = repository.strip("/")
        if not host or not repository or "@" in rest or ":" in repository:
            raise UsageError(
                f"{url!r} is not an OCI registry reference",
                hint="write oci://HOST[:PORT]/REPOSITORY (no tag: bundlectl names the tags)",
            )
        return cls(url, host, repository)

    @property
    def insecure(self) -> bool:
        """Plain HTTP: only for a registry on this machine."""
        host = self.host
        name = host[: host.index("]") + 1] if host.startswith("[") else host.rsplit(":", 1)[0]
        return name in _LOOPBACK

    @property
    def where(self) -> str:
        """The index's address, as messages name it."""
        return f"{self.url} (tag {INDEX_TAG})"

    def target(self, tag: str) -> str:
        return f"{self.host}/{self.repository}:{tag}"


def tag_of(name: str, version: str) -> str:
    """The tag of one bundle version (OCI tags have no `+`)."""
    return f"{name}-{version}".replace("+", "_")


def client_of(ref: Reference) -> Any:
    """An oras registry client whose requests are each one attempt with a timeout."""
    try:
        import oras.auth  # noqa: PLC0415 - only for oci:// registries (oras loads requests)
        import oras.provider  # noqa: PLC0415
    except ImportError:
        raise UsageError(
            f"{ref.url}: OCI registries need the oras library, which is not installed",
            hint="pip install 'bundlectl[oci]' (or pipx inject bundlectl oras)",
        ) from None

    class Client(oras.provider.Registry):  # type: ignore[misc]
        def do_request(  # noqa: PLR0917 - oras's signature
            self,
            url: str,
            method: str = "GET",
            data: Any = None,
            headers: dict[str, str] | None = None,
            json: Any = None,
            stream: bool = False,
        ) -> requests.Response:
            headers = dict(headers or {})
            if isinstance(self.auth, oras.auth.TokenAuth) and self.auth.token is not None:
                headers.update(self.auth.get_auth_header())

            def send(headers: dict[str, str]) -> requests.Response:
                return self.session.request(  # type: ignore[no-any-return]
                    method,
                    url,
                    data=data,
                    json=json,
                    headers=headers,
                    stream=stream,
                    verify=self._tls_verify,
                    timeout=remote_index.REQUESTS.timeout,
                )

            response = send(headers)
            if response.status_code in (401, 403):
                headers, changed = self.auth.authenticate_request(response, headers)
                if changed:
                    response = send(headers)
            return response

    return Client(hostname=ref.host, insecure=ref.insecure)


class Fetcher:
    """A registry in an OCI repository, read for `remote.sync`."""

    def __init__(self, url: str) -> None:
        self.ref = Reference.parse(url)
        self.where = self.ref.where
        self._registry: Any = None

    @property
    def registry(self) -> Any:
        if self._registry is None:
            self._registry = client_of(self.ref)
        return self._registry

    def index(self, etag: str | None) -> tuple[bytes | None, str | None]:
        found = read_index(self.registry, self.ref, etag)
        if found is None:
            raise remote_index.problem(
                self.where,
                f"the repository has no tag {INDEX_TAG!r}: not a bundlectl registry",
                f"publish one: bundlectl registry push FOLDER {self.ref.url}",
            )
        return found

    def manifest(self, name: str, version: str, entry: dict[str, str]) -> tuple[bytes, str]:
        where = f"{self.ref.url}@{entry['sha256']}"
        return _blob(self.registry, self.ref, entry["sha256"], f"{name} {version}"), where


def read_index(registry: Any, ref: Reference, etag: str | None) -> tuple[bytes | None, str] | None:
    """The index's bytes (None when its digest is still `etag`) and its manifest's digest;
    None when the repository has no index."""
    found = _manifest(registry, ref, INDEX_TAG)
    if found is None:
        return None
    manifest, digest = found
    if etag is not None and digest == etag:
        return None, etag
    where = ref.where
    layers = [layer for layer in manifest.get("layers", []) if layer.get("mediaType") == INDEX]
    if len(layers) != 1:
        raise remote_index.problem(
            where,
            f"the artifact tagged {INDEX_TAG!r} holds no layer of type {INDEX}",
            f"publish the registry again: bundlectl registry push FOLDER {ref.url}",
        )
    return _checked_blob(registry, ref, layers[0]["digest"], where), digest


def _manifest(registry: Any, ref: Reference, tag: str) -> tuple[dict[str, Any], str] | None:
    """The OCI manifest at `tag` and its digest; None when the tag does not exist."""
    container = registry.get_container(ref.target(tag))
    registry.auth.load_configs(container)
    url = f"{registry.prefix}://{container.manifest_url()}"
    response = _request(registry, url, ref, {"Accept": _ACCEPT})
    if response.status_code == 404:
        return None
    _check(response, ref, f"tag {tag}")
    try:
        manifest = response.json()
    except ValueError:
        raise remote_index.problem(ref.url, f"the manifest of tag {tag!r} is not JSON") from None
    digest = response.headers.get("Docker-Content-Digest") or remote_index.digest(response.content)
    return manifest if isinstance(manifest, dict) else {}, digest


def _blob(registry: Any, ref: Reference, digest: str, what: str) -> bytes:
    container = registry.get_container(ref.target(INDEX_TAG))
    url = f"{registry.prefix}://{container.get_blob_url(digest)}"
    response = _request(registry, url, ref, {})
    if response.status_code == 404:
        raise remote_index.problem(
            f"{ref.url}@{digest}",
            f"{what}: the registry has no blob {digest}",
            "the index names a manifest the repository does not hold: publish it again",
        )
    _check(response, ref, what)
    body: bytes = response.content
    if len(body) > remote_index.MAX_BYTES:
        raise remote_index.problem(
            ref.url, f"{what} is larger than {remote_index.MAX_BYTES >> 20} MiB"
        )
    return body


def _checked_blob(registry: Any, ref: Reference, digest: str, where: str) -> bytes:
    body = _blob(registry, ref, digest, "the index")
    if remote_index.digest(body) != digest:
        raise remote_index.problem(
            where,
            f"the index's digest {remote_index.digest(body)} differs from its address {digest}",
            "the download was altered: try again, or ask the registry's owner",
        )
    return body


def _request(registry: Any, url: str, ref: Reference, headers: dict[str, str]) -> Any:
    import requests  # noqa: PLC0415 - oras's own HTTP library, loaded with it

    try:
        return registry.do_request(url, "GET", headers=headers)
    except requests.RequestException as exc:
        raise remote_index.Unreachable(reason_of(exc)) from None
    except ValueError as exc:  # oras: authentication it cannot answer
        raise UsageError(
            f"the registry {ref.url} refused the request: {exc}",
            hint=f"sign in to {ref.host} (docker login or oras login), then try again",
        ) from None


def _check(response: Any, ref: Reference, what: str) -> None:
    if response.status_code >= 500:
        raise remote_index.Unreachable(f"HTTP {response.status_code}")
    if response.status_code in (401, 403):
        raise UsageError(
            f"the registry {ref.url} refused to give {what} (HTTP {response.status_code})",
            hint=f"sign in to {ref.host} (docker login or oras login), then try again",
        )
    if response.status_code != 200:
        raise remote_index.problem(ref.url, f"{what}: HTTP {response.status_code}")


def reason_of(exc: Exception) -> str:
    text = str(exc)
    if "timed out" in text.lower() or type(exc).__name__.endswith("Timeout"):
        return f"timed out after {remote_index.REQUESTS.timeout:g} s"
    if "Connection refused" in text or "Failed to establish" in text:
        return "connection refused"
    return text.splitlines()[0][:200] if text else type(exc).__name__
