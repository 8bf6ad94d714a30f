"""`bundlectl policy explain --claims JSON | --token FILE`: which agent a token stands for at
the gateway, and why — each agent's `match:` tried as `serve` tries it (#54)."""

from __future__ import annotations

import base64
import binascii
import json
from pathlib import Path
from typing import Any

from bundlectl.errors import UsageError
from bundlectl.output import out, visible
from bundlectl.policy.claims import why_not
from bundlectl.resolve.resolved import Resolution

TOKEN_HINT = "give a JWT access token (three base64url parts), or --claims with its claims"


def claims_from(claims: str | None, token: str | None) -> dict[str, Any]:
    """The claims of `--claims JSON|@FILE` or of `--token FILE|-` (its payload, decoded; the
    signature is not checked here: the gateway checks it)."""
    if claims is not None:
        from bundlectl.calls.arguments import load_json_args  # noqa: PLC0415

        return load_json_args(claims)
    assert token is not None
    try:
        text = (Path(token).read_text() if token != "-" else input()).strip()
    except OSError as exc:
        raise UsageError(f"cannot read {token}: {exc.strerror}", hint=TOKEN_HINT) from None
    parts = text.removeprefix("Bearer ").strip().split(".")
    if len(parts) != 3:
        raise UsageError(f"{token}: not a JWT (it has {len(parts)} part(s))", hint=TOKEN_HINT)
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, binascii.Error):
        raise UsageError(f"{token}: its payload is not base64url JSON", hint=TOKEN_HINT) from None
    if not isinstance(payload, dict):
        raise UsageError(f"{token}: its payload is not a JSON object", hint=TOKEN_HINT)
    return payload


def mapped(resolution: Resolution, claims: dict[str, Any]) -> str | None:
    """Print which agents' `match:` the claims fit and why the others do not; the agent the
    gateway would serve them as (None: it would refuse them)."""
    agents = resolution.policy.set.agents
    config = resolution.project.config  # the gateway reads the matches of the project's file
    matched = {name: rules.match for name, rules in config.agents.items() if rules.match}
    out(
        f"token claims: {visible(', '.join(sorted(claims)))} (the signature is not checked "
        "here; the gateway checks it)"
    )
    fitting = []
    for name, match in sorted(matched.items()):
        spec = agents.get(name)
        where = f" ({spec.origin})" if spec is not None else ""
        why = why_not(claims, match)
        if why is None:
            fitting.append(name)
            out(f"  {name}: fits its match:{where}")
        else:
            out(f"  {name}: does not fit: {visible(why)}")
    auth = config.gateway.auth
    if len(fitting) == 1:
        out(f"maps to agent {fitting[0]!r}")
        return fitting[0]
    if fitting:
        out(f"fits {len(fitting)} agents ({', '.join(fitting)}): the gateway refuses it (403)")
        return None
    if auth is not None and auth.unmatched == "default":
        out("fits no agent's match: served as agent 'default' (gateway.auth.unmatched: default)")
        return "default"
    out("fits no agent's match: the gateway refuses it (403; gateway.auth.unmatched: refuse)")
    return None
