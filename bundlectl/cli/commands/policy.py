"""`bundlectl policy check|explain|matrix`: see and test what each agent may call."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bundlectl.cli.commands.resolve import sandbox_of
from bundlectl.cli.describe import uncatalogued_note
from bundlectl.cli.options import Format, MatrixFormat
from bundlectl.config.project import load_project
from bundlectl.errors import UsageError
from bundlectl.output import (
    JSON_FORMAT_VERSION,
    Lazy,
    RawJson,
    emit_json,
    err,
    note,
    out,
    stream_json,
    table,
    visible,
    write_csv,
)
from bundlectl.policy.catalog import Row, agent_row
from bundlectl.policy.explain import Explanation, explain
from bundlectl.policy.patterns import parse_tool_name
from bundlectl.policy.rules import Decision
from bundlectl.resolve.resolved import Resolution, resolve_project
from bundlectl.suggest import tool_suggestions


def _load(config: Path | None) -> Resolution:
    return resolve_project(load_project(config))


def _warn_unknown(resolution: Resolution, agent: str, tools: list[tuple[str, str]]) -> None:
    unlisted = resolution.policy.unlisted(agent)
    if unlisted is not None:
        note(unlisted)
    for server, tool in tools:
        if (server, tool) not in resolution.catalog.index:
            close = tool_suggestions(resolution.catalog.index, server, tool)
            maybe = f"; did you mean {' or '.join(close)}?" if close else ""
            note(f"{server}.{tool} is not in the catalog of declared tools{maybe}")


def _decision_json(d: Decision) -> dict[str, Any]:
    return {
        "agent": d.agent,
        "tool": d.qualified,
        "server": d.server,
        "decision": d.effect,
        "rule": d.rule.pattern if d.rule else None,
        "source": str(d.rule.origin) if d.rule else None,
        "reason": d.reason,
    }


def _effect_label(d: Decision) -> str:
    """The effect, first (scripts read the first word); an ask rule no one could confirm is
    `deny`, and its rule column says why (`_rule_label`)."""
    return d.effect


def _rule_label(d: Decision) -> str:
    label = d.rule.label if d.rule else d.reason
    if d.matched_effect == "ask" and d.effect == "deny":
        label += " (an ask no one can confirm here)"
    return label


def _arguments(source: str | None) -> dict[str, Any] | None:
    """`--args JSON|@FILE|-`: the call's arguments, or None when none were given."""
    if source is None:
        return None
    from bundlectl.calls.arguments import load_json_args  # noqa: PLC0415

    return load_json_args(source)


