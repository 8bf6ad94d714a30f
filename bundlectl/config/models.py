"""The file formats, as pydantic models. Every field is described so the JSON Schema documents
itself (`bundlectl schema`). Models validate shape and syntax only; references between objects
(unknown parents, unknown bundles) are checked where the whole picture is known.
"""

import re
from typing import Annotated, Any, Literal

from packaging.version import InvalidVersion, Version
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from bundlectl.config.expand import malformed_reference
from bundlectl.config.requirements import NAME_HELP, NAME_RE, parse_requirement

Name = Annotated[str, Field(pattern=NAME_RE, description=f"A name: {NAME_HELP}.")]
EnvVarName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]

# Glob syntax we refuse, so a rule never means something other than what it says.
_BAD_PATTERN = re.compile(r"[\[\]{}\\\s]|\*\*")


def check_rule(rule: str) -> str:
    """A rule is `server.tool` or a bare tool pattern, with `*` and `?` as the only wildcards."""
    if not rule:
        raise PydanticCustomError("unsupported_pattern", "empty rule")
    bad = _BAD_PATTERN.search(rule)
    if bad:
        found = "'**'" if bad.group() == "**" else repr(bad.group())
        raise PydanticCustomError(
            "unsupported_pattern",
            f"unsupported pattern {rule!r}: {found} is not allowed; only '*' and '?' are wildcards",
        )
    server, dot, tool = rule.partition(".")
    if dot and (not server or not tool):
        raise PydanticCustomError(
            "unsupported_pattern", f"rule {rule!r} has an empty server or tool part"
        )
    return rule


Rule = Annotated[
    str,
    AfterValidator(check_rule),
    Field(
        description="`server.tool` (split at the first '.') or a bare tool name; "
        "'*' and '?' are the only wildcards."
    ),
]


class ConditionalRule(BaseModel):
    """A rule that covers only the calls whose arguments meet its conditions (SPEC 10)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    tool: Rule
    args: dict[str, Any] = Field(
        default_factory=dict,
        description="Argument (a key, a dotted path or a JSON pointer) → matcher: a value or a "
        "list of alternatives (strings are globs), {glob: }, {re: }, {path: } (a ** glob after "
        "normalisation), {min: , max: }, {present: false}, {not: MATCHER}. All must hold.",
    )
    when: str | None = Field(
        default=None,
        description="A CEL expression over args, agent, server and tool that must be true.",
    )
    _condition: Any = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _compiles(self) -> "ConditionalRule":
        from bundlectl.policy.conditions import ConditionError, compile_condition  # noqa: PLC0415

        if not self.args and self.when is None:
            raise ValueError("a rule mapping needs args: or when: (else write the pattern alone)")
        try:
            self._condition = compile_condition(self.args, self.when)
        except ConditionError as exc:
            raise ValueError(str(exc)) from None
        return self

    @property
    def condition(self) -> Any:
        return self._condition


RuleEntry = Annotated[
    Annotated[Rule, Tag("pattern")] | Annotated[ConditionalRule, Tag("conditional")],
    Discriminator(
        lambda value: "conditional" if isinstance(value, dict | ConditionalRule) else "pattern"
    ),
    Field(
        description="A `server.tool` pattern, or {tool: PATTERN, args: {...}, when: CEL} for "
        "the calls whose arguments meet the conditions."
    ),
]


def pattern_of(entry: str | ConditionalRule) -> str:
    """The tool pattern of a rule entry."""
    return entry if isinstance(entry, str) else entry.tool


def rule_data(entry: str | ConditionalRule) -> Any:
    """A rule entry as plain data (JSON output)."""
    return entry if isinstance(entry, str) else entry.model_dump(exclude_defaults=True)


def check_version(value: str) -> str:
    try:
        Version(value)
    except InvalidVersion:
        raise ValueError(f"{value!r} is not a PEP 440 version (for example 1.2.0)") from None
    return value


def check_requirement(value: str) -> str:
    try:
        parse_requirement(value)
    except ValueError as exc:
        kind = "invalid_name" if "bundle name" in str(exc) else "invalid_requirement"
        raise PydanticCustomError(kind, str(exc).replace("{", "{{").replace("}", "}}")) from None
    return value


VersionStr = Annotated[
    str, AfterValidator(check_version), Field(description="A PEP 440 version, e.g. 1.2.0.")
]
RequirementStr = Annotated[
    str,
    AfterValidator(check_requirement),
    Field(description="A bundle name with an optional PEP 440 specifier, e.g. `github>=1,<2`."),
]


def check_references(value: str) -> str:
    """Every `${` starts a well-formed `${NAME}` or `${NAME:-default}`."""
    problem = malformed_reference(value)
    if problem is not None:
        raise PydanticCustomError("malformed_reference", "{problem}", {"problem": problem})
    return value


Expandable = Annotated[
    str,
    AfterValidator(check_references),
    Field(
        description="Text in which `${VAR}` and `${VAR:-default}` are expanded at start.",
        # For editors; the validator above gives the precise message.
        json_schema_extra={
            "pattern": r"^(?:[^$]|\$(?!\{)|\$\{[A-Za-z_][A-Za-z0-9_]*(?::-[^}]*)?\})*$"
        },
    ),
]


def _empty_list() -> list[Any]:
    """`default_factory=list`, as a Python function: for a builtin, pydantic reads the signature
    from its text form with the tokenizer (~0.2 ms for each of 30 fields on every start)."""
    return []


def _empty_dict() -> dict[str, Any]:
    """`default_factory=dict`, for the same reason as `_empty_list`."""
    return {}


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class ToolSpec(StrictModel):
    """A tool a server declares, for offline lint, show, search and policy checks."""

    name: str = Field(min_length=1, description="The tool's name exactly as the server lists it.")
    title: str | None = Field(
        default=None, description="Human-readable title, if the server has one."
    )
    description: str = Field(default="", description="What the tool does (the server's text).")
    annotations: dict[str, Any] = Field(
        default_factory=_empty_dict,
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


class ServerAuth(StrictModel):
    """How bundlectl signs in to a remote server with OAuth (SPEC 12): absent, everything is
    discovered from the server's 401 and the client registers itself (dynamic registration)."""

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
        default_factory=_empty_list,
        description="The scopes to ask for (default: what the server names).",
    )

    @model_validator(mode="after")
    def _credentials(self) -> "ServerAuth":
        if self.grant == "client_credentials" and not (self.client_id and self.client_secret):
            raise ValueError("grant client_credentials needs client_id and client_secret")
        return self


