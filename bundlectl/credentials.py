"""Where OAuth sign-ins to remote servers are kept (SPEC 12): the OS keyring when the `keyring`
package and a usable backend are there, else one file per server in the user state folder,
readable by its owner only (0600; headless Linux, CI). Never in the config, the lock, the audit
log or any output: `auth status` shows who, scopes and expiry, never a token.

A sign-in is kept per server name and URL (a server moved to another URL signs in afresh): the
tokens (with the time the access token expires), the client registration the authorization
server gave us, and what the access token says of its holder when the server tells us.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bundlectl.config import paths

SERVICE = "bundlectl"


@dataclass
class SignIn:
    """One server's kept sign-in (any part may be missing)."""

    server: str
    url: str
    tokens: dict[str, Any] | None = None  # the OAuth token response (access, refresh, scope)
    expires_at: float | None = None  # when the access token expires (time.time())
    client: dict[str, Any] | None = None  # the client registration (client_id, ...)
    signed_in_at: float | None = None

    @property
    def scopes(self) -> list[str]:
        scope = (self.tokens or {}).get("scope") or ""
        return scope.split()

    def as_json(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "url": self.url,
            "tokens": self.tokens,
            "expires_at": self.expires_at,
            "client": self.client,
            "signed_in_at": self.signed_in_at,
        }


def _key(server: str, url: str) -> str:
    return f"{server}-{hashlib.sha256(url.encode()).hexdigest()[:16]}"


def _folder() -> Path:
    return paths.state_dir() / "auth"


def _keyring() -> Any:
    """The keyring module when a real backend is there; None: the file store."""
    if os.environ.get("BUNDLECTL_KEYRING", "").lower() in ("0", "off", "no", "false"):
        return None
    try:
        import keyring  # noqa: PLC0415 - optional, and only when a sign-in is read
        from keyring.backends import fail  # noqa: PLC0415
    except ImportError:
        return None
    try:
        backend = keyring.get_keyring()
    except Exception:  # a broken keyring setup: the file store
        return None
    if isinstance(backend, fail.Keyring) or getattr(backend, "priority", 0) <= 0:
        return None
    return keyring


def load(server: str, url: str) -> SignIn:
    key = _key(server, url)
    ring = _keyring()
    text: str | None = None
    if ring is not None:
        with contextlib.suppress(Exception):
            text = ring.get_password(SERVICE, key)
    else:
        with contextlib.suppress(FileNotFoundError):
            text = (_folder() / f"{key}.json").read_text()
    if not text:
        return SignIn(server, url)
    try:
        data = json.loads(text)
    except ValueError:
        return SignIn(server, url)  # a damaged entry: as if signed out (login writes it anew)
    return SignIn(
        server,
        url,
        data.get("tokens"),
        data.get("expires_at"),
        data.get("client"),
        data.get("signed_in_at"),
    )


def save(sign_in: SignIn) -> None:
    key = _key(sign_in.server, sign_in.url)
    text = json.dumps(sign_in.as_json())
    ring = _keyring()
    if ring is not None:
        ring.set_password(SERVICE, key, text)
        return
    folder = _folder()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = folder / f"{key}.json"
    temporary = path.with_suffix(".tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)
    os.replace(temporary, path)


def forget(server: str, url: str) -> bool:
    """Remove the server's sign-in; whether there was one."""
    key = _key(server, url)
    ring = _keyring()
    if ring is not None:
        try:
            ring.delete_password(SERVICE, key)
        except Exception:
            return False
        return True
    try:
        (_folder() / f"{key}.json").unlink()
    except FileNotFoundError:
        return False
    return True


def where() -> str:
    """Where sign-ins are kept, for `auth status`."""
    return "the OS keyring" if _keyring() is not None else paths.display_path(_folder())


def expires_in(sign_in: SignIn, now: float | None = None) -> float | None:
    if sign_in.expires_at is None:
        return None
    return sign_in.expires_at - (time.time() if now is None else now)