def check(
    config: Path | None,
    agent: str,
    tools: list[str],
    *,
    interactive: bool,
    fmt: Format,
    unlisted: bool = False,
    args: str | None = None,
) -> int:
    """One line per tool; exit 0 when none is denied, 3 when any is. With `args`, each tool is
    decided on a call with those arguments (its rules' conditions checked)."""
    names: list[tuple[str, str]] = []
    malformed: list[tuple[str, UsageError]] = []  # reported with the rest, never alone (#56)
    for given in tools:
        try:
            names.append(parse_tool_name(given))
        except UsageError as exc:
            malformed.append((given, exc))
    if malformed and not names:
        raise malformed[0][1]
    arguments = _arguments(args)
    resolution = _load(config)
    resolution.policy.require_listed([agent], unlisted=unlisted)
    compiled = resolution.policy.agent(agent)
    decisions = [
        compiled.decide(
            s,
            t,
            interactive=interactive,
            arguments=arguments,
            schema=resolution.catalog.input_schema(s, t) if arguments is not None else None,
            paths=resolution.path_reader(s) if arguments is not None else None,
        )
        for s, t in names
    ]
    undecided = [d for d in decisions if d.conditional and arguments is None]
    if undecided:  # "allowed" would mislead a CI script: some calls of it are refused
        first = undecided[0]
        names_of = explain(compiled, first.server, first.tool, interactive=True).depends_on
        raise UsageError(
            f"{', '.join(d.qualified for d in undecided)}: agent {agent!r} is allowed it only "
            f"for some arguments ({', '.join(names_of)}), so no call can be decided without them",
            hint=f"give the call's arguments: bundlectl policy check --agent {agent} "
            f"{first.qualified} --args '{{\"{names_of[0]}\": ...}}'"
            if names_of
            else "give the call's arguments with --args JSON",
        )
    if fmt is Format.json:  # the envelope every command's JSON has (it was a bare list)
        emit_json(
            {
                "format_version": JSON_FORMAT_VERSION,
                "agent": agent,
                "decisions": [
                    {
                        **_decision_json(d),
                        "depends_on_arguments": False,  # such a tool needs --args
                    }
                    for d in decisions
                ],
                "errors": [{"tool": name, "error": e.message} for name, e in malformed],
            }
        )
    else:
        _warn_unknown(resolution, agent, names)
        table(
            [
                [
                    _effect_label(d),
                    d.qualified,
                    _rule_label(d),
                    f"({d.rule.origin})" if d.rule else "",
                ]
                for d in decisions
            ]
        )
        if any(d.matched_effect == "ask" and d.effect == "deny" for d in decisions):
            note(
                "no one can confirm an ask rule here, so such a call is refused; --interactive "
                "decides as if a person could (exit 3 while any call is refused)"
            )
    for _, problem in malformed:
        err(f"error: {problem.message}" + (f"\nhint: {problem.hint}" if problem.hint else ""))
    if malformed:
        return 2
    return 3 if any(d.effect == "deny" for d in decisions) else 0


def explain_one(
    config: Path | None,
    agent: str | None,
    tool: str | None,
    *,
    interactive: bool,
    fmt: Format,
    unlisted: bool = False,
    args: str | None = None,
    claims: str | None = None,
    token: str | None = None,
) -> int:
    if claims is not None or token is not None:  # who the token stands for, first
        from bundlectl.cli.commands import whois  # noqa: PLC0415

        if agent is not None:
            raise UsageError("--agent, or --claims/--token: the token says which agent calls")
        if fmt is Format.json:
            raise UsageError("--claims and --token print text only")
        who = whois.mapped(_load(config), whois.claims_from(claims, token))
        if who is None:
            return 3
        if tool is None:
            return 0
        out("")
        agent, unlisted = who, True
    if agent is None or tool is None:
        raise UsageError(
            "give --agent AGENT and SERVER.TOOL (or --claims/--token to see which agent a "
            "token stands for)",
            hint="bundlectl policy explain --agent reader files.read_file",
        )
    server, name = parse_tool_name(tool)
    arguments = _arguments(args)
    resolution = _load(config)
    resolution.policy.require_listed([agent], unlisted=unlisted)
    why = explain(
        resolution.policy.agent(agent),
        server,
        name,
        interactive=interactive,
        arguments=arguments,
        schema=resolution.catalog.input_schema(server, name) if arguments is not None else None,
    )
    d = why.decision
    found = resolution.merged.servers.get(server)
    source = found.source if found is not None else None
    agent_spec = resolution.policy.set.agents.get(agent)
    agent_from = agent_spec.origin if agent_spec is not None else None
    here = resolution.confirmed_in_advance(d, arguments, resolution.path_reader(server))
    # where the call would run: the server's effective sandbox (a local server's; #55)
    boxed = sandbox_of(server, found.spec, resolution, [agent]).get("sandbox") if found else None
    if fmt is Format.json:
        emit_json(
            {
                "format_version": JSON_FORMAT_VERSION,
                **_decision_json(d),
                "server_source": source,
                "agent_source": str(agent_from) if agent_from is not None else None,
                "matched_effect": d.matched_effect,
                "other_rules": [
                    {
                        "rule": r.pattern,
                        "effect": r.effect,
                        "source": str(r.origin),
                        "agent": r.agent,
                        "why_not": why_not,
                    }
                    for r, why_not in why.losers
                ],
                "extends": [{"agent": a, "parents": p} for a, p in why.extends],
                "listed": why.listed,
                "policy_default_used": why.default_used,
                "policy_deny": [r.pattern for r in why.global_deny],
                "pin_tools": why.pin_tools,
                "conditions": [
                    {
                        "rule": r.pattern,
                        "effect": r.effect,
                        "source": str(r.origin),
                        "condition": r.condition.canonical if r.condition else {},
                        "held": None if failed is None else failed == "",
                        "failed": failed or None,
                    }
                    for r, failed in why.conditions
                ],
                "depends_on": why.depends_on if arguments is None else [],
                "confirmed_by_local_rule": str(here.origin) if here is not None else None,
                "sandbox": boxed,
            }
        )
        return 3 if d.effect == "deny" and here is None else 0
    _warn_unknown(resolution, agent, [(server, name)])
    if here is not None:
        _said(f"{d.qualified} for agent {agent}: ask, confirmed in advance on this machine")
    else:
        _said(_header(d, agent, arguments))
    _said(f"  server {server}: {source or 'not configured'}")
    if boxed is not None and resolution.project.config.policy.sandbox_mode != "off":
        _said(f"  sandbox: {boxed['said']}")
    if agent_from is not None:
        _said(f"  agent {agent}: {agent_from}")
    _print_why(resolution, why, arguments)
    if here is not None:
        _said(f"  confirmed in advance on this machine: {here.label}  ({here.origin}, always)")
    return 3 if d.effect == "deny" and here is None else 0


