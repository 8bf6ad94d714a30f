"""The values of the CLI's choice options (typer shows them in --help and checks them), and the
names of the clients `export` and `import` know. Plain enums: cheap to import at start-up."""

from __future__ import annotations

from enum import Enum


class Format(str, Enum):
    """--format values of commands that print data."""

    text = "text"
    json = "json"


class MatrixFormat(str, Enum):
    """`policy matrix --format`."""

    text = "text"
    json = "json"
    csv = "csv"


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


# The clients `export` and `import` know (bundlectl.clients has one module each).
CLIENT_NAMES = (
    "claude-desktop",
    "claude-code",
    "cursor",
    "vscode",
    "roo",
    "kilo",
    "codex",
    "gemini",
    "qwen",
    "opencode",
    "copilot",
)


def check_client_name(name: str, *, what: str = "client", also: tuple[str, ...] = ()) -> None:
    """Refuse a name that is no client (nor one of `also`, such as import's `agix`): a usage
    error naming the closest (`export claud` → did you mean 'claude-code'?)."""
    known = [*CLIENT_NAMES, *also]
    if name in known:
        return
    from bundlectl.errors import UsageError  # noqa: PLC0415
    from bundlectl.suggest import Suggester  # noqa: PLC0415 - only for a wrong name

    close = Suggester(known).closest(name, n=1, cutoff=0.6)
    raise UsageError(
        f"unknown {what} {name!r}" + (f"; did you mean {close[0]!r}?" if close else ""),
        hint=f"{what}s: {', '.join(known)}",
    )


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
