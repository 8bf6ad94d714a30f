"""The file formats, as pydantic models. Every field is described so the JSON Schema documents
itself (`bundlectl schema`). Models validate shape and syntax only; references between objects
(unknown parents, unknown bundles) are checked where the whole picture is known.
"""

from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from bundlectl.config.fields import (
    EnvVarName,
    Expandable,
    Name,
    RequirementStr,
    RuleEntry,
    StrictModel,
    VersionStr,
    approver_only,
    empty_dict,
    empty_list,
)
from bundlectl.config.hosts import valid_pattern
from bundlectl.config.settings import (
    GatewaySettings,
    LimitRule,
    LintSettings,
    PolicySettings,
    PolicyTest,
    PrivacySettings,
    RegistryEntry,
    StateSettings,
)


class ToolSpec(StrictModel):
    """A tool a server declares, for offline lint, show, search and policy checks."""

    name: str = Field(min_length=1, description="The tool's name exactly as the server lists it.")
    title: str | None = Field(
        default=None, description="Human-readable title, if the server has one."
    )
    description: str = Field(default="", description="What the tool does (the server's text).")
    annotations: dict[str, Any] = Field(
        default_factory=empty_dict,
        description="MCP tool annotations (readOnlyHint, destructiveHint, idempotentHint, ...).",
    )
    input_schema: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object"},
        description="JSON Schema of the tool's arguments (the server's inputSchema).",
    )
    output_schema: dict[str, Any] | None = Field(
        default=None, description="JSON Schema of structured results (outputSchema), if any."
    )


Transport = Literal["stdio", "sse", "streamable-http"]


MEMORY = r"^[1-9][0-9]*[KMG]$"


class SandboxSpec(StrictModel):
    """A stdio server's sandbox (policy.sandbox: on or required): the system and the project
    read-only, the user's home and other processes hidden, a private /tmp, no network, no
    capabilities, limits on memory, CPU time and processes — widened only by what is declared
    here."""

    read: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=empty_list,
        description="More paths it may read (relative to the project root, or ~/...: the home "
        "is hidden otherwise).",
    )
    write: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=empty_list,
        description="Paths it may write (relative to the project root, or ~/...); the "
        "project's governed files (bundlectl.*, the clients' configs) stay read-only.",
    )
    network: Literal["none", "host"] | list[Annotated[str, Field(min_length=1)]] = Field(
        default="none",
        description="none: no network at all (not even loopback); host: the machine's network, "
        "unfiltered; a list of hosts (api.github.com, *.githubusercontent.com:443, "
        "127.0.0.1:8080): those alone, through bundlectl's egress proxy (HTTPS_PROXY), every "
        "other refused and audited (egress-denied). A host without a port: 443 and 80.",
    )
    memory: str = Field(
        default="2G",
        pattern=MEMORY,
        description="The most memory its processes may allocate each (512M, 2G).",
    )
    cpu_seconds: int | None = Field(
        default=None, ge=1, description="The CPU time each of its processes may use, if bounded."
    )
    processes: int = Field(
        default=256,
        ge=1,
        le=100_000,
        description="How many processes it may run at once, itself included (a fork bomb ends "
        "the server, not the machine; Linux, where a pids cgroup can be made).",
    )
    off: bool = Field(default=False, description="Run it unsandboxed (needs a reason).")
    reason: str | None = Field(
        default=None, min_length=1, description="Why it runs unsandboxed (with off: true)."
    )

    @field_validator("network")
    @classmethod
    def _hosts(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, list):
            for host in value:
                why = valid_pattern(host)
                if why is not None:
                    raise ValueError(f"{host!r}: {why}")
        return value

    @model_validator(mode="after")
    def _reasoned(self) -> "SandboxSpec":
        if self.off and not self.reason:
            raise ValueError("sandbox off needs a reason: say why this server runs unsandboxed")
        return self


class TokenExchange(StrictModel):
    """Calls on behalf of the person at the gateway (RFC 8693 token exchange): `serve` over
    HTTP trades the caller's verified identity token, at its issuer's token endpoint, for one
    scoped to this server, and the server sees the person."""

    audience: str = Field(
        min_length=1,
        description="The `audience` asked for: the server, as its tokens name it "
        "(e.g. https://mcp.tracker.example).",
    )
    scopes: list[str] = Field(
        default_factory=empty_list, description="The scopes to ask for (default: none named)."
    )


