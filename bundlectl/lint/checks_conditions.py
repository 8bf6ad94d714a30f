"""21x: the conditions of rules, judged against the tools' declared input schemas — an argument
no tool declares (BCL211), an optional one a deny or ask cannot catch (BCL212), a type a matcher
cannot judge (BCL213), a `when:` that fails on the declared types (BCL214)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from bundlectl.lint.context import Context, at, own_rules, policy_parts
from bundlectl.lint.rules import Finding
from bundlectl.policy.conditions import MISSING
from bundlectl.policy.rules import Rule
from bundlectl.resolve.resolved import Resolution
from bundlectl.suggest import Suggester


def condition_arguments(ctx: Context) -> Iterator[Finding]:
    """BCL211: a condition names an argument no tool the rule matches declares (a typo that
    makes an allow never hold and a deny never deny); BCL212: a deny or ask condition names an
    argument that a call may omit and that has no default, so a call that omits it is not
    caught by the rule. Only tools with a declared input schema are judged."""
    parts = policy_parts(ctx)
    if parts is None:
        return
    resolution, doc, model = parts
    for agent in model.agents:
        for path, rule in own_rules(resolution, agent):
            if rule.condition is None or not rule.condition.args:
                continue
            schemas = _declared_schemas(resolution, rule)
            if not schemas:
                continue
            for key, place, matcher in rule.condition.args:
                name = place[0] if place else key
                where = (*path, "args", key)
                having = [s for s in schemas if name in _properties(s)]
                if not having:
                    known = sorted({p for s in schemas for p in _properties(s)})
                    close = Suggester(known).closest(name, n=1, cutoff=0.6)
                    maybe = f"; did you mean {close[0]!r}?" if close else ""
                    yield at(
                        "BCL211",
                        doc,
                        where,
                        f"none of the tools {rule.pattern!r} matches has an argument {name!r} "
                        f"(they have: {', '.join(known) or 'none'}){maybe}",
                        key=True,
                        anchor=f"{rule.pattern}:{key}",
                    )
                    continue
                types = _declared_types([_properties(s)[name] for s in having])
                if len(place) == 1 and types and not matcher.fits(types):
                    yield at(
                        "BCL213",
                        doc,
                        where,
                        f"{matcher.text} cannot judge {name!r}, declared "
                        f"{' or '.join(sorted(types))}: "
                        + (
                            "the rule applies to no call"
                            if rule.effect == "allow"
                            else f"as {'a deny' if rule.effect == 'deny' else 'an ask'} it "
                            "holds for every call that has it (SPEC 10: a value it cannot judge)"
                        ),
                        key=True,
                        anchor=f"{rule.pattern}:{key}:type",
                    )
                if rule.effect == "allow" or len(place) != 1 or matcher.holds(MISSING, True):
                    continue  # (a matcher that names a missing value catches the omission)
                optional = [
                    s
                    for s in having
                    if name not in (s.get("required") or [])
                    and "default" not in _properties(s)[name]
                ]
                if optional:
                    yield at(
                        "BCL212",
                        doc,
                        where,
                        f"{name!r} is optional and has no default: a call that omits it is not "
                        f"{'denied' if rule.effect == 'deny' else 'asked about'} by this rule",
                        key=True,
                        anchor=f"{rule.pattern}:{key}",
                    )


def condition_expressions(ctx: Context) -> Iterator[Finding]:
    """BCL214: a rule's `when:` fails for a call whose arguments have the declared types (an
    operator or function CEL does not define for them, or an argument no tool declares): at
    run time it then fails closed on every such call. Each tool the rule names with a declared
    input schema is tried with one value of each argument's type."""
    parts = policy_parts(ctx)
    if parts is None:
        return
    resolution, doc, model = parts
    catalog = resolution.catalog
    for agent in model.agents:
        for path, rule in own_rules(resolution, agent):
            condition = rule.condition
            if condition is None or condition.when is None:
                continue
            for ref in catalog.members(catalog.mask(rule.pattern)):
                schema = ref.spec.input_schema if ref.spec is not None else None
                if not isinstance(schema, dict) or not _properties(schema):
                    continue
                context = {"agent": agent, "server": ref.server, "tool": ref.tool}
                why = condition.fails_for(_sample(schema), context)
                if why is not None:
                    yield at(
                        "BCL214",
                        doc,
                        (*path, "when"),
                        f"when: {condition.when!r} fails for a call of {ref.qualified} with "
                        f"arguments of the declared types: {why}",
                        anchor=f"{rule.pattern}:when",
                    )
                    break


_SAMPLES: dict[str, Any] = {
    "string": "x",
    "integer": 1,
    "number": 1.5,
    "boolean": False,
    "array": [],
    "object": {},
    "null": None,
}


def _sample(schema: dict[str, Any]) -> dict[str, Any]:
    """Arguments with one value of each declared property's type (its default, const or first
    enum value when it has one)."""
    out: dict[str, Any] = {}
    for name, prop in _properties(schema).items():
        if not isinstance(prop, dict):
            continue
        for key in ("default", "const"):
            if key in prop:
                out[name] = prop[key]
                break
        else:
            if isinstance(prop.get("enum"), list) and prop["enum"]:
                out[name] = prop["enum"][0]
                continue
            declared = prop.get("type")
            types = declared if isinstance(declared, list) else [declared]
            known = [t for t in types if t in _SAMPLES and t != "null"] or [
                t for t in types if t in _SAMPLES
            ]
            if known:
                out[name] = _SAMPLES[known[0]]
    return out


def _declared_schemas(resolution: Resolution, rule: Rule) -> list[dict[str, Any]]:
    """The declared input schemas (with properties) of the tools `rule` names (found through
    the catalog's masks: no scan of every tool per rule)."""
    catalog = resolution.catalog
    out = []
    for ref in catalog.members(catalog.mask(rule.pattern)):
        schema = ref.spec.input_schema if ref.spec is not None else None
        if isinstance(schema, dict) and _properties(schema):
            out.append(schema)
    return out


def _declared_types(properties: list[Any]) -> set[str]:
    """The JSON types the argument's schemas declare (empty: some schema does not say)."""
    found: set[str] = set()
    for prop in properties:
        declared = prop.get("type") if isinstance(prop, dict) else None
        if isinstance(declared, str):
            found.add(declared)
        elif isinstance(declared, list) and all(isinstance(t, str) for t in declared):
            found.update(declared)
        else:
            return set()
    return found


def _properties(schema: dict[str, Any]) -> dict[str, Any]:
    properties = schema.get("properties")
    return properties if isinstance(properties, dict) else {}
