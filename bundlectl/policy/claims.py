"""Which agent an identity token stands for: an agent's `match:` (claim → glob, or a list of
globs) against a token's claims (SPEC 12, 17) — the gateway's check, `policy explain
--claims`, and lint's reading of matches that fit anyone or fit one token with another agent.
No I/O, nothing imported beyond the standard library.

A list claim (groups) fits when any of its values fits. A glob with an `@` is an address: it
fits a value with exactly one `@`, the part before it by the glob's, and the domain by the
glob's domain (exactly, without case, when that has no wildcard) — in every claim, so
`*@acme.example` never fits `eve@evil.example#@acme.example` in `sub`, `upn` or
`preferred_username` either. A claim that names a mailbox (`email`) fits only when the token
says the issuer verified it (`email_verified: true`).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from typing import Any

Match = Mapping[str, str | list[str]]

MAILBOX_CLAIMS = {"email": "email_verified"}
# Claims a token carries as one string (RFC 7519, OpenID Connect): two agents whose globs for
# one of these cannot meet never fit the same token. Any other claim may be a list (groups).
SINGLE_VALUED = frozenset(
    {"sub", "iss", "client_id", "azp", "email", "preferred_username", "name", "upn", "oid"}
)
_WILD = "*?["


def globs_of(wanted: str | list[str]) -> list[str]:
    return wanted if isinstance(wanted, list) else [wanted]


def why_not(claims: Mapping[str, Any], match: Match) -> str | None:
    """Why a token's claims do not fit `match` (None: they do): the claim, never its value."""
    for name, wanted in match.items():
        value = claims.get(name)
        if value is None:
            return f"the token has no {name!r} claim"
        values = value if isinstance(value, list) else [value]
        globs = globs_of(wanted)
        if name in MAILBOX_CLAIMS:
            verified = MAILBOX_CLAIMS[name]
            if claims.get(verified) is not True:
                return f"its {name!r} is not verified ({verified} is not true)"
        if not any(_fits_glob(v, g) for v in values for g in globs):
            return f"its {name!r} fits none of {', '.join(globs)}"
    return None


def fits(claims: Mapping[str, Any], match: Match) -> bool:
    """Whether every wanted claim is there and fits one of its globs."""
    return why_not(claims, match) is None


def _fits_glob(value: object, pattern: str) -> bool:
    """One claim value against one glob: as an address when the glob has an `@` (one `@` in
    the value, the local part by the glob's, the domain by the glob's domain, without case,
    and nothing in it that a URL or a shell would read otherwise); else as text."""
    if "@" not in pattern:
        return fnmatch.fnmatchcase(str(value), pattern)
    if not isinstance(value, str) or value.count("@") != 1:
        return False
    local, domain = value.split("@")
    if not local or not domain or any(c in domain for c in "#/?\\ \t\n"):
        return False
    glob, _, wanted = pattern.rpartition("@")
    return fnmatch.fnmatchcase(domain.lower(), wanted.lower()) and fnmatch.fnmatchcase(local, glob)


def fits_anyone(match: Match) -> bool:
    """Whether every authenticated user whose token carries the claims fits: each claim's
    globs include one that is only `*`."""
    return all(any(set(g) == {"*"} for g in globs_of(w)) for w in match.values())


def can_share(one: Match, other: Match) -> bool:
    """Whether one token could fit both matches: no single-valued claim that both name has
    globs that cannot meet. (Two globs meet unless their fixed beginnings or ends differ.)"""
    for name in set(one) & set(other) & SINGLE_VALUED:
        if not any(_meet(a, b) for a in globs_of(one[name]) for b in globs_of(other[name])):
            return False
    return True


def _meet(a: str, b: str) -> bool:
    if not any(c in a for c in _WILD):
        return fnmatch.fnmatchcase(a, b)
    if not any(c in b for c in _WILD):
        return fnmatch.fnmatchcase(b, a)
    head_a, head_b = _fixed(a), _fixed(b)
    tail_a, tail_b = _fixed(a[::-1]), _fixed(b[::-1])
    heads = head_a.startswith(head_b) or head_b.startswith(head_a)
    tails = tail_a.startswith(tail_b) or tail_b.startswith(tail_a)
    return heads and tails


def _fixed(glob: str) -> str:
    """The literal text before a glob's first wildcard."""
    for index, char in enumerate(glob):
        if char in _WILD:
            return glob[:index]
    return glob
