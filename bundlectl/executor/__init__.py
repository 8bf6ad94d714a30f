"""The runtime executor. Only the modules of this package import the MCP SDK, and only when a
command actually talks to a server."""
