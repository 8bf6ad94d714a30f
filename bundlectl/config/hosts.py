"""Host patterns (`servers.NAME.sandbox.network: [api.github.com, "*.githubusercontent.com:443"]`):
`host` (ports 443 and 80), `host:port`, `*.domain` (any name below the domain, not the domain
itself), an IP address (IPv6 in brackets) — each case-insensitive, a trailing dot ignored. Pure."""

from __future__ import annotations

import re
from collections.abc import Sequence

DEFAULT_PORTS = (443, 80)  # a pattern without a port: HTTPS and plain HTTP
_LABEL = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
_HOST = re.compile(rf"^(\*\.)?({_LABEL}\.)*{_LABEL}$")


def valid_pattern(pattern: str) -> str | None:
    """Why `pattern` is not a host pattern (None: it is one)."""
    if "://" in pattern or "/" in pattern:
        return (
            "a host, not a URL: api.github.com, *.domain or an IP address, with an optional :port"
        )
    host, port = _split(pattern)
    if port and not (port.isdigit() and 1 <= int(port) <= 65535):
        return f"{port!r} is not a port (1-65535)"
    if _is_ip(host) or _HOST.match(host):
        return None
    return "a host is a name (api.github.com), *.domain or an IP address, with an optional :port"


def allows(patterns: Sequence[str], host: str, port: int) -> bool:
    """Whether one of `patterns` lets a connection to `host`:`port` through."""
    host = host.lower().strip("[]").rstrip(".")
    for pattern in patterns:
        named, wanted = _split(pattern)
        if port not in ((int(wanted),) if wanted else DEFAULT_PORTS):
            continue
        if named.startswith("*."):
            if host.endswith(named[1:]) and host != named[2:]:
                return True
        elif host == named:
            return True
    return False


def whole_domain(pattern: str) -> str | None:
    """The top-level domain a pattern opens whole (`*.com`: "com"), or None."""
    host, _ = _split(pattern)
    if host.startswith("*.") and "." not in host[2:]:
        return host[2:]
    return None


def _split(pattern: str) -> tuple[str, str]:
    """(host, port or "") of a pattern, the host lowercased (an IPv6 address in brackets)."""
    text = pattern.lower()
    if text.startswith("["):
        host, _, after = text[1:].partition("]")
        return host, after.removeprefix(":")
    if text.count(":") == 1:
        host, _, port = text.partition(":")
        return host.rstrip("."), port
    return text.rstrip("."), ""


def _is_ip(host: str) -> bool:
    import ipaddress  # noqa: PLC0415 - only where a host list is read

    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True