class ServerAuth(StrictModel):
    """How bundlectl signs in to a remote server with OAuth (docs/team.md): absent, everything is
    discovered from the server's 401 and the client registers itself (dynamic registration).
    With `exchange`, each call carries a token made for its caller (`serve` over HTTP with
    `gateway.auth.issuers`); client_id and client_secret are then the gateway's client at the
    caller's issuer."""

    type: Literal["oauth"] = Field(default="oauth", description="oauth (the only kind yet).")
    grant: Literal["authorization_code", "client_credentials"] = Field(
        default="authorization_code",
        description="authorization_code: a person signs in (`bundlectl auth login`); "
        "client_credentials: unattended, with client_id and client_secret (CI, services).",
    )
    client_id: str | None = Field(
        default=None, min_length=1, description="A client id registered with the server's owner."
    )
    client_secret: Expandable | None = Field(
        default=None, description="Its secret, as a ${VAR} reference (never written literally)."
    )
    token_endpoint_auth_method: (
        Literal["client_secret_basic", "client_secret_post", "none"] | None
    ) = Field(
        default=None,
        description="How the secret is sent to the token endpoint (default: basic with a "
        "secret, none without).",
    )
    scopes: list[str] = Field(
        default_factory=empty_list,
        description="The scopes to ask for (default: what the server names).",
    )
    client_metadata_url: str | None = Field(
        default=None,
        pattern=r"^https://[^/\s]+/\S+$",
        description="The https URL of a Client ID Metadata Document you publish: with an "
        "authorization server that supports them, it is the client id (no registration); "
        "else bundlectl registers itself as without it.",
    )

    exchange: TokenExchange | None = Field(
        default=None,
        description="Exchange the caller's identity token for one scoped to this server, per "
        "person and call (RFC 8693; `serve` over HTTP with gateway.auth.issuers).",
    )
    per_person: bool = Field(
        default=False,
        description="Each person signs in to this server themselves (its own authorization "
        "server): `serve` over HTTP answers a person's first call with a link to sign in "
        "(an MCP URL-mode elicitation), keeps their tokens apart from everyone else's and "
        "sends their calls with them. Needs gateway.auth.issuers with a client_id, to check "
        "who opens the link.",
    )

    @model_validator(mode="after")
    def _credentials(self) -> "ServerAuth":
        if self.grant == "client_credentials" and not (self.client_id and self.client_secret):
            raise ValueError("grant client_credentials needs client_id and client_secret")
        if self.per_person and (self.exchange is not None or self.grant != "authorization_code"):
            raise ValueError(
                "per_person is a person's own sign-in (authorization_code): not with exchange "
                "or client_credentials"
            )
        if self.exchange is not None and not self.client_id:
            raise ValueError(
                "exchange needs client_id: the gateway's client at the caller's issuer, which "
                "the exchanged token names as the actor (act)"
            )
        return self


