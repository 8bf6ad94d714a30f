"""Tool arguments from the command line: KEY=VALUE pairs typed by the input schema, JSON, files.

Typing follows the MCP Inspector's --tool-arg: integers, numbers and booleans by the property's
schema type, JSON for arrays and objects, strings as given. Validation reports every violation.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from bundlectl.config.bounded_read import MAX_INPUT, read_bounded
from bundlectl.errors import ToolCallError, UsageError
from bundlectl.mcpio.schemas import checker
from bundlectl.policy.conditions import unencodable

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


NOT_UNICODE_HINT = "send UTF-8 text; a lone surrogate (\\udc80) is no character"


def not_unicode(qualified: str, where: str) -> ToolCallError:
    """The refusal of a call whose arguments hold text no UTF-8 can encode (`unencodable`)."""
    return ToolCallError(
        f"{where} of {qualified} holds text that is not Unicode (a lone surrogate); "
        "nothing was sent",
        hint=NOT_UNICODE_HINT,
    )


def _unicode_only(value: Any, what: str) -> None:
    """Command-line arguments that were not UTF-8 (or `\\udc80` in JSON): a usage error,
    before anything starts."""
    where = unencodable(value)
    if where is not None:
        raise UsageError(
            f"{what}: {where} holds text that is not Unicode (bytes that are not UTF-8, or a "
            "lone surrogate)",
            hint=NOT_UNICODE_HINT,
        )


class DuplicateKeyError(ValueError):
    """A JSON object names one key twice (JSON parsers would silently keep the last)."""

    def __init__(self, key: str) -> None:
        super().__init__(f"key {key!r} appears twice in one object")
        self.key = key


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKeyError(key)
        out[key] = value
    return out


class NotJsonNumber(ValueError):
    """NaN or an infinity: Python's JSON parser takes them, JSON has neither (and every
    comparison a policy condition makes with NaN is false)."""

    def __init__(self, text: str) -> None:
        super().__init__(f"{text} is not a JSON number (NaN and the infinities are not JSON)")


def refuse_constant(text: str) -> Any:
    """`json.loads`' parse_constant: NaN, Infinity and -Infinity refused (NotJsonNumber)."""
    raise NotJsonNumber(text)


def loads_message(raw: bytes | bytearray | str) -> Any:
    """`json.loads(raw, parse_constant=refuse_constant)` with one decoder made once, not one
    per message (`json.loads` makes one whenever it is given an option): a gateway reads every
    client message this way."""
    if isinstance(raw, str):
        if raw.startswith("\ufeff"):  # as json.loads says it
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", raw, 0)
        return _NO_CONSTANTS(raw)
    return _NO_CONSTANTS(raw.decode(json.detect_encoding(raw), "surrogatepass"))


_NO_CONSTANTS = json.JSONDecoder(parse_constant=refuse_constant).decode


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999
        raise NotJsonNumber(text)
    return value


def loads_strict(text: str) -> Any:
    """`json.loads`, but a duplicate key is an error (DuplicateKeyError), never last-one-wins,
    and NaN, Infinity or a number too large for a float are refused (NotJsonNumber)."""
    return json.loads(
        text, object_pairs_hook=_unique, parse_constant=refuse_constant, parse_float=_finite
    )


def load_json_args(source: str) -> dict[str, Any]:
    """`--args`: a JSON object given inline, as `@file`, or `-` for standard input."""
    where = "--args"
    if source == "-":
        text, where = sys.stdin.read(MAX_INPUT + 1), "standard input"
        if len(text) > MAX_INPUT:
            raise UsageError(f"{where}: the arguments are larger than {MAX_INPUT // 2**20} MiB")
    elif source.startswith("@"):
        path = Path(source[1:])
        try:
            text = read_bounded(path).decode("utf-8")
        except OSError as exc:
            raise UsageError(f"cannot read {path}: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise UsageError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        except ValueError as exc:  # a NUL in the path
            raise UsageError(f"cannot read {source[1:]!r}: {exc}") from None
        where = str(path)
    else:
        text = source
    try:
        value = loads_strict(text)
    except RecursionError:
        raise UsageError(
            f"{where}: the JSON nests too deeply", hint="arguments nest a few levels, not thousands"
        ) from None
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"{where}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}",
            hint='pass a JSON object, e.g. --args \'{"path": "README.md"}\'',
        ) from None
    except DuplicateKeyError as exc:
        raise UsageError(f"{where}: {exc}", hint="give each key once") from None
    except NotJsonNumber as exc:
        raise UsageError(f"{where}: {exc}", hint="write a finite number") from None
    if not isinstance(value, dict):
        raise UsageError(
            f"{where}: the arguments must be a JSON object, not {type(value).__name__}"
        )
    _unicode_only(value, where)
    return value