class ServerSpec(StrictModel):
    """How to start or reach one MCP server, and the tools it declares."""

    description: str = Field(default="", description="What the server is for.")
    transport: Transport = Field(default="stdio", description="stdio, sse or streamable-http.")
    command: Expandable | None = Field(default=None, description="stdio: the executable to run.")
    args: list[Expandable] = Field(
        default_factory=_empty_list, description="stdio: arguments; `${VAR}` is expanded at start."
    )
    env: dict[EnvVarName, Expandable] = Field(
        default_factory=_empty_dict,
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
        default_factory=_empty_dict,
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
        default_factory=_empty_list,
        description="stdio, `serve`: files or folders (relative to the project root) whose "
        "change restarts the server before its next call, as Roo's `watchPaths`.",
    )
    share: bool = Field(
        default=False,
        description="stdio, `serve`: one process for every agent that uses this server, instead "
        "of one per agent. Only for a stateless server: what it sends outside a call (a late log "
        "message) could then reach another agent's call.",
    )
    disabled: bool = Field(default=False, description="Keep the entry but never start it.")
    tools: list[ToolSpec] = Field(
        default_factory=_empty_list,
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
        default_factory=_empty_list,
        description="Agents whose allow/ask/deny rules this one inherits.",
    )
    allow: list[RuleEntry] = Field(
        default_factory=_empty_list, description="Tools the agent may call."
    )
    ask: list[RuleEntry] = Field(
        default_factory=_empty_list, description="Tools that need a human's confirmation per call."
    )
    deny: list[RuleEntry] = Field(
        default_factory=_empty_list,
        description="Tools the agent may never call (cannot be lifted).",
    )
    match: dict[str, str | list[str]] | None = Field(
        default=None,
        description="`serve` over HTTP with `gateway.auth.issuers`: the claims of a verified "
        "access token (JWT) that identify this agent, each a glob or a list of globs (a list "
        "claim such as groups matches when any of its values does); all must match.",
    )
    token: Expandable | None = Field(
        default=None,
        description="`serve` over HTTP: the bearer token that identifies this agent; "
        "a ${VAR} reference (never a literal).",
    )


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
        default_factory=_empty_list,
        description="Other bundles this one needs, with version specifiers.",
    )
    env: dict[EnvVarName, EnvInput] = Field(
        default_factory=_empty_dict, description="Inputs the bundle needs from the environment."
    )
    servers: dict[Name, ServerSpec] = Field(
        default_factory=_empty_dict, description="The MCP servers the bundle provides, by name."
    )
    agents: dict[Name, AgentRules] = Field(
        default_factory=_empty_dict,
        description="Agent defaults the bundle suggests; the project's own entries win.",
    )


DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
Duration = Annotated[
    str,
    Field(
        pattern=r"^[1-9][0-9]{0,6}[smhd]$",
        description="A duration: a whole number and a unit, s, m, h or d (`15m`, `1h`).",
    ),
]


def seconds(duration: str) -> float:
    """A `Duration` in seconds."""
    return float(int(duration[:-1]) * DURATION_UNITS[duration[-1]])


class ApprovalNotify(StrictModel):
    """Where new approval requests are announced (SPEC 11)."""

    url: str = Field(
        pattern=r"^(https?://|\$\{)",
        description="The URL each new request is POSTed to, usually a ${VAR} reference.",
    )
    secret: str | None = Field(
        default=None,
        pattern=r"^\$\{[A-Za-z_][A-Za-z0-9_]*\}$",
        description="A ${VAR} reference to the key of the HMAC-SHA256 signature sent in "
        "`X-Bundlectl-Signature: sha256=<hex>` over `<timestamp>.<body>`.",
    )


class ApprovalSettings(StrictModel):
    """Out-of-band approvals (SPEC 11): a call an `ask` rule holds that no one can confirm where
    it was made waits for an approver (`bundlectl approvals approve ID`)."""

    ttl: Duration = Field(
        default="15m", description="How long a held call waits for an approver before it expires."
    )
    notify: ApprovalNotify | None = Field(
        default=None,
        description="POST each new request as JSON to a URL (a chat bot, a CI job), signed.",
    )


AgentPattern = Annotated[
    str,
    Field(
        pattern=r"^[A-Za-z0-9_.*?-]+$",
        description="An agent's name, or a pattern of names with `*` and `?`.",
    ),
]
ToolClass = Literal["read-only", "destructive", "open-world"]


class LimitRule(StrictModel):
    """A quota (SPEC 11): how many calls the matching agents may make of the matching tools per
    window. Each agent is counted on its own; a call over any limit is refused before anything
    starts."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True, populate_by_name=True)

    agents: list[AgentPattern] = Field(
        default_factory=lambda: ["*"], description="The agents it applies to (default: all)."
    )
    tools: list[Rule] = Field(
        default_factory=_empty_list, description="The `server.tool` patterns it counts."
    )
    tool_class: ToolClass | None = Field(
        default=None,
        alias="class",
        description="Count the tools of a class by their MCP annotations: read-only "
        "(readOnlyHint), destructive (not read-only, destructiveHint not false), open-world "
        "(openWorldHint not false); a tool without annotations counts as the unsafe side.",
    )
    calls: int = Field(ge=1, le=10_000_000, description="Calls allowed per window.")
    per: Duration = Field(
        description="The window: fixed, aligned to whole multiples of it since 1970 (UTC)."
    )

    @model_validator(mode="after")
    def _counts_something(self) -> "LimitRule":
        if not self.tools and self.tool_class is None:
            raise ValueError("a limit needs tools: [patterns] or class: (else it counts nothing)")
        return self


class StateSettings(StrictModel):
    """Where held calls, approvals and quota counters live (SPEC 11)."""

    url: str = Field(
        pattern=r"^(redis|rediss|unix)://",
        description="A Redis URL shared by every replica (`redis://host:6379/0`; a password "
        "as a ${VAR} reference: `redis://:${REDIS_PASSWORD}@host:6379`). Absent: SQLite in "
        "the user state folder, for one machine.",
    )


class PolicySettings(StrictModel):
    """Project-wide policy."""

    default: Literal["allow", "deny"] = Field(
        default="allow",
        description="What agents not listed under `agents` get (absent: allow, as agix does).",
    )
    deny: list[RuleEntry] = Field(
        default_factory=_empty_list,
        description="Denied for every agent, listed or not; cannot be lifted.",
    )
    pin_tools: bool = Field(
        default=False, description="Deny tools that the lock file does not record."
    )
    approvals: ApprovalSettings | None = Field(
        default=None,
        description="Hold calls an `ask` rule needs confirmed when no one can confirm them where "
        "they are made (CI, batch, code mode, a client that cannot elicit), for an approver; "
        "absent: such calls are refused.",
    )


class CallCase(BaseModel):
    """A call of a tool with these arguments, for a policy test of argument conditions."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    tool: str = Field(description="The server.tool called.")
    args: dict[str, Any] = Field(default_factory=dict, description="The call's arguments.")


