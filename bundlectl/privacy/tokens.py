"""Privacy token maps shared by gateway replicas (SPEC 9, 11): with `state.url` (Redis), an
agent's token map — which the gateway keeps per agent where no session outlives a request
(`--stateless`, the 2026-07-28 protocol, stdio) — lives in the store, so a token one replica
gave is turned back into its value by another (`privacy.detokenize`).

The one place values from calls are kept in the store, by design, and never in the clear: each
value is encrypted (Fernet: AES-128-CBC with an HMAC-SHA256, from `cryptography`, which
`pyjwt[crypto]` already brought) with a key derived from `BUNDLECTL_PRIVACY_KEY`, and found by
a keyed digest (HMAC-SHA256) of its label and value, never by the value. A map expires
`privacy.ttl` after its last use; the numbers of a label are never given twice, so a token
cached by a replica can never turn into another value.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from bundlectl.errors import UsageError

if TYPE_CHECKING:
    from bundlectl.state import TokenStore

KEY_VARIABLE = "BUNDLECTL_PRIVACY_KEY"
MIN_KEY = 32  # characters


def key_from(environ: Mapping[str, str] | None = None) -> str:
    """The secret the shared maps are encrypted with (UsageError: unset or too short)."""
    secret = (environ if environ is not None else os.environ).get(KEY_VARIABLE, "")
    if len(secret) < MIN_KEY:
        said = "is not set" if not secret else f"is shorter than {MIN_KEY} characters"
        raise UsageError(
            f"privacy with a shared state store (state.url) keeps each agent's token map in "
            f"the store, encrypted with {KEY_VARIABLE}, which {said}",
            hint=f"give every replica the same secret: export {KEY_VARIABLE}="
            "\"$(python -c 'import secrets; print(secrets.token_urlsafe(32))')\"",
        )
    return secret


class SharedTokens:
    """One agent's token map in the store: tokens given there, values sealed there."""

    def __init__(self, store: TokenStore, secret: str, scope: str, ttl: float) -> None:
        from cryptography.fernet import Fernet  # noqa: PLC0415 - only for shared maps

        root = hashlib.sha256(b"bundlectl privacy map\x00" + secret.encode()).digest()
        self._fernet = Fernet(base64.urlsafe_b64encode(hmac.digest(root, b"seal", "sha256")))
        self._index_key = hmac.digest(root, b"index", "sha256")
        self.store, self.ttl = store, max(1, int(ttl))
        self.scope = hashlib.sha256(scope.encode()).hexdigest()[:32]
        # A replica asks the store again after this long (which keeps the map alive there).
        self.refresh = min(self.ttl / 4, 3600.0)

    def __repr__(self) -> str:  # never the key
        return f"SharedTokens({self.scope})"

    def token_for(self, label: str, value: str) -> str:
        index = hmac.new(self._index_key, f"{label}\x1f{value}".encode(), "sha256").hexdigest()
        sealed = self._fernet.encrypt(value.encode()).decode("ascii")
        return self.store.token(self.scope, index, label, sealed, self.ttl)

    def value_of(self, token: str) -> str | None:
        """The value behind a token another replica (or this one) gave; None: unknown, expired
        or sealed with another key."""
        from cryptography.fernet import InvalidToken  # noqa: PLC0415

        sealed = self.store.sealed(self.scope, token)
        if sealed is None:
            return None
        try:
            return self._fernet.decrypt(sealed.encode("ascii")).decode()
        except (InvalidToken, ValueError):
            return None
