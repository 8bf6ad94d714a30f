"""`bundlectl serve`: the policy-enforcing MCP gateway. `hub` holds what every session shares
(the downstream servers, names, reloads), `view` one agent's view of it (listing, calls through
`calls.sequence`), `handlers` the MCP server's handlers, `http` the streamable HTTP front door
(tokens, identities, the approvers' page, people's own sign-ins: `personal`), `serve_stdio` and
`stdio_calls` the stdio front door and the calls it reads off the pipe."""
