"""The gateway as an OAuth client of its issuers: their metadata's endpoints, and a request to
a token endpoint with the gateway's client credentials. Token exchange (`exchange.py`) and the
approvers' sign-in (`signin.py`) both go through here."""

from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Literal

from bundlectl.config import urls
from bundlectl.config.expand import expand
from bundlectl.errors import BundlectlError, ServerError
from bundlectl.gateway.identity import FETCH_TIMEOUT, METADATA, get_json
from bundlectl.mcpio.requests import JsonObject

AuthMethod = Literal["client_secret_basic", "client_secret_post", "none"]


def endpoint(issuer: str, name: str, refused: type[ServerError] = ServerError) -> str:
    """One endpoint (`token_endpoint`, `authorization_endpoint`) of an issuer, from its OpenID
    Connect or OAuth metadata, checked by the URL rule; else `refused` saying so."""
    base = issuer.rstrip("/")
    for where in METADATA:
        try:
            found = get_json(base + where).get(name)
        except (OSError, ValueError):
            continue
        if isinstance(found, str):
            return urls.checked(found, f"the {name} of {issuer}")
    raise refused(
        f"the issuer {issuer} publishes no {name}",
        hint=f"check that its /.well-known/openid-configuration names a {name}",
    )


def secret_of(reference: str | None, where: str) -> str | None:
    """A client secret's `${VAR}` reference, expanded now (never kept in the config)."""
    return expand(reference, os.environ, where=where) if reference else None


def token_request(
    url: str,
    form: dict[str, str],
    *,
    client_id: str,
    secret: str | None,
    method: AuthMethod | None,
    refused: type[ServerError],
    who: str,
    hint: str,
) -> JsonObject:
    """POST `form` to a token endpoint as the gateway's client (`method`, default: basic with a
    secret, none without) and the JSON object it answers; else `refused` with `who` and the
    issuer's OAuth error."""
    headers = {"Accept": "application/json", "Content-Type": "application/x-www-form-urlencoded"}
    form = dict(form)
    method = method or ("client_secret_basic" if secret else "none")
    if method == "client_secret_basic" and secret is not None:
        pair = f"{urllib.parse.quote(client_id)}:{urllib.parse.quote(secret)}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
    else:
        form["client_id"] = client_id
        if method == "client_secret_post" and secret is not None:
            form["client_secret"] = secret
    request = urllib.request.Request(
        url, data=urllib.parse.urlencode(form).encode(), headers=headers, method="POST"
    )
    try:
        with urls.fetch(request, timeout=FETCH_TIMEOUT) as response:
            answer = json.loads(response.read(1 << 20))
    except urllib.error.HTTPError as exc:
        raise refused(f"{who}: {said(exc)}", hint=hint) from None
    except (OSError, ValueError) as exc:
        raise refused(f"{who}: {exc}", hint=hint) from None
    except BundlectlError:
        raise
    if not isinstance(answer, dict):
        raise refused(f"{who}: its answer is not a JSON object", hint=hint)
    return answer


def said(error: urllib.error.HTTPError) -> str:
    """The issuer's OAuth error (`error`, `error_description`), or the HTTP status."""
    try:
        body = json.loads(error.read(1 << 16))
    except (OSError, ValueError):
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        described = body.get("error_description")
        return str(body["error"]) + (f" ({described})" if isinstance(described, str) else "")
    return f"HTTP {error.code}"
