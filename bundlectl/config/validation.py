"""Turn pydantic validation errors into positioned problems, all of them, with hints."""

from __future__ import annotations

import types
import typing
from dataclasses import replace
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from bundlectl.config.models import ProjectConfig, ServerSpec
from bundlectl.config.requirements import NAME_RE
from bundlectl.config.settings import DURATION_RE
from bundlectl.config.toolschemas import schema_problems
from bundlectl.config.yamlio import YamlDoc, YamlPath
from bundlectl.errors import InputFileError, Problem
from bundlectl.policy.rules import DEFAULT_AGENT
from bundlectl.suggest import Suggester

M = TypeVar("M", bound=BaseModel)


def check_doc(doc: YamlDoc, model: type[M], *, what: str) -> tuple[M | None, list[Problem]]:
    """Validate a parsed file against `model`: the model, or None, and every problem found.

    Declared tool schemas (in configs and manifests) are checked against their meta-schema too.
    """
    problems = list(doc.problems)
    if problems:
        return None, problems
    data = doc.data if doc.data is not None else {}
    if not isinstance(data, dict):
        return None, [doc.problem((), f"a {what} must be a mapping of keys to values")]
    try:
        result = model.model_validate(data)
    except ValidationError as exc:
        return None, problems_from(exc, doc, model)
    servers = getattr(result, "servers", None) or {}
    if any(isinstance(s, ServerSpec) and s.tools for s in servers.values()):
        problems = schema_problems(doc, servers)  # the model stays usable for lint's checks
    if isinstance(result, ProjectConfig):
        problems += config_problems(doc, result)
    return result, problems


def config_problems(doc: YamlDoc, config: ProjectConfig) -> list[Problem]:
    """What each key allows alone and the keys forbid together: an agent named `default`
    beside `gateway.auth.unmatched: default`, which would hand that agent's grants (and skip
    its `match:`) to every stranger whose valid token fits no match (#52)."""
    auth = config.gateway.auth
    if auth is None or auth.unmatched != "default" or DEFAULT_AGENT not in config.agents:
        return []
    unmatched = doc.problem(
        ("gateway", "auth", "unmatched"),
        "'default' serves every valid token that fits no agent's match: as agent 'default', "
        "and this file lists an agent of that name",
        hint="rename agents.default (its grants would go to strangers, its match: skipped), "
        "or set gateway.auth.unmatched: refuse",
    )
    listed = doc.problem(
        ("agents", DEFAULT_AGENT),
        "the agent that gateway.auth.unmatched: default would give every unmatched token",
        key=True,
    )
    return [replace(p, code="unmatched_default_listed") for p in (unmatched, listed)]


def validate_doc(doc: YamlDoc, model: type[M], *, what: str) -> M:
    """Validate a parsed file against `model`; raise every problem of the file at once (exit 2)."""
    result, problems = check_doc(doc, model, what=what)
    if problems or result is None:
        raise InputFileError(problems, hint=f"fix the {what} and run the command again")
    return result


def problems_from(exc: ValidationError, doc: YamlDoc, model: type[BaseModel]) -> list[Problem]:
    """One problem per pydantic error, at the offending key or value."""
    out: list[Problem] = []
    for error in exc.errors(include_url=False):
        loc = error["loc"]
        path, on_key = _yaml_path(loc, doc)
        kind = error["type"]
        hint: str | None = None
        if kind == "extra_forbidden":
            key = str(path[-1])
            allowed = allowed_keys(model, path[:-1])
            close = Suggester(allowed).closest(key)
            message = f"unknown key {key!r}"
            if close:
                message += f"; did you mean {close[0]!r}?"
            hint = f"allowed keys here: {', '.join(allowed)}" if allowed else None
            out.append(replace(doc.problem(path, message, hint=hint, key=True), code=kind))
            continue
        message = _message(error)
        code = kind
        if kind == "string_pattern_mismatch" and error.get("ctx", {}).get("pattern") == NAME_RE:
            code = "invalid_name"
        # An error about a whole mapping (a model validator) reads best at the mapping's key.
        on_key = on_key or (isinstance(_node(doc.data, path), dict) and path in doc.keys)
        if kind == "missing":
            hint = f"add the key {path[-1]!r}"
        elif kind == "malformed_reference":
            hint = (
                "write ${NAME} or ${NAME:-default} (NAME: letters, digits and '_', not starting "
                "with a digit); every '${' starts a reference"
            )
        out.append(replace(doc.problem(path, message, hint=hint, key=on_key), code=code))
    return out


def _message(error: Any) -> str:
    msg = str(error["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix) :]
    if (
        error["type"] == "string_pattern_mismatch"
        and error.get("ctx", {}).get("pattern") == NAME_RE
    ):
        msg = (
            f"{error['input']!r} is not a valid name: use lowercase letters, digits, '-' and "
            "'_', starting with a letter or digit (at most 63 characters)"
        )
    elif (
        error["type"] == "string_pattern_mismatch"
        and error.get("ctx", {}).get("pattern") == DURATION_RE
    ):
        msg = (
            f"{error['input']!r} is not a duration: write a whole number and a unit, s, m, h "
            "or d, such as 15m, 1h or 7d"
        )
    elif error["type"] == "missing":
        msg = "required key is missing"
    elif (
        "input" in error
        and not isinstance(error["input"], dict | list)
        and repr(error["input"]) not in msg
    ):
        msg = f"{msg} (got {error['input']!r})"
    return msg


def _node(data: Any, path: YamlPath) -> Any:
    for part in path:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return None
    return data


# pydantic's names for the arms of unions: our tagged unions' tags and the builtin types.
_UNION_TAGS = frozenset({"str", "int", "bool", "list", "dict", "pattern", "conditional"})


def _yaml_path(loc: tuple[int | str, ...], doc: YamlDoc) -> tuple[YamlPath, bool]:
    """pydantic's loc → the YAML path; `[key]` marks an error in a mapping key itself."""
    path: list[str | int] = []
    on_key = False
    for part in loc:
        if part == "[key]":
            on_key = True
            break
        candidate = (*path, part)
        # Union/function tags (e.g. "function-after[...]") are not part of the document path.
        if (
            isinstance(part, str)
            and candidate not in doc.values
            and candidate not in doc.keys
            and ("[" in part or part in _UNION_TAGS)
        ):
            continue
        path.append(part)
    return tuple(path), on_key


def allowed_keys(model: type[BaseModel], path: YamlPath) -> list[str]:
    """The field names of the model that sits at `path` (walking lists and dicts)."""
    current: Any = model
    for part in path:
        current = _child_type(current, part)
        if current is None:
            return []
    if isinstance(current, type) and issubclass(current, BaseModel):
        return sorted(current.model_fields)
    return []


def _child_type(tp: Any, part: str | int) -> Any:
    tp = _unwrap(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        field = tp.model_fields.get(str(part))
        return _unwrap(field.annotation) if field else None
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is list and args:
        return _unwrap(args[0])
    if origin is dict and len(args) == 2:
        return _unwrap(args[1])
    return None


def _unwrap(tp: Any) -> Any:
    """Strip Annotated and Optional."""
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(members) != 1:
                return tp
            tp = members[0]
        else:
            return tp
