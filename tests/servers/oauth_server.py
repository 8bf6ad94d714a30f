"""A remote MCP server that requires OAuth 2.1 as the MCP authorization spec describes it, with
its own authorization server, for the tests of `bundlectl auth` (built on the SDK's server-side
auth: protected resource metadata, RFC 8414 metadata, dynamic registration, PKCE, refresh).

    python oauth_server.py --port N [--token-seconds S]

Authorization is granted at once (no login page): `/authorize` redirects straight back to the
client's redirect URI with a code (and `iss`, RFC 9207), as a signed-in user who clicks "allow"
would. Access tokens
live `--token-seconds` (default 3600), so a test can see one refreshed. Every token endpoint
grant is appended to $OAUTH_LOG (when set): `code` or `refresh`.
"""

from __future__ import annotations

import _unmeasured  # noqa: F401  # first: see its docstring
import argparse
import os
import secrets
import time
from typing import Any

from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

SCOPES = ["tools:read", "tools:call"]


def log(event: str) -> None:
    path = os.environ.get("OAUTH_LOG")
    if path:
        with open(path, "a") as handle:
            handle.write(event + "\n")


class Provider:
    """An in-memory authorization server: every client is welcome, every request granted."""

    def __init__(self, token_seconds: int, issuer: str) -> None:
        self.token_seconds, self.issuer = token_seconds, issuer
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.access: dict[str, AccessToken] = {}
        self.sign_ins = 0  # authorization codes redeemed: each a sign-in, numbered
        self.of_refresh: dict[str, str] = {}  # refresh token → the sign-in it belongs to

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        code = secrets.token_urlsafe(16)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or SCOPES,
            expires_at=time.time() + 300,
            client_id=client.client_id or "",
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
            subject="alice@example.test",
        )
        # RFC 9207: the authorization server names itself in its answer (its metadata says so)
        return construct_redirect_uri(
            str(params.redirect_uri), code=code, state=params.state, iss=self.issuer
        )

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    def _issue(
        self, client_id: str, scopes: list[str], resource: str | None, subject: str
    ) -> OAuthToken:
        access, refresh = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        self.of_refresh[refresh] = subject
        expires = int(time.time()) + self.token_seconds
        self.access[access] = AccessToken(
            token=access,
            client_id=client_id,
            scopes=scopes,
            expires_at=expires,
            resource=resource,
            subject=subject,
        )
        self.refresh[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes, resource=resource
        )
        return OAuthToken(
            access_token=access,
            expires_in=self.token_seconds,
            scope=" ".join(scopes),
            refresh_token=refresh,
        )

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        log("code")
        self.sign_ins += 1
        return self._issue(
            client.client_id or "",
            authorization_code.scopes,
            authorization_code.resource,
            f"sign-in {self.sign_ins}",
        )

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        self.refresh.pop(refresh_token.token, None)
        log("refresh")
        return self._issue(
            client.client_id or "",
            scopes or refresh_token.scopes,
            refresh_token.resource,
            self.of_refresh.get(refresh_token.token, "sign-in ?"),
        )

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < time.time()):
            return None
        return found

    async def revoke_token(self, token: Any) -> None:
        self.access.pop(getattr(token, "token", ""), None)


def _issuer_identified() -> None:
    """The authorization server's metadata says it names itself in authorization responses
    (RFC 9207, `authorization_response_iss_parameter_supported`), as current ones do: a client
    must then pass the `iss` it was sent back to its OAuth flow, which checks it."""
    from mcp.server.auth import routes

    build = routes.build_metadata

    def with_iss(*args: Any, **kwargs: Any) -> Any:
        metadata = build(*args, **kwargs)
        metadata.authorization_response_iss_parameter_supported = True
        return metadata

    routes.build_metadata = with_iss


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--token-seconds", type=int, default=3600)
    args = parser.parse_args()
    base = f"http://127.0.0.1:{args.port}"
    _issuer_identified()
    server = MCPServer(
        "oauth-kitchen",
        auth_server_provider=Provider(args.token_seconds, base),
        auth=AuthSettings(
            issuer_url=base,
            resource_server_url=f"{base}/mcp",
            client_registration_options=ClientRegistrationOptions(
                enabled=True, valid_scopes=SCOPES, default_scopes=SCOPES
            ),
            required_scopes=["tools:read"],
            validate_token_resource=False,
        ),
    )

    @server.tool()
    def whoami(ctx: Context) -> str:
        """Who the bearer token says the caller is."""
        return "alice@example.test"

    @server.tool()
    def sign_in() -> str:
        """Which sign-in (authorization code redeemed here, numbered) the bearer token is of."""
        from mcp.server.auth.middleware.auth_context import get_access_token

        token = get_access_token()
        return token.subject if token is not None and token.subject else "none"

    server.run("streamable-http", host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
