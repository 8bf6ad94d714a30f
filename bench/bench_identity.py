"""What identifying a request costs the gateway (issue 38's goal: JWT verification with a cached
JWKS <= 0.2 ms per request), side by side with a static token, in one run.

    python bench/bench_identity.py [--requests 2000]

The gateway's own `Gate.identify` path: `Access.agent_for` for a static token (constant-time
compares), `Verifier.verdict` for an RS256 JWT whose issuer's key is already cached: in full
(signature, `iss`, `aud`, `exp`, then the agents' `match:`) the first time a token is seen,
its remembered verdict on the requests after (until `exp`, 60 s at most).
"""

from __future__ import annotations

import argparse
import statistics
import time

import anyio
import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

from bundlectl.config.models import ProjectConfig
from bundlectl.gateway.access import Access
from bundlectl.gateway.identity import Verifier, _Keys

ISSUER = "https://login.example.com"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000)
    count = parser.parse_args().requests
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    config = ProjectConfig.model_validate(
        {
            "version": 1,
            "agents": {
                f"agent{i}": {"match": {"client_id": f"bot-{i}"}, "allow": ["files.*"]}
                for i in range(20)
            },
            "gateway": {"auth": {"issuers": [{"issuer": ISSUER, "audience": ["gw"]}]}},
        }
    )
    verifier = Verifier(config)
    verifier._keys[ISSUER] = _Keys(time.monotonic(), 0.0, {"k1": key.public_key()})
    now = int(time.time())
    claims = {"iss": ISSUER, "aud": "gw", "exp": now + 3600, "client_id": "bot-7", "sub": "s"}
    token = jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"})
    tokens = {f"agent{i}": f"static-token-{i:04d}-xxxxxxxxxxxxxxxx" for i in range(20)}
    access = Access(tokens)
    header = f"Bearer {tokens['agent7']}"

    fresh = [
        jwt.encode({**claims, "jti": str(n)}, key, algorithm="RS256", headers={"kid": "k1"})
        for n in range(500)
    ]

    async def jwt_round() -> float:  # the same token again: a client's next request
        began = time.perf_counter()
        for _ in range(count):
            verdict = await verifier.verdict(token)
            assert verdict.agent == "agent7"
        return (time.perf_counter() - began) / count * 1e3

    async def first_round() -> float:  # a token not seen before: verified in full
        verifier._verdicts.clear()
        began = time.perf_counter()
        for one in fresh:
            verdict = await verifier.verdict(one)
            assert verdict.agent == "agent7"
        return (time.perf_counter() - began) / len(fresh) * 1e3

    def static_round() -> float:
        began = time.perf_counter()
        for _ in range(count):
            assert access.agent_for(header) == "agent7"
        return (time.perf_counter() - began) / count * 1e3

    jwts = [anyio.run(jwt_round) for _ in range(5)]
    firsts = [anyio.run(first_round) for _ in range(5)]
    statics = [static_round() for _ in range(5)]
    print(f"identifying one request, median of 5 rounds ({count} requests; 500 new tokens):")
    print(f"  static token (20 agents):            {statistics.median(statics):.4f} ms")
    print(f"  RS256 JWT seen before (its verdict): {statistics.median(jwts):.4f} ms")
    print(f"  RS256 JWT first seen, cached JWKS:   {statistics.median(firsts):.4f} ms")


if __name__ == "__main__":
    main()
