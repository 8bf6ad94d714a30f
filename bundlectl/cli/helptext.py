"""The end of each command's `--help`: examples to copy, and the exit codes it uses (SPEC 4.1)."""

from __future__ import annotations

_READS = "0 done; 2 bad usage or an input file with problems (each with its position)"
_CALLS = (
    "0 done; 1 the tool reported an error; 2 bad usage or input; 3 denied by the policy "
    "(nothing started); 4 no such tool, or invalid arguments; 5 the server failed; "
    "6 timed out; 75 held for an approver (--no-wait, batch); 130 interrupted"
)
_ASKS = (
    "0 done; 2 bad usage or input; 3 the agent may not use the server; 4 no such resource or "
    "prompt; 5 the server failed; 6 timed out; 130 interrupted"
)
_SIGNS = (
    "0 signed in; 2 bad usage or input (not a remote server); 5 the server or its "
    "authorization server failed, or no answer from the browser in time"
)
_STORE = (
    "0 done; 2 bad usage, or no such pending request; 5 the state store cannot be used "
    "(its path is named)"
)
_EDITS = "0 done; 1 a resolution conflict (both sides named); 2 bad usage or input"
_CHECKS = "0 as expected; 1 it differs (the difference is printed); 2 bad usage or input"

# command → (example command lines, exit codes)
HELP: dict[str, tuple[list[str], str]] = {
    "init": (["bundlectl init", "bundlectl init --force   # replace an existing file"], _EDITS),
    "list": (["bundlectl list", "bundlectl list --installed --format json"], _READS),
    "show": (["bundlectl show basic", "bundlectl show github==1.1.0 --format json"], _READS),
    "install": (["bundlectl install basic", "bundlectl install 'github>=1,<2'"], _EDITS),
    "remove": (["bundlectl remove github"], _EDITS),
    "lock": (
        ["bundlectl lock", "bundlectl lock --check   # in CI", "bundlectl lock --upgrade github"],
        "0 done (--check: the lock is current); 1 stale lock or a resolution conflict; "
        "2 bad usage or input",
    ),
    "resolve": (["bundlectl resolve", "bundlectl resolve --agent reader --format json"], _READS),
    "schema": (["bundlectl schema --out schemas", "bundlectl schema --check"], _CHECKS),
    "registry add": (["bundlectl registry add weather/1.0.0.yaml"], _READS),
    "registry list": (["bundlectl registry list"], _READS),
    "registry catalog": (
        [
            "bundlectl registry catalog weather/1.0.0.yaml",
            "bundlectl registry catalog weather/1.0.0.yaml --server weather",
        ],
        "0 written; 2 bad usage or a manifest with problems (each with its position); 5 a "
        "server could not start or be asked",
    ),
    "registry build": (
        ["bundlectl registry build team-registry", "bundlectl registry build src --out public"],
        _READS,
    ),
    "registry search": (
        [
            "bundlectl registry search git",
            "bundlectl registry search filesystem --from mcp-registry",
            "bundlectl registry search time --from mcp-registry --url https://mcp.internal.example",
        ],
        "0 searched (also when nothing matched); 2 bad usage, or a registry that cannot be "
        "reached or gave no list",
    ),
    "registry push": (
        [
            "bundlectl registry push team-registry oci://registry.example.com/platform/bundles",
            "bundlectl registry push team-registry oci://localhost:5000/bundles --format json",
        ],
        "0 published (or already there, unchanged); 1 a version already published with other "
        "content (nothing was pushed); 2 bad usage, a broken manifest, or a registry that "
        "cannot be reached",
    ),
    "approvals list": (
        ["bundlectl approvals list", "bundlectl approvals list --all --format json"],
        _STORE,
    ),
    "auth login": (
        ["bundlectl auth login linear", "bundlectl auth login linear --no-browser"],
        _SIGNS,
    ),
    "auth status": (["bundlectl auth status", "bundlectl auth status --format json"], _READS),
    "auth logout": (["bundlectl auth logout linear"], _READS),
    "audit summary": (
        [
            "bundlectl audit summary --since 1d",
            "bundlectl audit summary --since 7d --html week.html",
        ],
        _READS,
    ),
    "audit verify": (
        [
            "bundlectl audit verify",
            "bundlectl audit verify shipped/audit.jsonl",
            "bundlectl audit verify --key @~/vault/audit.key",
        ],
        "0 every record links to the one before it (and, with --key, every seal matches); "
        "1 the chain or a seal is broken (the line named); 2 no such log, or a bad key",
    ),
    "audit seal": (
        ["bundlectl audit seal --init", "bundlectl audit seal --init --every 1h"],
        "0 sealed (--init: the verification key printed); 2 already sealed, or not sealed",
    ),
    "limits status": (
        ["bundlectl limits status", "bundlectl limits status --agent ci-bot --format json"],
        _STORE,
    ),
    "approvals show": (["bundlectl approvals show k3m9x2a7bq4e"], _STORE),
    "pins update": (
        ["bundlectl pins update", "bundlectl pins update --dry-run"],
        "0 done (or nothing to record); 1 a resolution conflict; 2 bad usage or input",
    ),
    "approvals approve": (
        [
            "bundlectl approvals approve k3m9x2a7bq4e",
            "bundlectl approvals approve k3m9x2a7bq4e --for 8h",
        ],
        _STORE,
    ),
    "approvals deny": (
        ["bundlectl approvals deny k3m9x2a7bq4e --reason 'not on production'"],
        _STORE,
    ),
    "approvals ui": (
        ["bundlectl approvals ui", "bundlectl approvals ui --port 8765 --no-browser"],
        "0 stopped (Ctrl-C); 2 bad usage or input (a busy port)",
    ),
    "policy check": (
        [
            "bundlectl policy check --agent reader files.read_file",
            'bundlectl policy check -a docs files.write_file --args \'{"path": "docs/a.md"}\'',
        ],
        "0 every tool allowed; 2 bad usage or input; 3 a tool is denied (or asked, with no one "
        "to confirm)",
    ),
    "policy explain": (
        [
            "bundlectl policy explain --agent reader files.write_file",
            "bundlectl policy explain --token token.jwt deploy.apply",
            """bundlectl policy explain --claims '{"sub": "ana", "groups": ["ops"]}'""",
        ],
        _READS,
    ),
    "policy diff": (
        [
            "bundlectl policy diff",
            "bundlectl policy diff origin/main --format markdown",
            "bundlectl policy diff ../other-project --agent deployer",
        ],
        "0 nothing changes in who may do what; 1 something does; 2 bad usage (BASE neither a "
        "path nor a git revision) or an input file with problems",
    ),
    "policy replay": (
        [
            "bundlectl policy replay",
            "bundlectl policy replay audit-2026-11.jsonl --agent deployer --format json",
        ],
        "0 every call is decided as it was; 1 some are decided differently now; 2 bad usage, "
        "no such log, or an input file with problems",
    ),
    "policy export": (
        [
            "bundlectl policy export --format cedar",
            "bundlectl policy export --format cedar --out cedar/",
        ],
        "0 written; 2 bad usage, a rule Cedar cannot say exactly (argument conditions, `?`), "
        "or an input file with problems",
    ),
    "policy matrix": (
        ["bundlectl policy matrix", "bundlectl policy matrix --agent reader --format csv"],
        _READS,
    ),
    "tools": (
        [
            "bundlectl tools --agent reader",
            "bundlectl tools --search 'pull request' --detail full",
            "bundlectl tools --live --record --server mine",
        ],
        "0 done (--live: every server matches its catalog); 1 --live: a catalog differs; "
        "2 bad usage or input; 5 --live: a server could not be asked",
    ),
    "exec": (
        [
            "bundlectl exec --agent reader files.read_file path=README.md",
            "bundlectl exec files.write_file --args @call.json --yes",
            "bundlectl exec reports.latest --follow-links",
            "bundlectl exec --batch calls.jsonl --format json",
        ],
        _CALLS,
    ),
    "read": (
        ["bundlectl read docs", "bundlectl read docs file:///guide.md --agent writer"],
        _ASKS,
    ),
    "prompt": (
        ["bundlectl prompt review", "bundlectl prompt review summarize topic=security -a author"],
        _ASKS,
    ),
    "serve": (
        [
            "bundlectl serve --agent reader   # stdio, for one client",
            "bundlectl serve --transport streamable-http --port 8765",
        ],
        "0 stopped cleanly; 2 bad usage, input, or a port that cannot be used; 130 interrupted",
    ),
    "export": (
        [
            "bundlectl export claude-code --agent reviewer",
            "bundlectl export codex -a reviewer --via gateway",
            "bundlectl export cursor -a reviewer --check   # in CI",
        ],
        "0 done (--check: the file is current); 1 --check: it differs, or --via direct cannot "
        "hold the policy; 2 bad usage or input",
    ),
    "import": (
        [
            "bundlectl import claude-code .mcp.json",
            "bundlectl import codex .codex/config.toml --dry-run",
            "bundlectl import server-json server.json --record",
        ],
        _EDITS + "; 5 --record: a server could not be asked (the import itself was written)",
    ),
    "codegen": (
        [
            "bundlectl codegen --agent reader --out gen",
            "bundlectl codegen -a reader --lang typescript --out ts",
            "bundlectl codegen -a reader --out gen --check   # in CI",
        ],
        _CHECKS,
    ),
    "server": (["bundlectl server files", "bundlectl server files --transport sse"], _READS),
    "lint": (
        [
            "bundlectl lint",
            "bundlectl lint --format sarif --output lint.sarif",
            "bundlectl lint registry/weather/1.0.0.yaml",
        ],
        "0 nothing at or above --fail-level; 1 findings at or above it; 2 bad usage",
    ),
}


def epilog(command: str) -> str | None:
    """The help's closing text for `command` (rich markup: brackets escaped)."""
    found = HELP.get(command)
    if found is None:
        return None
    examples, codes = found
    lines = "\n".join(f"  {line}" for line in examples).replace("[", "\\[")
    return f"Examples:\n{lines}\n\nExit codes: {codes}."