def _said(line: str) -> None:
    """A line of `explain`: it quotes arguments (`--args`) and the conditions they meet, so
    it is shown as `visible` shows a text an agent wrote."""
    out(visible(line))


def _header(d: Decision, agent: str, arguments: dict[str, Any] | None) -> str:
    suffix = ""
    if d.matched_effect == "ask" and d.effect == "deny":
        suffix = " (an ask rule matched, but no one can confirm here; --interactive to see ask)"
    if d.conditional and arguments is None:
        suffix += " (for a call whose arguments meet the conditions below; --args decides one)"
    return f"{d.qualified} for agent {agent}: {d.effect}{suffix}"


def _print_why(resolution: Resolution, why: Explanation, arguments: dict[str, Any] | None) -> None:
    d = why.decision
    if d.rule:
        _said(
            f"  decided by: {d.rule.label}  ({d.rule.origin}"
            + (f", {d.rule.origin.position}" if d.rule.origin.bundle else "")
            + ")"
        )
    _said(f"  reason: {d.reason}")
    if why.losers:
        _said("  other matching rules:")
        for rule, why_not in why.losers:
            _said(f"    {rule.effect:<5}  {rule.label}  ({rule.origin}): {why_not}")
    else:
        _said("  other matching rules: none")
    if why.conditions:
        _said("  rules with argument conditions:")
        for rule, failed in why.conditions:
            state = (
                "" if failed is None else ": held" if failed == "" else f": {failed} does not hold"
            )
            if failed == "" and rule.effect == "deny" and arguments is not None:
                state += _unreadable(resolution, rule, arguments)
            _said(f"    {rule.effect:<5}  {rule.label}  ({rule.origin}){state}")
        if arguments is None:
            _said(
                f"  depends on the arguments: {', '.join(why.depends_on)} (give --args to "
                "decide a call)"
            )
    if why.listed:
        chain = "; ".join(f"{a} extends {', '.join(p)}" for a, p in why.extends if p)
        _said(f"  extends: {chain or 'none'}")
        _said("  policy.default: not used (the agent is listed)")
    else:
        _said(
            f"  policy.default: {resolution.policy.set.default}"
            + (" (used)" if why.default_used else " (not used: a rule decided)")
        )
    deny = ", ".join(r.pattern for r in why.global_deny)
    _said(f"  policy.deny: {('matched ' + deny) if deny else 'no rule matched'}")
    _said(f"  policy.pin_tools: {why.pin_tools}")


