"""bundlectl: bundles of MCP servers and the per-agent tool policy that governs them."""

__version__ = "0.1.0"