class ServerSpec(StrictModel):
    """How to start or reach one MCP server, and the tools it declares."""

    description: str = Field(default="", description="What the server is for.")
    transport: Transport = Field(default="stdio", description="stdio, sse or streamable-http.")
    command: Expandable | None = Field(default=None, description="stdio: the executable to run.")
    args: list[Expandable] = Field(
        default_factory=empty_list, description="stdio: arguments; `${VAR}` is expanded at start."
    )
    env: dict[EnvVarName, Expandable] = Field(
        default_factory=empty_dict,
        description="stdio: environment for the server; values are `${VAR}` references, "
        "expanded only when the server starts.",
    )
    cwd: str | None = Field(
        default=None, description="stdio: working directory (relative to the project root)."
    )
    url: Expandable | None = Field(
        default=None, description="sse/streamable-http: the endpoint URL."
    )
    headers: dict[str, Expandable] = Field(
        default_factory=empty_dict,
        description="sse/streamable-http: HTTP headers; `${VAR}` expanded.",
    )
    auth: ServerAuth | None = Field(
        default=None,
        description="sse/streamable-http: OAuth settings (`bundlectl auth login`); absent: "
        "discovered from the server's 401.",
    )
    timeout: int = Field(default=60, ge=1, le=3600, description="Call timeout in seconds.")
    concurrency: int = Field(
        default=1,
        ge=1,
        le=64,
        description="`serve`: calls this server may run at once (default one at a time).",
    )
    max_message_mb: int = Field(
        default=128,
        ge=1,
        le=4096,
        description="The largest message (a tool result, a listing) taken from this server, in "
        "MiB; a larger one fails the call and the server is started afresh (stdio).",
    )
    watch: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=empty_list,
        description="stdio, `serve`: files or folders (relative to the project root) whose "
        "change restarts the server before its next call, as Roo's `watchPaths`.",
    )
    share: bool = Field(
        default=False,
        description="stdio, `serve`: one process for every agent that uses this server, instead "
        "of one per agent. Only for a stateless server: what it sends outside a call (a late log "
        "message) could then reach another agent's call.",
    )
    sandbox: SandboxSpec | None = Field(
        default=None,
        description="stdio: what the server may reach in its sandbox (policy.sandbox); absent: "
        "the project read-only, no network, the default limits.",
    )
    disabled: bool = Field(default=False, description="Keep the entry but never start it.")
    tools: list[ToolSpec] = Field(
        default_factory=empty_list,
        description="The declared tool catalog (what the server exposes).",
    )

    @model_validator(mode="after")
    def _fits_transport(self) -> "ServerSpec":
        if self.transport == "stdio":
            if not self.command and self.url:
                raise ValueError(
                    "a server given a 'url' needs 'transport: streamable-http', or 'sse' for an "
                    "old SSE endpoint; without 'transport' it is a stdio server, which needs "
                    "a 'command'"
                )
            if not self.command:
                raise ValueError("a stdio server needs a 'command'")
            if self.url or self.headers:
                raise ValueError("'url' and 'headers' are for sse/streamable-http servers")
        else:
            if not self.url:
                raise ValueError(f"a {self.transport} server needs a 'url'")
            if self.command or self.args or self.env or self.cwd or self.watch:
                raise ValueError(
                    f"'command', 'args', 'env', 'cwd' and 'watch' are for stdio servers, "
                    f"not {self.transport}"
                )
        names = [tool.name for tool in self.tools]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"tools declared twice: {', '.join(dupes)}")
        return self


class AgentRules(StrictModel):
    """What one agent may call. deny beats ask beats allow."""

    description: str = Field(default="", description="What the agent does.")
    extends: list[Name] = Field(
        default_factory=empty_list,
        description="Agents whose allow/ask/deny rules this one inherits.",
    )
    allow: list[RuleEntry] = Field(
        default_factory=empty_list, description="Tools the agent may call."
    )
    ask: list[RuleEntry] = Field(
        default_factory=empty_list, description="Tools that need a human's confirmation per call."
    )
    deny: list[RuleEntry] = Field(
        default_factory=empty_list,
        description="Tools the agent may never call (cannot be lifted).",
    )
    match: dict[str, str | list[str]] | None = Field(
        default=None,
        description="`serve` over HTTP with `gateway.auth.issuers`: the claims of a verified "
        "access token (JWT) that identify this agent, each a glob or a list of globs (a list "
        "claim such as groups matches when any of its values does); all must match. `email` "
        "fits only when the token says `email_verified: true`. A glob with an `@`, in any "
        "claim, fits only an address with one `@` and the glob's domain: `*@acme.example` "
        "fits no domain but exactly acme.example.",
    )
    token: Expandable | None = Field(
        default=None,
        description="`serve` over HTTP: the bearer token that identifies this agent; "
        "a ${VAR} reference (never a literal).",
    )

    @field_validator("allow", "deny")
    @classmethod
    def _asks_no_one(cls, entries: list[Any], info: ValidationInfo) -> list[Any]:
        return approver_only(entries, str(info.field_name))


class EnvInput(StrictModel):
    """An input a bundle needs from the user's environment."""

    description: str = Field(default="", description="What the value is and where to get it.")
    secret: bool = Field(default=False, description="Never print, lock or log the value.")
    required: bool = Field(
        default=False, description="The bundle's servers cannot work without it."
    )
    default: str | None = Field(default=None, description="Value used when the variable is unset.")


class BundleManifest(StrictModel):
    """A published, immutable bundle version: `registry/<name>/<version>.yaml`."""

    name: Name
    version: VersionStr
    description: str = Field(default="", description="One line on what the bundle gives an agent.")
    requires: list[RequirementStr] = Field(
        default_factory=empty_list,
        description="Other bundles this one needs, with version specifiers.",
    )
    env: dict[EnvVarName, EnvInput] = Field(
        default_factory=empty_dict, description="Inputs the bundle needs from the environment."
    )
    servers: dict[Name, ServerSpec] = Field(
        default_factory=empty_dict, description="The MCP servers the bundle provides, by name."
    )
    agents: dict[Name, AgentRules] = Field(
        default_factory=empty_dict,
        description="Agent defaults the bundle suggests; the project's own entries win.",
    )


