"""Which URLs bundlectl fetches from: `https://`, or plain `http://` to this machine only.

One rule for every URL the config names (token issuers and their JWKS, `registries:`) and
every URL a document hands us (an issuer's metadata, a registry index, a redirect, what a
remote MCP server names for its sign-in, `handed_over_problem`): plain
http only when the host is a loopback address (127.0.0.0/8, ::1) or exactly `localhost`, and
never a user name or password in a URL (it would be written to the lock and the logs). A
look-alike such as `http://127.0.0.1.evil.example/` or `http://localhost@evil.example/` is
another host, and refused.
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # urllib.request costs ~10 ms (http.client, email): only to fetch
    import urllib.request

HINT = "use https://, or plain http:// to 127.0.0.1, [::1] or localhost only"


class RefusedUrl(ValueError):
    """A URL the rule refuses (a ValueError: callers treat it as a bad address)."""


def loopback_host(host: str) -> bool:
    """`localhost` exactly, or an address of the loopback range."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def url_problem(url: str) -> str | None:
    """Why `url` may not be fetched from (None: it may)."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - a port that is not a number raises here
    except ValueError as exc:
        return f"is not a URL ({exc})"
    if parts.scheme not in ("https", "http"):
        return f"uses {parts.scheme + '://' if parts.scheme else 'no scheme'}, not https://"
    if not parts.hostname:
        return "names no host"
    if "@" in parts.netloc:
        return "carries a user name or password (give credentials another way)"
    if parts.scheme == "http" and not loopback_host(parts.hostname):
        return f"is plain http to {parts.hostname}, which is not this machine"
    return None


def handed_over_problem(home: str, url: str) -> str | None:
    """Why a URL that a server at `home` hands over (its sign-in's metadata, registration and
    token endpoints, its sign-in page, a redirect) may not be used (None: it may). The
    server's own origin is the config's choice; any other obeys the rule."""
    try:
        same = _origin(url) == _origin(home)
    except ValueError:
        same = False
    return None if same else url_problem(url)


def _origin(url: str) -> tuple[str, str | None, int | None]:
    """Scheme, host and port (`http://h/` and `http://h:80/` are one origin)."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, parts.hostname, parts.port or {"http": 80, "https": 443}.get(scheme)


def checked(url: str, what: str = "the URL") -> str:
    """`url` when the rule allows it; else RefusedUrl saying why."""
    why = url_problem(url)
    if why is not None:
        raise RefusedUrl(f"{what} {url} {why}; {HINT}")
    return url


def fetch(request: urllib.request.Request, timeout: float) -> Any:
    """`urllib.request.urlopen`, for a URL the rule allows, following only redirects it
    allows (RefusedUrl otherwise)."""
    checked(request.full_url)
    return _opener().open(request, timeout=timeout)


_OPENERS: list[Any] = []


def _opener() -> Any:
    """An opener whose redirects obey the rule (made once, when first needed)."""
    if not _OPENERS:
        import urllib.request  # noqa: PLC0415

        class Redirects(urllib.request.HTTPRedirectHandler):
            """Follows a redirect only to a URL the rule allows."""

            def redirect_request(  # noqa: PLR0917 - urllib's signature
                self,
                req: urllib.request.Request,
                fp: Any,
                code: int,
                msg: str,
                headers: Any,
                newurl: str,
            ) -> urllib.request.Request | None:
                checked(newurl, "a redirect to")
                return super().redirect_request(req, fp, code, msg, headers, newurl)

        _OPENERS.append(urllib.request.build_opener(Redirects()))
    return _OPENERS[0]
