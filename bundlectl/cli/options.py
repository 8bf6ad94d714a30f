"""The values of the CLI's choice options (typer shows them in --help and checks them), and the
names of the clients `export` and `import` know. Plain enums: cheap to import at start-up."""

from __future__ import annotations

from enum import Enum


class Format(str, Enum):
    """--format values of commands that print data."""

    text = "text"
    json = "json"


class SearchFrom(str, Enum):
    """`registry search --from`: where to look."""

    registries = "registries"
    mcp_registry = "mcp-registry"


class MatrixFormat(str, Enum):
    """`policy matrix --format`."""

    text = "text"
    json = "json"
    csv = "csv"


class CedarFormat(str, Enum):
    """`policy export --format`."""

    cedar = "cedar"


class DiffFormat(str, Enum):
    """`policy diff --format`."""

    text = "text"
    markdown = "markdown"
    json = "json"
    sarif = "sarif"


class LintFormat(str, Enum):
    """`lint --format`: the reporters of `lint.formats.FORMATS`."""

    text = "text"
    json = "json"
    sarif = "sarif"
    github = "github"


class FailLevel(str, Enum):
    """`lint --fail-level`."""

    error = "error"
    warning = "warning"
    info = "info"


class ServeMode(str, Enum):
    """`serve --mode`."""

    direct = "direct"  # every usable tool in tools/list
    search = "search"  # two tools: search_tools and call_tool (progressive disclosure)


class GatewayNames(str, Enum):
    """`serve --names`, `tools --names` (the config's `gateway.names`)."""

    prefixed = "prefixed"  # server__tool
    bare = "bare"  # the server's own name


class CodegenLang(str, Enum):
    """`codegen --lang`."""

    python = "python"
    typescript = "typescript"


class ExportVia(str, Enum):
    """`export --via`."""

    auto = "auto"  # direct when the client can express the policy exactly, else gateway
    direct = "direct"  # the servers, with the client's native tool filter
    gateway = "gateway"  # one entry: bundlectl serve --agent A


class ServeTransport(str, Enum):
    """`serve --transport`."""

    stdio = "stdio"  # one client, one agent
    streamable_http = "streamable-http"  # many clients and agents, bearer tokens


class Names(str, Enum):
    """`tools --names`: how tools are named."""

    qualified = "qualified"  # server.tool, as rules and exec name them
    gateway = "gateway"  # server__tool, as `bundlectl serve` lists them


class Detail(str, Enum):
    """`tools --detail`."""

    name = "name"
    summary = "summary"
    full = "full"