class ProjectConfig(StrictModel):
    """`bundlectl.yaml`: the bundles a project uses, its own servers, and its agents' policy."""

    version: Literal[1] = Field(description="Format version of this file; always 1.")
    registries: list[RegistryEntry] = Field(
        default_factory=empty_list,
        description="Project registries: folders of manifests, relative to this file, "
        "https:// URLs of a static index (`bundlectl registry build`; plain http:// to "
        "127.0.0.1, [::1] or localhost only), or oci://HOST/REPOSITORY "
        "references of an OCI registry (`bundlectl registry push`); searched in order, before "
        "the user and built-in registries.",
    )
    bundles: list[RequirementStr] = Field(
        default_factory=empty_list,
        description="Bundles to install, with optional version specifiers.",
    )
    servers: dict[Name, ServerSpec] = Field(
        default_factory=empty_dict,
        description="The project's own servers; they win over bundle servers.",
    )
    agents: dict[Name, AgentRules] = Field(
        default_factory=empty_dict, description="Per-agent tool policy."
    )
    policy: PolicySettings = Field(
        default_factory=PolicySettings, description="Project-wide policy settings."
    )
    tests: list[PolicyTest] = Field(
        default_factory=empty_list, description="Policy expectations that `bundlectl lint` checks."
    )
    lint: LintSettings = Field(default_factory=LintSettings, description="Lint settings.")
    privacy: PrivacySettings = Field(
        default_factory=PrivacySettings,
        description="Tokenization of personal data (docs/codemode.md).",
    )
    state: StateSettings | None = Field(
        default=None,
        description="The state store for approvals and quotas (absent: SQLite on this machine).",
    )
    limits: list[LimitRule] = Field(
        default_factory=empty_list,
        description="Quotas: calls per agent and window, by tool pattern or annotation class.",
    )
    gateway: GatewaySettings = Field(
        default_factory=GatewaySettings, description="How `bundlectl serve` names what it offers."
    )


class LockedBundle(StrictModel):
    """One resolved bundle in the lock."""

    version: str = Field(description="The exact version chosen.")
    source: str = Field(
        description="The registry it came from (builtin, user, a project path, or the URL of a "
        "remote registry)."
    )
    digest: str = Field(description="sha256 of the manifest file.")
    requires: list[str] = Field(
        default_factory=empty_list, description="Its requirements, as written."
    )


class LockedServer(StrictModel):
    """One merged server in the lock."""

    bundle: str | None = Field(description="The bundle that provides it; null for project servers.")
    transport: Transport = Field(description="Its transport.")
    digest: str = Field(description="sha256 of its configuration (with `${VAR}` references).")
    tools: dict[str, str] = Field(
        default_factory=empty_dict,
        description="sha256 of each declared tool definition, by tool name.",
    )


class LockFile(StrictModel):
    """`bundlectl.lock`: what the config resolved to. Generated; never edit by hand."""

    format_version: Literal[1] = Field(description="Format version of the lock; always 1.")
    inputs_digest: str = Field(
        description="sha256 of the config parts resolution depends on (drift detection)."
    )
    policy_digest: str | None = Field(
        default=None,
        description="sha256 of the effective policy (every agent's rules after extends, bundle "
        "agent defaults and policy.*, and who may act as each agent: `identities`); audit "
        "records carry it. Absent in locks written before bundlectl recorded the policy.",
    )
    agents: dict[str, str] = Field(
        default_factory=empty_dict,
        description="sha256 of each agent's effective allow/ask/deny rules, by agent name.",
    )
    identities: dict[str, str] = Field(
        default_factory=empty_dict,
        description="sha256 of who may act as each agent (its match: and its token's "
        "reference, never a value), by agent name, and of gateway.auth; part of the policy "
        "digest.",
    )
    bundles: dict[str, LockedBundle] = Field(
        default_factory=empty_dict, description="Resolved bundles by name."
    )
    servers: dict[str, LockedServer] = Field(
        default_factory=empty_dict, description="Merged servers by name."
    )
