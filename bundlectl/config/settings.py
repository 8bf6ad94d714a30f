"""The settings sections of `bundlectl.yaml` beside servers and agents: `policy:` (approvals,
quotas, tests), `state:`, `lint:`, `privacy:` and `gateway:` (names, identities).
"""

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

from bundlectl.config.fields import (
    Name,
    PinnedTools,
    Rule,
    RuleEntry,
    StrictModel,
    approver_only,
    empty_dict,
    empty_list,
)
from bundlectl.config.urls import HINT as URL_HINT
from bundlectl.config.urls import url_problem
from bundlectl.errors import UsageError

DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


DURATION_RE = r"^[1-9][0-9]{0,6}[smhd]$"
Duration = Annotated[
    str,
    Field(
        pattern=DURATION_RE,
        description="A duration: a whole number and a unit, s, m, h or d (`15m`, `1h`).",
    ),
]


def seconds(duration: str) -> float:
    """A `Duration` in seconds."""
    return float(int(duration[:-1]) * DURATION_UNITS[duration[-1]])


def option_seconds(text: str, option: str, examples: str = "15m, 1h or 7d") -> float:
    """A duration given on the command line (`--for 8h`) in seconds; else a usage error
    naming the option."""
    if re.fullmatch(DURATION_RE, text) is None:
        raise UsageError(
            f"{option} {text!r} is not a duration",
            hint=f"a whole number and a unit, s, m, h or d, such as {examples}",
        )
    return seconds(text)


class ApprovalNotify(StrictModel):
    """Where new approval requests are announced (docs/team.md)."""

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


class ApproverSettings(StrictModel):
    """The people who may approve held calls, by the claims of their identity tokens."""

    match: dict[str, str | list[str]] = Field(
        min_length=1,
        description="Claims an approver's token must fit, as an agent's match: (a glob or a "
        "list of globs per claim; `email` only when verified).",
    )


