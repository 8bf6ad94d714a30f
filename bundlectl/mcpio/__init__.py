"""Talking to MCP servers: processes and pipes (`stdio`, `watchdog`, `stderr`), connecting over
stdio, SSE and streamable HTTP (`connect`), the typed session interface (`session`) and its
SDK-free clients (`plain`), running the async side from the CLI (`runner`). Only the modules of
this package and of `calls`/`gateway` import the MCP SDK, and only when a command talks to a
server."""
