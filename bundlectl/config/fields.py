"""The building blocks of the config models: names, rules (a pattern, or one with argument
conditions), versions and requirements, `${VAR}`-expandable strings, and the strict base model.
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
    model_validator,
)
from pydantic_core import PydanticCustomError

from bundlectl.config.expand import malformed_reference
from bundlectl.config.requirements import NAME_HELP, NAME_RE, parse_requirement

Name = Annotated[str, Field(pattern=NAME_RE, description=f"A name: {NAME_HELP}.")]
# A reviewed definition of a tool (`policy.pins`, `bundlectl.local.yaml` pins): `server.tool`
# to the sha256 of its live definition (description, input schema, annotations).
PinnedTools = dict[
    Annotated[str, Field(pattern=r"^[^.\s]+\.[^\s]+$", description="server.tool")],
    Annotated[str, Field(pattern=r"^sha256:[0-9a-f]{64}$", description="sha256:<hex>")],
]


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
    """A rule that covers only the calls whose arguments meet its conditions (docs/policy.md)."""

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
    approve: Literal["out-of-band"] | None = Field(
        default=None,
        description="ask rules only: only an approver confirms these calls (`bundlectl "
        "approvals`, the approvers' page; needs policy.approvals) — never the caller's own "
        "terminal, --yes, the client's elicitation or a local always-allow.",
    )
    approvals: int = Field(
        default=1,
        ge=1,
        le=5,
        description="With approve: out-of-band, how many different people must approve a call "
        "(distinct subjects of their identity tokens) before it runs; a denial by any ends it.",
    )
    _condition: Any = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _compiles(self) -> "ConditionalRule":
        from bundlectl.policy.conditions import ConditionError, compile_condition  # noqa: PLC0415

        if self.approvals > 1 and self.approve is None:
            raise ValueError("approvals: counts approvers, and only approve: out-of-band has them")

        if not self.args and self.when is None:
            if self.approve is not None:
                return self  # a pattern whose calls only an approver confirms
            raise ValueError(
                "a rule mapping needs args:, when: or approve: (else write the pattern alone)"
            )
        try:
            self._condition = compile_condition(self.args, self.when)
        except ConditionError as exc:
            raise ValueError(str(exc)) from None
        return self

    @property
    def condition(self) -> Any:
        return self._condition  # None: approve: alone, no condition


RuleEntry = Annotated[
    Annotated[Rule, Tag("pattern")] | Annotated[ConditionalRule, Tag("conditional")],
    Discriminator(
        lambda value: "conditional" if isinstance(value, dict | ConditionalRule) else "pattern"
    ),
    Field(
        description="A `server.tool` pattern, or {tool: PATTERN, args: {...}, when: CEL} for "
        "the calls whose arguments meet the conditions (an ask rule may add approve: "
        "out-of-band)."
    ),
]


def pattern_of(entry: str | ConditionalRule) -> str:
    """The tool pattern of a rule entry."""
    return entry if isinstance(entry, str) else entry.tool


def approver_only(entries: list[str | ConditionalRule], effect: str) -> list[str | ConditionalRule]:
    """`approve: out-of-band` is an `ask` rule's alone: an allow or deny has no one to ask."""
    for index, entry in enumerate(entries):
        if not isinstance(entry, str) and entry.approve is not None:
            raise ValueError(
                f"rule {index + 1} ({entry.tool}): approve: is for ask rules; {effect} asks "
                "no one (move the rule under ask:)"
            )
    return entries


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


def empty_list() -> list[Any]:
    """`default_factory=list`, as a Python function: for a builtin, pydantic reads the signature
    from its text form with the tokenizer (~0.2 ms for each of 30 fields on every start)."""
    return []


def empty_dict() -> dict[str, Any]:
    """`default_factory=dict`, for the same reason as `empty_list`."""
    return {}


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