def _unreadable(resolution: Resolution, rule: Any, arguments: dict[str, Any]) -> str:
    """Why a deny's `{path: }` condition held for a path it does not name: the path has no
    single reading (it climbs out of the root, or has more than one meaning), which a deny
    always matches (#56: explain said "held" for `../x` against `secrets/**`)."""
    from bundlectl.policy.conditions import MISSING, lookup, normalised  # noqa: PLC0415

    reader = resolution.path_reader(rule.parts[0]) if "*" not in rule.parts[0] else None
    for key, place, matcher in rule.condition.args if rule.condition is not None else ():
        value = lookup(arguments, place or (key,), None)
        if matcher.kind != "path" or value is MISSING or not isinstance(value, str):
            continue
        readings = reader(value) if reader is not None else [normalised(value)]
        if any(reading is None for reading in readings):
            return (
                f" ({key} {value!r} climbs out of the root or has more than one meaning, "
                "and a deny holds for every such path)"
            )
    return ""


@dataclass(frozen=True)
class _Matrix:
    agents: list[str]
    tools: list[str]
    rows: list[Row]
    catalog: Any = None  # the Catalog the masks index

    def columns(self) -> dict[str, list[str]]:
        """Each agent's cells: the effect, marked `?` where it depends on the call's arguments
        (a rule with conditions names the tool)."""
        out: dict[str, list[str]] = {}
        for row in self.rows:
            cells: list[str] = list(row.effects(len(self.tools)))
            bits = row.conditional
            while bits:
                low = bits & -bits
                index = low.bit_length() - 1
                cells[index] += "?"
                bits ^= low
            out[row.agent] = cells
        return out

    @property
    def conditional(self) -> bool:
        return any(row.conditional for row in self.rows)


LEGEND = (
    "?: the decision depends on the call's arguments (a rule with conditions names the tool; "
    "`bundlectl policy explain --agent A TOOL` shows them)"
)


def _matrix_json(matrix: _Matrix) -> None:
    """One agent's row at a time, already JSON: 3,000 x 5,000 cells are never held whole."""
    size = len(matrix.tools)
    effects = ((row.agent, RawJson(row.effects_json(size))) for row in matrix.rows)
    stream_json(
        {
            "format_version": JSON_FORMAT_VERSION,
            "agents": matrix.agents,
            "tools": matrix.tools,
            "effects": Lazy(effects, mapping=True),
            # per agent, the tools whose decision depends on the call's arguments
            "conditional": {
                row.agent: matrix.catalog.names(row.conditional)
                for row in matrix.rows
                if row.conditional
            },
        },
        expand=2,
    )


def _matrix_csv(matrix: _Matrix) -> None:
    columns = matrix.columns()
    write_csv(
        [
            ["tool", *matrix.agents],
            *(
                [tool, *(columns[a][i] for a in matrix.agents)]
                for i, tool in enumerate(matrix.tools)
            ),
        ]
    )


def _matrix_text(matrix: _Matrix) -> None:
    columns = matrix.columns()
    table(
        [[tool, *(columns[a][i] for a in matrix.agents)] for i, tool in enumerate(matrix.tools)],
        header=["TOOL", *matrix.agents],
        style=lambda cell: (
            cell.rstrip("?") if cell.rstrip("?") in ("allow", "ask", "deny") else None
        ),
    )
    if matrix.conditional:
        out(LEGEND)


MATRIX_REPORTERS: dict[MatrixFormat, Callable[[_Matrix], None]] = {
    MatrixFormat.json: _matrix_json,
    MatrixFormat.csv: _matrix_csv,
    MatrixFormat.text: _matrix_text,
}


def matrix(
    config: Path | None, agents: list[str], *, fmt: MatrixFormat, unlisted: bool = False
) -> int:
    resolution = _load(config)
    policy, catalog = resolution.policy, resolution.catalog
    policy.require_listed(agents, unlisted=unlisted)
    names = agents or policy.agents
    rows = [agent_row(policy.agent(a), catalog) for a in names]
    if (said := uncatalogued_note(resolution.uncatalogued())) is not None:
        note(said)
    MATRIX_REPORTERS[fmt](_Matrix(list(names), [t.qualified for t in catalog.tools], rows, catalog))
    return 0