def split_pairs(pairs: list[str]) -> list[tuple[str, str]]:
    """Syntax only (before anything starts): every item must be KEY=VALUE."""
    out: dict[str, str] = {}
    for item in pairs:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise UsageError(
                f"argument {item!r} is not KEY=VALUE",
                hint="write path=README.md, or pass --args JSON",
            )
        if key in out:  # never silently last-one-wins
            raise UsageError(
                f"argument {key!r} is given twice",
                hint=f'give {key}= once; for a list, pass JSON: {key}=\'["a", "b"]\'',
            )
        out[key] = value
    _unicode_only(out, "the KEY=VALUE arguments")
    return list(out.items())


def _types(schema: dict[str, Any]) -> list[str]:
    declared = schema.get("type")
    if isinstance(declared, str):
        return [declared]
    if isinstance(declared, list):
        return [t for t in declared if isinstance(t, str)]
    found: list[str] = []
    for key in ("anyOf", "oneOf"):
        for option in schema.get(key, []) or []:
            if isinstance(option, dict):
                found += _types(option)
    return found


def _as_integer(raw: str) -> Any:
    return int(raw)


def _as_number(raw: str) -> Any:
    return _finite(raw) if any(c in raw for c in ".eE") else int(raw)


def _as_boolean(raw: str) -> Any:
    if raw.lower() not in _TRUE | _FALSE:
        raise ValueError(raw)
    return raw.lower() in _TRUE


def _as_json(kind: type) -> Any:
    def convert(raw: str) -> Any:
        value = loads_strict(raw)
        if not isinstance(value, kind):
            raise ValueError(raw)
        return value

    return convert


_CONVERT = {
    "string": str,
    "integer": _as_integer,
    "number": _as_number,
    "boolean": _as_boolean,
    "array": _as_json(list),
    "object": _as_json(dict),
}


_EXAMPLES = {
    "string": "a string is taken as written: {key}=text",
    "integer": "an integer is written in digits: {key}=10",
    "number": "a number is written as 10 or 2.5",
    "boolean": "a boolean is true or false: {key}=true",
    "array": 'an array takes JSON: {key}=\'["a", "b"]\'',
    "object": 'an object takes JSON: {key}=\'{{"k": "v"}}\'',
}


def typed_value(key: str, raw: str, schema: dict[str, Any]) -> Any:
    """Convert one KEY=VALUE by the property's declared type (the first type that fits)."""
    declared = _types(schema)
    if raw == "null" and "null" in declared:
        return None
    types = [t for t in declared if t in _CONVERT]
    for kind in types:
        try:
            return _CONVERT[kind](raw)
        except ValueError:  # json.JSONDecodeError is a ValueError too
            continue
    if types:
        raise ToolCallError(
            f"argument {key}={raw!r} is not a valid {' or '.join(types)}",
            hint="; ".join(dict.fromkeys(_EXAMPLES[t].format(key=key) for t in types)),
        )
    try:  # no declared type: JSON when it parses, else the string
        return loads_strict(raw)
    except NotJsonNumber as exc:
        raise ToolCallError(
            f"argument {key}={raw!r}: {exc}", hint="write a finite number"
        ) from None
    except (json.JSONDecodeError, DuplicateKeyError):
        return raw


def build_arguments(
    pairs: list[tuple[str, str]], base: dict[str, Any], input_schema: dict[str, Any]
) -> dict[str, Any]:
    """`--args` first, then KEY=VALUE pairs (which win), typed by the input schema."""
    properties = input_schema.get("properties") or {}
    args = dict(base)
    for key, raw in pairs:
        prop = properties.get(key)
        args[key] = typed_value(key, raw, prop if isinstance(prop, dict) else {})
    return args


def validate(arguments: dict[str, Any], input_schema: dict[str, Any], tool: str) -> None:
    """Every violation of the input schema, listed (exit 4). A schema the validator cannot use
    (an unknown type, a `$ref` that leads nowhere) says so instead of failing inside it; a
    merely sloppy one is used as far as it goes, as the server's own SDK does."""
    check = checker(input_schema)
    if check.valid(arguments):
        return
    try:
        errors = sorted(check.full.iter_errors(arguments), key=lambda e: list(e.absolute_path))
    except Exception as exc:  # jsonschema's and referencing's errors on the server's schema
        reason = str(getattr(exc, "message", None) or exc).splitlines()[0]
        raise ToolCallError(
            f"tool {tool} declares an input schema that cannot be used: {reason}",
            hint="the server's tool definition is broken; tell its maintainers",
        ) from None
    if errors:
        lines = [f"the arguments do not satisfy the input schema of {tool}:"]
        for error in errors:
            where = ".".join(str(p) for p in error.absolute_path) or "(arguments)"
            lines.append(f"  {where}: {error.message}")
        name = tool.split(".", 1)[-1]
        hint = f"`bundlectl tools --detail full --search {name}` shows the schema"
        raise ToolCallError("\n".join(lines), hint=hint)
