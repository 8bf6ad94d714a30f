"""The lint rules: stable ids, names, default severities, rationale and fix hints."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Literal

from bundlectl.errors import Problem

Severity = Literal["error", "warning", "info"]
SEVERITY_RANK = {"info": 0, "warning": 1, "error": 2}


@dataclass(frozen=True)
class RuleInfo:
    """What a rule checks and what to do about it."""

    id: str
    name: str
    severity: Severity
    rationale: str
    hint: str
    security: float | None = None  # GitHub code scanning's security-severity (0-10)


def _rules(*rules: RuleInfo) -> dict[str, RuleInfo]:
    return {rule.id: rule for rule in rules}


RULES = _rules(
    RuleInfo(
        "BCL001",
        "yaml-syntax",
        "error",
        "The file cannot be parsed as YAML.",
        "Fix the YAML syntax at the reported position.",
    ),
    RuleInfo(
        "BCL002",
        "duplicate-key",
        "error",
        "A key appears twice in one mapping; YAML tools disagree on which one wins.",
        "Remove or merge one of the entries.",
    ),
    RuleInfo(
        "BCL003",
        "schema",
        "error",
        "The file does not follow its JSON Schema (unknown key, wrong type, bad value).",
        "See what the key takes in docs/config.md (or schemas/*.schema.json).",
    ),
    RuleInfo(
        "BCL004",
        "ambiguous-scalar",
        "warning",
        "An unquoted value that YAML reads differently than meant (1.10 as a number, "
        "no/on as booleans in YAML 1.1).",
        "Quote the value.",
    ),
    RuleInfo(
        "BCL005",
        "invalid-name",
        "error",
        "Server, agent and bundle names must match ^[a-z0-9][a-z0-9_-]{0,62}$.",
        "Use lowercase letters, digits, '-' and '_'.",
    ),
    RuleInfo(
        "BCL006",
        "invalid-tool-schema",
        "error",
        "A declared input or output schema is not a valid JSON Schema, so arguments cannot be "
        "checked against it.",
        "Copy the schema exactly as the server lists it (`bundlectl tools --live`).",
    ),
    RuleInfo(
        "BCL007",
        "merge-key",
        "warning",
        "A YAML merge key (`<<`) copies keys into a mapping from elsewhere: a reviewer of the "
        "mapping does not see them (`policy: {<<: *x}` can set `default: allow` out of sight).",
        "Write the keys out where they apply.",
        5.0,
    ),
    RuleInfo(
        "BCL101",
        "unknown-bundle",
        "error",
        "A requirement names no bundle in any registry.",
        "Fix the name, or publish the bundle with `bundlectl registry add`.",
    ),
    RuleInfo(
        "BCL102",
        "unsatisfiable",
        "error",
        "No version satisfies all the constraints on a bundle.",
        "Relax one of the listed constraints.",
    ),
    RuleInfo(
        "BCL103",
        "lock-drift",
        "error",
        "bundlectl.lock does not match bundlectl.yaml (missing, stale, or digests differ).",
        "Run `bundlectl lock` and commit the result.",
        5.0,
    ),
    RuleInfo(
        "BCL104",
        "unknown-server-in-rule",
        "error",
        "A rule names a server that is not configured: it can never match.",
        "Fix the server name or remove the rule.",
        4.0,
    ),
    RuleInfo(
        "BCL105",
        "rule-matches-nothing",
        "warning",
        "A rule matches no known tool: a typo, or a rule left behind.",
        "Fix the tool name or remove the rule.",
    ),
    RuleInfo(
        "BCL106",
        "ambiguous-bare-allow",
        "warning",
        "A bare allow rule (no server part) matches tools on more than one server.",
        "Qualify it as server.tool.",
        4.0,
    ),
    RuleInfo(
        "BCL107",
        "server-collision",
        "error",
        "Two bundles define the same server name differently.",
        "Define the server in bundlectl.yaml to choose one, or drop a bundle.",
    ),
    RuleInfo(
        "BCL108",
        "invalid-extends",
        "error",
        "An agent extends an unknown agent, or the extends chain is a cycle.",
        "Fix the parent's name or break the cycle.",
    ),
    RuleInfo(
        "BCL109",
        "missing-registry",
        "error",
        "A project registry listed under registries: does not exist, so its bundles cannot be "
        "found (a typo such as ./bundels).",
        "Create the folder or fix the path; it is relative to bundlectl.yaml.",
    ),
    RuleInfo(
        "BCL110",
        "registry-layout",
        "error",
        "A registry folder is not a valid bundle name, or a manifest file is not named by a "
        "PEP 440 version: its manifests silently drop out of the registry.",
        "Manifests live at <registry>/<name>/<version>.yaml.",
    ),
    RuleInfo(
        "BCL111",
        "gateway-name-clash",
        "error",
        "Two tools would have one name in `bundlectl serve`'s direct mode (with `gateway.names: "
        "bare`, two servers with a tool of the same name): `serve` refuses to start.",
        "Use `gateway.names: prefixed`, or disable one of the servers.",
    ),
    RuleInfo(
        "BCL112",
        "shared-server",
        "info",
        "A stdio server with `share: true` that several agents may use runs as one process for "
        "them all: what it sends outside a call (a late log message) can reach another agent's "
        "call in flight, which one process per agent (the default) rules out.",
        "Keep `share: true` for servers that hold no state and send nothing outside a call; "
        "otherwise remove it.",
    ),
    RuleInfo(
        "BCL201",
        "allow-overridden",
        "warning",
        "Everything an allow/ask rule matches is denied anyway: the rule has no effect.",
        "Remove the rule or the deny that covers it.",
    ),
    RuleInfo(
        "BCL202",
        "shadowed-rule",
        "info",
        "A rule is covered by another rule of the same effect.",
        "Remove the narrower rule.",
    ),
    RuleInfo(
        "BCL203",
        "permits-nothing",
        "warning",
        "An agent can call no tool at all.",
        "Add allow rules, or remove the agent.",
    ),
    RuleInfo(
        "BCL204",
        "broad-destructive-allow",
        "warning",
        "A wildcard allow covers destructive tools without asking a human.",
        "Allow the destructive tools explicitly, or list them under ask or deny.",
        7.0,
    ),
    RuleInfo(
        "BCL205",
        "default-allow",
        "warning",
        "Agents that are not listed get every tool (policy.default absent or allow).",
        "Set policy.default: deny.",
        6.0,
    ),
    RuleInfo(
        "BCL206",
        "unsupported-pattern",
        "error",
        "Only '*' and '?' are wildcards; other glob syntax is rejected.",
        "Rewrite the pattern with * and ? only.",
    ),
    RuleInfo(
        "BCL207",
        "wildcard-future-tools",
        "info",
        "A wildcard allow also grants tools that a server adds later.",
        "Consider policy.pin_tools: true, or list the tools.",
    ),
    RuleInfo(
        "BCL208",
        "case-mismatch",
        "warning",
        "A rule matches a tool only when case is ignored; matching is case-sensitive.",
        "Write the tool name with the server's exact case.",
    ),
    RuleInfo(
        "BCL209",
        "policy-test-failed",
        "error",
        "A policy expectation under tests: does not hold.",
        "Fix the policy, or the expectation.",
    ),
    RuleInfo(
        "BCL210",
        "detokenize-matches-nothing",
        "warning",
        "A privacy.detokenize pattern matches no declared tool: no tool gets the real values.",
        "Write the server.tool of a declared tool (see bundlectl tools).",
    ),
    RuleInfo(
        "BCL211",
        "condition-unknown-argument",
        "error",
        "A rule's argument condition names an argument that no tool the rule matches declares: "
        "an allow with it never holds, a deny never denies.",
        "Use the argument's name as the tool's input schema writes it (`bundlectl tools "
        "--detail full`).",
    ),
    RuleInfo(
        "BCL212",
        "deny-condition-on-optional-argument",
        "warning",
        "A deny or ask condition names an argument a call may omit and that has no default: "
        "a call that omits it is not caught by the rule.",
        "Add `{present: false}` as an alternative (`[main, {present: false}]`), or deny in a "
        "`when:` that treats a missing argument as a match.",
    ),
    RuleInfo(
        "BCL213",
        "condition-type-mismatch",
        "error",
        "A matcher cannot judge the argument's declared type (a glob on an integer, a range "
        "on a string, a literal of another type): an allow applies to no call, and a deny or "
        "ask holds for every call that has the argument.",
        "Write a matcher of the argument's type (numbers: {min:, max:}; strings: a glob, "
        "{re:} or {path:}).",
    ),
    RuleInfo(
        "BCL214",
        "condition-expression-error",
        "error",
        "A rule's `when:` expression fails for a call whose arguments have the tool's declared "
        "types (an operator or function CEL does not define for them, or an argument the tool "
        "does not have): at run time it fails closed on every such call.",
        "Convert explicitly (`int(args.n)`, `string(args.x)`), use the argument's declared "
        "name, and guard optional ones with `has(args.name)`.",
    ),
    RuleInfo(
        "BCL215",
        "limit-matches-nothing",
        "warning",
        "A `limits:` entry names agents none of which is listed, or tools none of which is "
        "declared: it counts no call (a typo that leaves the quota unenforced).",
        "Name listed agents (or `*`) and server.tool patterns of declared tools (see "
        "bundlectl tools).",
    ),
    RuleInfo(
        "BCL216",
        "local-rule",
        "info",
        "An allow rule in `bundlectl.local.yaml`, added on this machine by answering 'always "
        "allow': it lets the agent call without being asked, here only, and no review saw it.",
        "Move the rule into bundlectl.yaml's agents if the team agrees, or delete it from "
        "bundlectl.local.yaml.",
    ),
    RuleInfo(
        "BCL217",
        "match-fits-anyone",
        "warning",
        "An agent's `match:` fits every authenticated user of the gateway's issuers (each claim "
        "matched by `*`): anyone who can sign in may act as that agent.",
        "Match the people or clients meant: a group, a client_id, an exact `sub`.",
        7.0,
    ),
    RuleInfo(
        "BCL218",
        "matches-overlap",
        "warning",
        "Two agents' `match:` rules can fit the same token (no single-valued claim such as "
        "`sub` or `client_id` tells them apart; a token can carry several groups): the gateway "
        "refuses such a token, and which agent was meant is not written anywhere.",
        "Give the agents claims that exclude each other, e.g. different client_id or sub.",
        5.0,
    ),
    RuleInfo(
        "BCL219",
        "approver-is-agent",
        "warning",
        "The approvers' `match:` (policy.approvals.approvers) and an agent's can fit one token: "
        "the same credential then makes calls as the agent and decides on held calls, so an "
        "agent holding a person's token approves another agent's call.",
        "Tell them apart by a claim a token carries once (client_id, azp, sub) with different "
        "values for approvers and agents, so no token fits both.",
        5.0,
    ),
    RuleInfo(
        "BCL220",
        "invariant-broken",
        "error",
        "A property `policy.invariants` says the policy must have does not hold for an agent and "
        "a catalogued tool (checked exactly over the whole catalog; a grant with argument "
        "conditions counts as a grant).",
        "Change the rule it names (deny the tools, ask with approve: out-of-band), or the "
        "invariant if the team agrees it no longer holds.",
        8.0,
    ),
    RuleInfo(
        "BCL301",
        "plaintext-secret",
        "error",
        "A literal secret in env, args, headers, url or an agent's token; it would end up in git.",
        "Replace it with a ${VAR} reference and set the variable where the server runs.",
        9.0,
    ),
    RuleInfo(
        "BCL302",
        "missing-required-env",
        "warning",
        "A bundle's required input is not set in this environment and has no default "
        "(`lint --env` only: lint otherwise reads the project alone, the same on every "
        "machine).",
        "Export the variable before starting the servers.",
    ),
    RuleInfo(
        "BCL401",
        "unpinned-package",
        "warning",
        "npx/uvx/pipx/docker runs a package without an exact version or digest.",
        "Pin the version: pkg@1.2.3, pkg==1.2.3, image:1.2.3 or image@sha256:...",
        5.0,
    ),
    RuleInfo(
        "BCL402",
        "shadowed-builtin-bundle",
        "warning",
        "A project or user registry has a bundle named as a built-in one, and it is used instead "
        "of the built-in bundle (the lock shows only a different source).",
        "Rename the bundle in your registry, or remove it to use the built-in one.",
        7.0,
    ),
    RuleInfo(
        "BCL403",
        "server-replaces-bundle-server",
        "warning",
        "A server of bundlectl.yaml has the name of a server a bundle provides, and replaces it "
        "for every agent (an imported client file can do this unnoticed).",
        "Rename the project's server, or remove it to use the bundle's.",
        7.0,
    ),
    RuleInfo(
        "BCL404",
        "launcher-runs-other-code",
        "error",
        "npx or uvx is given an option that runs a command of its own (`--call`, a shell, "
        "node's options) or takes code from elsewhere (`--package`, `--with`, `--from`, another "
        "registry or index, a settings file); options are read by their arity and one-letter "
        "clusters (`-yc`) letter by letter, up to the package.",
        "Remove the option; run the package itself, pinned.",
        9.0,
    ),
    RuleInfo(
        "BCL405",
        "code-loading-variable",
        "error",
        "A server's env sets a variable that makes it load or run other code: the dynamic "
        "linker's (LD_*, DYLD_*), an interpreter's paths and start-up hooks (PYTHONPATH, "
        "NODE_OPTIONS, PERL5OPT, RUBYOPT, JAVA_TOOL_OPTIONS, DOTNET_STARTUP_HOOKS, ...), a "
        "launcher's settings (NPM_CONFIG_*, UV_*, PIP_*), git's (GIT_CONFIG*, GIT_SSH_COMMAND, "
        "...), PATH, or a command a program runs (EDITOR, PAGER, BROWSER).",
        "Remove the variable; install what the server needs instead.",
        9.0,
    ),
    RuleInfo(
        "BCL406",
        "container-widens-access",
        "error",
        "`docker run` gives the container more of the host: --privileged, --cap-add, --device, "
        "a host namespace (--pid/--network host), an unconfined profile, a bind of / (however "
        "spelled: `/./`, `//`), of the home folder or of a container runtime's socket, or a "
        "variable that makes its server load other code (`-e LD_PRELOAD=...`).",
        "Remove the option; bind only the folder the server needs, read-only where it can be; "
        "set no variable that loads code.",
        9.0,
    ),
    RuleInfo(
        "BCL407",
        "sandbox-widened",
        "warning",
        "A local server's sandbox is widened past the default: `network: host` (every host, "
        "unfiltered), a host list that opens a whole top-level domain (`*.com`), or "
        "`off: true` (no sandbox at all, with the reason given).",
        "Keep the server without network or name the hosts it needs, or run it unsandboxed "
        "only for the reason given; review the widening like a grant.",
        6.0,
    ),
    RuleInfo(
        "BCL408",
        "sandbox-write-unneeded",
        "warning",
        "A local server's `sandbox.write` opens a folder no call its agents may make could write "
        "in: every rule granting one of its writing tools bounds the path elsewhere, or none "
        "grants one (its catalog says which tools only read).",
        "Remove the entry (the sandbox already opens where the rules bound the paths), or widen "
        "the rule that needs it.",
        5.0,
    ),
    RuleInfo(
        "BCL409",
        "sandbox-declared-later",
        "warning",
        "A bundle's local server runs in the sandbox as the chosen version leaves it — no "
        "network, nothing of the home — while a newer version of the bundle declares what it "
        "needs (`servers.NAME.sandbox`): versions published before servers ran sandboxed by "
        "default.",
        "Move to the newer version (`bundlectl lock --upgrade NAME`, widening the requirement "
        "if it excludes it), or say `policy.sandbox: off` for the project.",
        4.0,
    ),
    RuleInfo(
        "BCL601",
        "hidden-text",
        "error",
        "A tool's name, description or parameter holds characters a person cannot see (Unicode "
        "tags, zero-width, bidi controls, other format characters): the model reads text the "
        "reviewer never saw.",
        "Remove them from the definition, or ask the server's author why they are there.",
        9.0,
    ),
    RuleInfo(
        "BCL602",
        "mixed-script-name",
        "error",
        "A tool or parameter name mixes letters of two scripts (a Cyrillic a, U+0430, in "
        "read_file): it can pass for another tool in a listing and in a policy review.",
        "Use the name in one script; a rule written for the real name does not match it.",
        8.0,
    ),
    RuleInfo(
        "BCL603",
        "model-instructions",
        "warning",
        "A description addresses the model instead of describing the tool — to ignore its "
        "instructions, keep things from the user, act around other tools, read or pass secrets "
        "(the message gives the confidence, from the weights of the phrases found).",
        "Read the description as the model would; do not list the tool (deny it, or lint "
        "--strict in CI) until its author explains.",
        8.0,
    ),
    RuleInfo(
        "BCL604",
        "shadows-tools",
        "warning",
        "A description speaks of another server's tools: a server can steer how the model uses "
        'tools it does not own ("when sending email, always bcc ...").',
        "A tool describes itself; ask why it names another server's tools.",
        7.0,
    ),
    RuleInfo(
        "BCL605",
        "links-in-descriptions",
        "info",
        "A description carries a URL or a long encoded run (base64, hex): the model may follow "
        "or decode what no reviewer read.",
        "Check what the link or the blob holds; a documentation link is usually harmless.",
    ),
    RuleInfo(
        "BCL606",
        "secret-parameter",
        "warning",
        "A parameter asks the model for a secret (api_key, password, ssh_key) or a catch-all "
        "parameter asks for file contents or credentials: the model would have to hold them.",
        "Give the server its credential through env or auth, never through the model.",
        7.0,
    ),
    RuleInfo(
        "BCL901",
        "unused-suppression",
        "info",
        "A suppression comment suppressed nothing.",
        "Remove the comment.",
    ),
)


@dataclass
class Finding:
    """A lint rule's verdict on one positioned problem: the `Problem` (file, start and end of the
    offending YAML node, message, YAML path, hint) that every other error report uses too."""

    rule: str
    problem: Problem
    severity: Severity = "error"
    anchor: str = ""  # what the finding is about (stable text), for the fingerprint
    suppressed: bool = field(default=False, compare=False)

    @property
    def file(self) -> str:
        return self.problem.file

    @property
    def line(self) -> int:
        return self.problem.line

    @property
    def column(self) -> int:
        return self.problem.column

    @property
    def end_line(self) -> int:
        return self.problem.end_line or self.problem.line

    @property
    def end_column(self) -> int:
        return self.problem.end_column or self.problem.column

    @property
    def message(self) -> str:
        return self.problem.message

    @property
    def yaml_path(self) -> str:
        return self.problem.yaml_path

    @property
    def hint(self) -> str | None:
        return self.problem.hint or RULES[self.rule].hint

    @property
    def info(self) -> RuleInfo:
        return RULES[self.rule]

    @property
    def fingerprint(self) -> str:
        """Stable when unrelated lines move: no line numbers, only what and where in the tree."""
        key = "\x00".join((self.rule, self.file, self.yaml_path, self.anchor or self.message))
        return hashlib.sha256(key.encode()).hexdigest()[:32]

    def sort_key(self) -> tuple[str, int, int, str]:
        p = self.problem
        return (p.file, p.line, p.column, self.rule)
