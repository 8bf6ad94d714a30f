"""`bundlectl serve`: the policy-enforcing MCP gateway. `core` holds the hub shared by every
session and the per-agent view, `express` the warm-call lane, `http` the streamable HTTP front
door."""