CaseEntry = Annotated[
    Annotated[str, Tag("pattern")] | Annotated[CallCase, Tag("conditional")],
    Discriminator(lambda value: "conditional" if isinstance(value, dict | CallCase) else "pattern"),
    Field(
        description="A server.tool name, or {tool: server.tool, args: {...}}: a call with those "
        "arguments (the rules' conditions are checked)."
    ),
]


def tested_tool(entry: str | CallCase) -> str:
    """The server.tool of a test entry."""
    return entry if isinstance(entry, str) else entry.tool


class PolicyTest(StrictModel):
    """A declarative expectation about the policy, checked by lint."""

    agent: Name
    allow: list[CaseEntry] = Field(
        default_factory=_empty_list, description="Calls (tools) that must be allowed."
    )
    ask: list[CaseEntry] = Field(
        default_factory=_empty_list, description="Calls (tools) that must need asking."
    )
    deny: list[CaseEntry] = Field(
        default_factory=_empty_list, description="Calls (tools) that must be denied."
    )


Severity = Literal["error", "warning", "info"]


class LintSettings(StrictModel):
    """Project settings for `bundlectl lint`."""

    select: list[str] = Field(
        default_factory=_empty_list, description="Only these rule ids or prefixes."
    )
    ignore: list[str] = Field(
        default_factory=_empty_list, description="Rule ids or prefixes to skip."
    )
    severity: dict[str, Severity] = Field(
        default_factory=_empty_dict,
        description="Per-rule severity overrides, e.g. {BCL204: error}.",
    )


class NamedPattern(StrictModel):
    """A detector of your own: a name for its tokens and a regular expression."""

    name: Name
    pattern: str = Field(min_length=1, description="A Python regular expression.")

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from None
        return value


Detector = Literal["email", "phone", "credit_card", "iban", "ip_address"]
# A name picks a built-in detector, a mapping is a pattern of your own: one error, not both.
TokenizeItem = Annotated[
    Annotated[Detector, Tag("builtin")] | Annotated[NamedPattern, Tag("named")],
    Discriminator(lambda value: "builtin" if isinstance(value, str) else "named"),
]


class PrivacySettings(StrictModel):
    """Personal data kept out of the model's context by `serve` and the code-mode client."""

    tokenize: list[TokenizeItem] = Field(
        default_factory=_empty_list,
        description="Detectors whose matches in tool results become tokens like [EMAIL_1].",
    )
    detokenize: list[Rule] = Field(
        default_factory=_empty_list,
        description="Tools (server.tool patterns) whose arguments get the real values back.",
    )


IssuerUrl = Annotated[
    str,
    Field(
        pattern=r"^(https://[^\s/?#]+|http://(127\.0\.0\.1|localhost|\[::1\])(:[0-9]+)?)[^\s?#]*$",
        description="An https URL (http on a loopback address only).",
    ),
]


SigningAlgorithm = Literal["RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA"]


def _signing_default() -> list[SigningAlgorithm]:
    return ["RS256", "ES256"]


class TokenIssuer(StrictModel):
    """An OIDC provider or OAuth authorization server whose access tokens (JWTs) the gateway
    accepts (SPEC 12)."""

    issuer: IssuerUrl = Field(description="Its `iss`, exactly as the tokens carry it.")
    audience: list[str] = Field(
        min_length=1, description="The `aud` values a token must carry one of (the gateway)."
    )
    jwks_url: IssuerUrl | None = Field(
        default=None,
        description="Where its signing keys are (default: `jwks_uri` of its "
        "/.well-known/openid-configuration or oauth-authorization-server metadata).",
    )
    algorithms: list[SigningAlgorithm] = Field(
        default_factory=_signing_default,
        description="The signature algorithms accepted (never `none` or a shared secret).",
    )


