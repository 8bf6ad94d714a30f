// A real OpenID Provider for the approvers' sign-in tests: panva's `oidc-provider` (an
// OpenID-certified implementation, pinned in tests/npm), on 127.0.0.1, with discovery, JWKS and
// authorization code + PKCE. Its development login form takes any login; the accounts below
// give the claims. Usage: node oidc_provider.mjs PORT REDIRECT_URI [CLIENT_SECRET]
// (a secret makes the client confidential: client_secret_basic, no PKCE required).
// Prints "listening PORT" once it serves.
// (an ES module resolves packages from its own folder: this one is found in tests/npm)
const { default: Provider } = await import(
  new URL('../npm/node_modules/oidc-provider/lib/index.js', import.meta.url)
);

const [port, redirect, secret] = process.argv.slice(2);
const issuer = `http://127.0.0.1:${port}`;

const ACCOUNTS = {
  ana: { email: 'ana@acme.example', email_verified: true, name: 'Ana', groups: ['platform-approvers'] },
  ben: { email: 'ben@acme.example', email_verified: true, name: 'Ben', groups: ['platform-approvers'] },
  dev: { email: 'dev@acme.example', email_verified: true, name: 'Dev', groups: ['developers'] },
};

const client = {
  client_id: 'bundlectl-approvals',
  redirect_uris: [redirect],
  response_types: ['code'],
  grant_types: ['authorization_code'],
  ...(secret
    ? { client_secret: secret, token_endpoint_auth_method: 'client_secret_basic' }
    : { token_endpoint_auth_method: 'none' }),
};

const provider = new Provider(issuer, {
  clients: [client],
  // The claims the approvers' match reads, in the ID token itself (not only from userinfo).
  conformIdTokenClaims: false,
  claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name', 'groups'] },
  async findAccount(ctx, id) {
    const account = ACCOUNTS[id];
    if (!account) return undefined;
    return { accountId: id, async claims() { return { sub: id, ...account }; } };
  },
  features: { devInteractions: { enabled: true } },
  cookies: { keys: ['bundlectl-tests-only'] },
});
provider.listen(Number(port), '127.0.0.1', () => console.log(`listening ${port}`));