class ApprovalSettings(StrictModel):
    """Out-of-band approvals (docs/team.md): a call an `ask` rule holds that no one can confirm
    where it was made waits for an approver (`bundlectl approvals approve ID`)."""

    ttl: Duration = Field(
        default="15m", description="How long a held call waits for an approver before it expires."
    )
    notify: ApprovalNotify | None = Field(
        default=None,
        description="POST each new request as JSON to a URL (a chat bot, a CI job), signed.",
    )
    hold: Duration = Field(
        default="2m",
        description="How long `serve` keeps a held call open for an approver when its client "
        "sent a progress token (progress notifications meanwhile); then, or without a token, "
        "the client gets the request's id to try again.",
    )
    approvers: ApproverSettings | None = Field(
        default=None,
        description="Who may decide, as people: the approvers' API of `serve` over HTTP takes "
        "an approver's own access token (a JWT of gateway.auth.issuers) whose claims fit "
        "this match:, and records who decided; nobody approves a call they made.",
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
    """A quota (docs/team.md): how many calls the matching agents may make of the matching tools per
    window. Each agent is counted on its own; a call over any limit is refused before anything
    starts."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True, populate_by_name=True)

    agents: list[AgentPattern] = Field(
        default_factory=lambda: ["*"], description="The agents it applies to (default: all)."
    )
    tools: list[Rule] = Field(
        default_factory=empty_list, description="The `server.tool` patterns it counts."
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
    """Where held calls, approvals and quota counters live (docs/team.md)."""

    url: str = Field(
        pattern=r"^(redis|rediss|unix)://",
        description="A Redis URL shared by every replica (`redis://host:6379/0`; a password "
        "as a ${VAR} reference: `redis://:${REDIS_PASSWORD}@host:6379`). Absent: SQLite in "
        "the user state folder, for one machine.",
    )


class ToolsOfClass(StrictModel):
    """The tools of an annotation class."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True, populate_by_name=True)

    tool_class: ToolClass = Field(
        alias="class",
        description="read-only (readOnlyHint), destructive (not read-only, destructiveHint not "
        "false, or a name such as delete_* without annotations), open-world (openWorldHint not "
        "false).",
    )


class Invariant(StrictModel):
    """A property the policy must have for every agent it names and every catalogued tool,
    proved by `bundlectl lint` (BCL220); exactly one of never, only, require, approve."""

    agents: list[AgentPattern] = Field(
        default_factory=lambda: ["*"],
        description="The listed agents it holds for (patterns; default: all).",
    )
    tools: list[Rule] | ToolsOfClass | None = Field(
        default=None,
        description="The tools `require` and `approve` speak of: server.tool patterns, or "
        "{class: destructive|read-only|open-world}.",
    )
    never: list[Rule] = Field(
        default_factory=empty_list,
        description="Tools none of the agents may call or be asked about (a grant with "
        "conditions counts: some calls would pass).",
    )
    only: list[Rule] = Field(
        default_factory=empty_list,
        description="The agents may call or be asked about these tools and no others.",
    )
    require: list[Literal["allow", "ask", "deny"]] = Field(
        default_factory=empty_list,
        description="Each of `tools` must be one of these for each agent (e.g. [ask, deny]: "
        "never allowed outright).",
    )
    approve: Literal["out-of-band"] | None = Field(
        default=None,
        description="Each of `tools` an agent may call needs an approver (an ask rule with "
        "approve: out-of-band), never an allow or an in-band ask.",
    )
    reason: str | None = Field(
        default=None, description="Why it must hold, shown with each breach."
    )

    @model_validator(mode="after")
    def _one_property(self) -> "Invariant":
        given = [k for k in ("never", "only", "require", "approve") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError(
                "an invariant says exactly one of never, only, require, approve (it says "
                f"{', '.join(given) or 'none'})"
            )
        if given[0] in ("require", "approve") and self.tools is None:
            raise ValueError(f"{given[0]} needs tools: patterns, or {{class: ...}}")
        return self


class PolicySettings(StrictModel):
    """Project-wide policy."""

    default: Literal["allow", "deny"] = Field(
        default="allow",
        description="What agents not listed under `agents` get (absent: allow).",
    )
    deny: list[RuleEntry] = Field(
        default_factory=empty_list,
        description="Denied for every agent, listed or not; cannot be lifted.",
    )
    pin_tools: bool = Field(
        default=False, description="Deny tools that the lock file does not record."
    )
    pins: PinnedTools = Field(
        default_factory=empty_dict,
        description="With pin_tools: live tool definitions a person reviewed after they changed "
        "(or a tool was renamed or moved): `server.tool: sha256:…` of the definition "
        "(description, input schema, annotations) approved (`bundlectl pins update` writes "
        "them from the approvals of this machine).",
    )
    approvals: ApprovalSettings | None = Field(
        default=None,
        description="Hold calls an `ask` rule needs confirmed when no one can confirm them where "
        "they are made (CI, batch, code mode, a client that cannot elicit), for an approver; "
        "absent: such calls are refused.",
    )
    sandbox: Literal["off", "on", "required"] | None = Field(
        default=None,
        description="Run local (stdio) servers in a kernel sandbox (Linux: bubblewrap): on (the "
        "default) — sandboxed where bubblewrap can make one, else a warning and unsandboxed; "
        "required — a server that cannot be sandboxed is not started; off — none. Absent: on, "
        "unless $BUNDLECTL_SANDBOX says otherwise for the machine (and off on macOS and "
        "Windows, which have no bubblewrap). Each server's profile: servers.NAME.sandbox.",
    )

    @property
    def sandbox_mode(self) -> str:
        """`sandbox` as the project means it, the same on every machine (`export`, `lint`,
        `policy diff`); where servers start, `mcpio.sandbox.mode_here` adds the machine's say."""
        return self.sandbox or "on"

    invariants: list[Invariant] = Field(
        default_factory=empty_list,
        description="Properties the policy must have, proved by lint over every agent and "
        "catalogued tool (BCL220): never, only, require, approve: out-of-band.",
    )

    @field_validator("deny")
    @classmethod
    def _asks_no_one(cls, entries: list[Any]) -> list[Any]:
        return approver_only(entries, "deny")


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
        default_factory=empty_list, description="Calls (tools) that must be allowed."
    )
    ask: list[CaseEntry] = Field(
        default_factory=empty_list, description="Calls (tools) that must need asking."
    )
    deny: list[CaseEntry] = Field(
        default_factory=empty_list, description="Calls (tools) that must be denied."
    )


Severity = Literal["error", "warning", "info"]


class LintSettings(StrictModel):
    """Project settings for `bundlectl lint`."""

    select: list[str] = Field(
        default_factory=empty_list, description="Only these rule ids or prefixes."
    )
    ignore: list[str] = Field(
        default_factory=empty_list, description="Rule ids or prefixes to skip."
    )
    severity: dict[str, Severity] = Field(
        default_factory=empty_dict,
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
        default_factory=empty_list,
        description="Detectors whose matches in tool results become tokens like [EMAIL_1].",
    )
    detokenize: list[Rule] = Field(
        default_factory=empty_list,
        description="Tools (server.tool patterns) whose arguments get the real values back.",
    )
    ttl: Duration = Field(
        default="24h",
        description="With a shared state store (state.url): how long an agent's token map is "
        "kept there after its last use (encrypted with BUNDLECTL_PRIVACY_KEY).",
    )


def fetchable(url: str) -> str:
    """A URL bundlectl may fetch from (`urls.url_problem`): https, or http to this machine."""
    why = url_problem(url)
    if why is not None:
        raise ValueError(f"{url!r} {why}; {URL_HINT}")
    return url


IssuerUrl = Annotated[
    str,
    Field(
        json_schema_extra={"format": "uri"},
        description="An https URL (plain http to 127.0.0.1, [::1] or localhost only; never "
        "with a user name or password).",
    ),
    AfterValidator(fetchable),
]


def _registry_entry(entry: str) -> str:
    """A `registries:` entry: a folder, an oci:// reference, or a URL the rule allows."""
    if "://" in entry and not entry.startswith("oci://"):
        fetchable(entry)
    return entry


RegistryEntry = Annotated[
    str,
    AfterValidator(_registry_entry),
    Field(
        description="A folder of manifests (relative to this file), an https:// index URL "
        "(plain http to this machine only), or an oci://HOST/REPOSITORY reference."
    ),
]


SigningAlgorithm = Literal["RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA"]


def _signing_default() -> list[SigningAlgorithm]:
    return ["RS256", "ES256"]


class TokenIssuer(StrictModel):
    """An OIDC provider or OAuth authorization server whose access tokens (JWTs) the gateway
    accepts (docs/gateway.md)."""

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
    client_id: str | None = Field(
        default=None,
        min_length=1,
        description="The gateway's OAuth client at this issuer: the approvers' page then signs "
        "people in through it (OpenID Connect authorization code with PKCE; register "
        "`<gateway>/approvals/callback` as its redirect URI).",
    )
    client_secret: str | None = Field(
        default=None,
        pattern=r"^\$\{[A-Za-z_][A-Za-z0-9_]*\}$",
        description="That client's secret, as a ${VAR} reference, for an issuer that makes the "
        "gateway a confidential client (sent with HTTP Basic); none: a public client (PKCE).",
    )


class GatewayAuth(StrictModel):
    """Who may use the gateway besides the agents' static tokens."""

    issuers: list[TokenIssuer] = Field(
        default_factory=empty_list,
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