class GatewayAuth(StrictModel):
    """Who may use the gateway besides the agents' static tokens."""

    issuers: list[TokenIssuer] = Field(
        default_factory=_empty_list,
        description="Token issuers; an agent is picked by its `match:` of the token's claims.",
    )
    resource: str | None = Field(
        default=None,
        description="The gateway's public URL of /mcp, for its RFC 9728 metadata (default: "
        "from the request's Host).",
    )
    unmatched: Literal["refuse", "default"] = Field(
        default="refuse",
        description="A valid token whose claims fit no agent's `match:`: refused (403), or "
        "served as agent `default`, which gets what `policy.default` gives an unlisted agent.",
    )


class GatewaySettings(StrictModel):
    """How `bundlectl serve` presents the servers to its clients."""

    names: Literal["prefixed", "bare"] = Field(
        default="prefixed",
        description="Direct mode's tool and prompt names: `prefixed` (`server__tool`, never "
        "ambiguous) or `bare` (the servers' own names; refused when two servers share one). "
        "`serve --names` overrides it.",
    )
    auth: GatewayAuth | None = Field(
        default=None,
        description="`serve` over HTTP: access tokens from identity providers (OIDC), "
        "verified and mapped to agents by their claims.",
    )


class ProjectConfig(StrictModel):
    """`bundlectl.yaml`: the bundles a project uses, its own servers, and its agents' policy."""

    version: Literal[1] = Field(description="Format version of this file; always 1.")
    registries: list[str] = Field(
        default_factory=_empty_list,
        description="Project registries: folders of manifests, relative to this file, or "
        "https:// URLs of a static index (`bundlectl registry build`); searched in order, "
        "before the user and built-in registries.",
    )
    bundles: list[RequirementStr] = Field(
        default_factory=_empty_list,
        description="Bundles to install, with optional version specifiers.",
    )
    servers: dict[Name, ServerSpec] = Field(
        default_factory=_empty_dict,
        description="The project's own servers; they win over bundle servers.",
    )
    agents: dict[Name, AgentRules] = Field(
        default_factory=_empty_dict, description="Per-agent tool policy."
    )
    policy: PolicySettings = Field(
        default_factory=PolicySettings, description="Project-wide policy settings."
    )
    tests: list[PolicyTest] = Field(
        default_factory=_empty_list, description="Policy expectations that `bundlectl lint` checks."
    )
    lint: LintSettings = Field(default_factory=LintSettings, description="Lint settings.")
    privacy: PrivacySettings = Field(
        default_factory=PrivacySettings, description="Tokenization of personal data (SPEC 9)."
    )
    state: StateSettings | None = Field(
        default=None,
        description="The state store for approvals and quotas (absent: SQLite on this machine).",
    )
    limits: list[LimitRule] = Field(
        default_factory=_empty_list,
        description="Quotas: calls per agent and window, by tool pattern or annotation class.",
    )
    gateway: GatewaySettings = Field(
        default_factory=GatewaySettings, description="How `bundlectl serve` names what it offers."
    )


class LockedBundle(StrictModel):
    """One resolved bundle in the lock."""

    version: str = Field(description="The exact version chosen.")
    source: str = Field(description="The registry it came from (builtin, user, or a project path).")
    digest: str = Field(description="sha256 of the manifest file.")
    requires: list[str] = Field(
        default_factory=_empty_list, description="Its requirements, as written."
    )


class LockedServer(StrictModel):
    """One merged server in the lock."""

    bundle: str | None = Field(description="The bundle that provides it; null for project servers.")
    transport: Transport = Field(description="Its transport.")
    digest: str = Field(description="sha256 of its configuration (with `${VAR}` references).")
    tools: dict[str, str] = Field(
        default_factory=_empty_dict,
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
        "agent defaults and policy.*); audit records carry it. Absent in locks written before "
        "bundlectl recorded the policy.",
    )
    agents: dict[str, str] = Field(
        default_factory=_empty_dict,
        description="sha256 of each agent's effective allow/ask/deny rules, by agent name.",
    )
    bundles: dict[str, LockedBundle] = Field(
        default_factory=_empty_dict, description="Resolved bundles by name."
    )
    servers: dict[str, LockedServer] = Field(
        default_factory=_empty_dict, description="Merged servers by name."
    )
