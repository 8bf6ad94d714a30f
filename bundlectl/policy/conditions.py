"""Argument conditions on rules (SPEC 10). Pure: no I/O.

A rule may say which calls of its tools it covers: `args:` maps an argument (a key, a dotted path
or a JSON pointer into the arguments) to a matcher, and `when:` is a CEL expression over `args`,
`agent`, `server` and `tool`. The rule applies only when every matcher and the expression hold.

Matchers: a literal (strings are globs with `*` and `?`), a list of alternatives, `{glob: }`,
`{re: }` (a full match), `{path: }` (a `**` glob matched after lexical normalisation), `{min: ,
max: }`, `{present: false}`, `{not: MATCHER}`. A missing argument takes its input schema's
`default`; otherwise only `{present: false}` holds for it.

Failing closed: a path that is absolute, climbs out with `..`, or means different things to
different readers (a backslash, `~`, a URI scheme, percent-escapes) never matches an allow and
always matches an ask or a deny; where the server's own reading is known (the built-in servers:
links resolved below the root, `PathReader`), an allow must hold for every reading and a deny holds
for any. A matcher given a value of a type it cannot judge (a list for a `{path: }`, a string for
`{min: }`, NaN or an infinity for a number) does not hold for an allow and holds for an ask or a
deny; numbers compare as numbers (`5` is `5.0`). A CEL expression that fails at run time (a
missing key, a type error) holds for an ask or a deny and not for an allow.
"""

from __future__ import annotations

import json
import math
import posixpath
import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

MISSING = object()

# A path argument as the server may read it: each reading is a root-relative, normalised path, or
# None when a reading leaves the root or cannot be told (the policy then fails closed).
PathReader = Callable[[str], list[str | None]]


class ConditionError(ValueError):
    """A condition that cannot be compiled (a bad matcher, regex or CEL expression)."""


@lru_cache(maxsize=4096)
def _glob(pattern: str) -> re.Pattern[str]:
    return re.compile(
        "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern), re.DOTALL
    )


@lru_cache(maxsize=4096)
def _path_glob(pattern: str) -> re.Pattern[str]:
    """`**` crosses folders, `*` and `?` do not."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("/**", i) and i + 3 == len(pattern):
            out.append("(?:/.*)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out), re.DOTALL)


# A URI scheme (`file:`, `s3:`) or a drive letter (`C:`) in front of a path: a server may read it
# as a location of its own.
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
# Percent-escapes of `.`, `/` and `\\`: a server that URL-decodes its paths reads other folders.
_ESCAPED = re.compile(r"%(?:2e|2f|5c)", re.IGNORECASE)


def normalised(path: str) -> str | None:
    """The path after lexical normalisation, or None when it is absolute, climbs out, or has
    more than one meaning: a backslash (a separator on Windows and to many servers, a character
    in a POSIX name), a leading `~`, a URI scheme or drive letter, percent-escapes of separators,
    a NUL, or characters that Unicode compatibility folds into `.`, `/` or `\\`."""
    if (
        not path
        or path.startswith(("/", "~"))
        or "\\" in path
        or "\x00" in path
        or _SCHEME.match(path)
        or _ESCAPED.search(path)
    ):
        return None
    if not path.isascii() and _folds(path):
        return None
    if any(map(unportable_name, path.split("/"))):
        return None
    clean = posixpath.normpath(path)
    if clean == ".." or clean.startswith("../"):
        return None
    return clean


# The names Windows reads as devices, whatever their extension (`con.md` is the console).
_DEVICE = re.compile(r"(?i)(con|prn|aux|nul|com[0-9¹²³]|lpt[0-9¹²³]|conin\$|conout\$) *(\..*)?")


def unportable_name(part: str) -> str | None:
    """Why a path component means something else on Windows (None: it does not), refused so
    that a path and a policy mean the same on every OS: Windows strips a name's trailing dots
    and spaces (`".. "` and `"..."` are `..`, `"notes. "` is `notes`), reads `a.exe:x.md` as a
    stream of `a.exe` (a `*.md` rule would let `a.exe` be made), and `con.md` or `nul` as a
    device. `.` and `..` themselves are the lexical steps."""
    if part in (".", ".."):
        return None
    if part.endswith((".", " ")):
        return "a name ending in a dot or a space, which Windows reads as another name"
    if ":" in part:
        return "a ':' in a name, which Windows reads as a stream of another file"
    if _DEVICE.fullmatch(part):
        return "a name Windows reads as a device"
    return None


def _folds(path: str) -> bool:
    """Whether Unicode compatibility folding (NFKC, which some servers and file systems apply)
    makes separators or dots of other characters (U+FF0F fullwidth solidus, U+2024 one-dot
    leader)."""
    folded = unicodedata.normalize("NFKC", path)
    return any(folded.count(c) != path.count(c) for c in "./\\:~%")


def lexical_reading(path: str) -> list[str | None]:
    """The one reading a third-party server's path gets: lexical (`normalised`)."""
    return [normalised(path)]


@dataclass(frozen=True)
class Matcher:
    """One compiled matcher: `kind` and its operand."""

    kind: str  # literal | any | glob | re | path | range | present | not
    operand: Any
    text: str  # as written, for explanations

    def holds(self, value: Any, strict: bool, paths: PathReader | None = None) -> bool:
        """Whether it holds for `value` (MISSING: the argument is absent); `strict`: the rule
        is an ask or a deny, for which an escaping or ambiguous path, and a value of a type
        this matcher cannot judge, count as a match. `paths`: how the server reads a path
        (default: lexically)."""
        kind, operand = self.kind, self.operand
        if kind == "present":
            return (value is not MISSING) is operand
        if kind == "any":  # each alternative judges a missing value (`{present: false}` can)
            return any(m.holds(value, strict, paths) for m in operand)
        if value is MISSING:
            return False
        if kind == "not":
            return not operand.holds(value, not strict, paths)
        if kind == "range":
            if not _finite_number(value):
                return strict
            low, high = operand
            return (low is None or value >= low) and (high is None or value <= high)
        if kind == "literal" and not isinstance(operand, str):
            return _same_literal(operand, value, strict)
        if not isinstance(value, str):
            return strict
        if kind == "path":
            return _path_holds(operand, value, strict, paths)
        return bool(_TEXT[kind](operand, value))

    def values(self) -> list[Any] | None:
        """The only values it holds for (MISSING for `{present: false}`), when they are few
        and known: literals without glob characters; None otherwise."""
        kind, operand = self.kind, self.operand
        if kind == "any":
            out: list[Any] = []
            for alternative in operand:
                some = alternative.values()
                if some is None:
                    return None
                out += some
            return out
        if kind == "present" and operand is False:
            return [MISSING]
        globbed = isinstance(operand, str) and ("*" in operand or "?" in operand)
        if kind == "literal" and not globbed:
            return [operand]
        return None

    def fits(self, types: set[str]) -> bool:
        """Whether it can hold for a value of one of the JSON Schema `types` (lint: a matcher
        that never can is a mistake)."""
        kind, operand = self.kind, self.operand
        if kind in ("present", "not"):
            return True
        if kind == "any":
            return any(m.fits(types) for m in operand)
        if kind == "range":
            return bool(types & {"number", "integer"})
        if kind != "literal":
            return "string" in types
        if isinstance(operand, bool):
            return "boolean" in types
        if isinstance(operand, int):
            return bool(types & {"number", "integer"})
        if isinstance(operand, float):
            return "number" in types or ("integer" in types and operand.is_integer())
        return ("string" if isinstance(operand, str) else "null") in types


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _finite_number(value: Any) -> bool:
    return _number(value) and math.isfinite(value)


def _same_literal(operand: Any, value: Any, strict: bool) -> bool:
    """A literal that is not a string: numbers equal as numbers (`5` is `5.0`, never `True`),
    booleans as booleans, null as null; a value of another kind (or NaN, an infinity) is one it
    cannot judge."""
    if operand is None:
        return value is None
    if isinstance(operand, bool):
        return value is operand if isinstance(value, bool) else strict
    if not _finite_number(value):
        return strict
    return bool(value == operand)


def _path_holds(pattern: str, value: str, strict: bool, paths: PathReader | None) -> bool:
    """An allow holds when every reading of the path matches; a deny when any does, or when a
    reading leaves the root or cannot be told."""
    readings = (paths or lexical_reading)(value)
    if not readings or any(reading is None for reading in readings):
        return strict
    glob = _path_glob(pattern)
    found = (glob.fullmatch(reading) is not None for reading in readings if reading is not None)
    return any(found) if strict else all(found)


# The string matchers: (operand, the argument) → whether it holds (`{path: }` is `_path_holds`).
_TEXT: dict[str, Callable[[Any, str], bool]] = {
    "literal": lambda glob, value: _glob(glob).fullmatch(value) is not None,
    "glob": lambda glob, value: _glob(glob).fullmatch(value) is not None,
    "re": lambda regex, value: regex.fullmatch(value) is not None,
}


def compile_matcher(raw: Any, where: str = "") -> Matcher:
    """A matcher from its YAML form; ConditionError says what is wrong."""
    text = json.dumps(raw, ensure_ascii=False, default=str)
    if isinstance(raw, list):
        if not raw:
            raise ConditionError(f"{where}an empty list of alternatives matches nothing")
        return Matcher("any", tuple(compile_matcher(item, where) for item in raw), text)
    if isinstance(raw, dict):
        return _compile_mapping(raw, where, text)
    if raw is None or isinstance(raw, str | int | float | bool):
        return Matcher("literal", raw, text)
    raise ConditionError(f"{where}a matcher is a value, a list or a mapping")


def _compile_mapping(raw: dict[Any, Any], where: str, text: str) -> Matcher:
    if raw and set(raw) <= {"min", "max"}:
        for key in ("min", "max"):
            bound = raw.get(key)
            if bound is not None and not _finite_number(bound):
                raise ConditionError(f"{where}{key} must be a number")
        return Matcher("range", (raw.get("min"), raw.get("max")), text)
    if len(raw) != 1:
        keys = ", ".join(sorted(map(str, raw)))
        raise ConditionError(
            f"{where}a matcher has one key (glob, re, path, min/max, present, not), not {keys}"
        )
    ((key, operand),) = raw.items()
    if key == "not":
        return Matcher("not", compile_matcher(operand, where), text)
    wanted = {"glob": str, "path": str, "re": str, "present": bool}.get(key)
    if wanted is None:
        raise ConditionError(
            f"{where}unknown matcher {key!r}; use glob, re, path, min/max, present or not"
        )
    if not isinstance(operand, wanted):
        raise ConditionError(f"{where}{key} takes a {'string' if wanted is str else 'boolean'}")
    if key == "re":
        try:
            operand = re.compile(operand, re.DOTALL)
        except re.error as exc:
            raise ConditionError(f"{where}the regular expression does not compile: {exc}") from None
    return Matcher(key, operand, text)


def split_key(key: str) -> tuple[str, ...]:
    """An argument's place: a JSON pointer (`/a/b`) or a dotted path (`a.b`)."""
    if key.startswith("/"):
        return tuple(p.replace("~1", "/").replace("~0", "~") for p in key[1:].split("/"))
    return tuple(key.split("."))


def lookup(
    arguments: Mapping[str, Any], place: tuple[str, ...], schema: Mapping[str, Any] | None
) -> Any:
    """The argument at `place`, else its schema default, else MISSING."""
    value: Any = arguments
    for part in place:
        properties = (schema or {}).get("properties") if isinstance(schema, Mapping) else None
        schema = properties.get(part) if isinstance(properties, Mapping) else None
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(schema, Mapping) and "default" in schema:
            value = schema["default"]
        else:
            return MISSING
    return value


@dataclass(frozen=True)
class Condition:
    """What a rule requires of a call's arguments: every matcher and `when`."""

    args: tuple[tuple[str, tuple[str, ...], Matcher], ...] = ()
    when: str | None = None
    _program: Any = field(default=None, compare=False, repr=False)

    @property
    def canonical(self) -> dict[str, Any]:
        """As plain data (the policy digest)."""
        out: dict[str, Any] = {}
        if self.args:
            out["args"] = {key: json.loads(m.text) for key, _, m in self.args}
        if self.when is not None:
            out["when"] = self.when
        return out

    def describe(self) -> str:
        parts = [f"{key} {m.text}" for key, _, m in self.args]
        if self.when is not None:
            parts.append(f"when {self.when}")
        return ", ".join(parts)

    def implies(self, other: Condition | None, strict: bool) -> bool:
        """Whether every call that meets this condition provably meets `other` (checked as a
        rule whose effect is `strict`, SPEC 10): each of its matchers is written here too, or
        holds for each of the few values this one's matcher allows; its `when` is this one's.
        False where that cannot be shown (lint then says nothing, never something wrong)."""
        if other is None:
            return True
        if other.when is not None and other.when != self.when:
            return False
        mine = {place: m for _, place, m in self.args}
        for _, place, theirs in other.args:
            matcher = mine.get(place)
            if matcher is None:
                return False
            if matcher.text == theirs.text:
                continue  # a match as an allow is one as an ask or deny too, never the reverse
            values = matcher.values()
            if values is None or not all(theirs.holds(v, strict) for v in values):
                return False
        return True

    def fails_for(self, arguments: Mapping[str, Any], context: Mapping[str, str]) -> str | None:
        """Why `when` cannot be evaluated for these arguments (lint tries it with values of the
        declared types), or None when it can; a missing argument is named as such."""
        if self._program is None:
            return None
        try:
            self._program.execute({**context, "args": dict(arguments)})
        except KeyError as exc:  # args.NAME of no declared argument (not a nested key)
            name = str(exc.args[0]) if exc.args else ""
            named = re.search(rf"\bargs\.{re.escape(name)}\b", self.when or "")
            if name and name not in arguments and named:
                return f"args.{name} is not an argument of the tool"
        except TypeError as exc:  # no such overload
            return _first_sentence(str(exc).splitlines()[0])
        except RuntimeError as exc:
            text = str(exc)
            if text.startswith("Undefined variable or function") or "not a valid regex" in text:
                return _first_sentence(text.splitlines()[0]).rstrip(":")
        except Exception:  # e.g. a division by zero: a matter of values, not of types
            return None
        return None

    def failed(
        self,
        arguments: Mapping[str, Any],
        schema: Mapping[str, Any] | None,
        strict: bool,
        context: Mapping[str, str],
        paths: PathReader | None = None,
    ) -> str | None:
        """None when the condition holds for this call; else which part did not (never the
        argument's value). `paths`: how the server reads a path (default: lexically)."""
        for key, place, matcher in self.args:
            if not matcher.holds(lookup(arguments, place, schema), strict, paths):
                return f"{key} {matcher.text}"
        if self._program is not None:
            values = dict(arguments)
            for name, spec in ((schema or {}).get("properties") or {}).items():
                if name not in values and isinstance(spec, Mapping) and "default" in spec:
                    values[name] = spec["default"]
            try:
                # NaN and the infinities make every comparison false: not values CEL can judge
                held = (
                    strict
                    if non_finite(values)
                    else (self._program.execute({**context, "args": values}) is True)
                )
            except Exception:  # a missing key or a type error at run time: fail closed
                held = strict
            if not held:
                return f"when {self.when}"
        return None


def non_finite(value: Any) -> bool:
    """Whether NaN or an infinity is anywhere in `value` (JSON has neither)."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, Mapping):
        return any(non_finite(item) for item in value.values())
    if isinstance(value, list | tuple):
        return any(non_finite(item) for item in value)
    return False


def unencodable(value: Any, where: str = "") -> str | None:
    """Where in `value` a key or a string holds a lone surrogate (text no UTF-8 can encode:
    `"\\udc80"` in JSON, an argument that was not UTF-8 on a command line), as `path` or
    `path.to[2]` ("the arguments" for the top); None: every text encodes. Such text is bad
    input at every front door, refused before anything starts or is recorded."""
    if isinstance(value, str):
        if value.isascii():
            return None
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return where or "the arguments"
        return None
    if isinstance(value, Mapping):
        for key, item in value.items():
            at = f"{where}.{key}" if where else str(key)
            if unencodable(str(key)) is not None:
                return (where + "." if where else "") + "a key"
            found = unencodable(item, at)
            if found is not None:
                return found
        return None
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = unencodable(item, f"{where}[{index}]")
            if found is not None:
                return found
    return None


def _first_sentence(text: str) -> str:
    return text.split(". ", maxsplit=1)[0].rstrip(".")


def compile_condition(args: Mapping[str, Any] | None, when: str | None) -> Condition:
    """A rule's condition; ConditionError (with the argument named) when it cannot be."""
    compiled = []
    for key, raw in (args or {}).items():
        if not isinstance(key, str) or not key:
            raise ConditionError("an argument name is a non-empty string")
        compiled.append((key, split_key(key), compile_matcher(raw, f"args.{key}: ")))
    program = None
    if when is not None:
        import cel  # ~150 ms: only for a policy that has a `when:`

        try:
            program = cel.compile(when)
        except ValueError as exc:
            first = str(exc).splitlines()[0].split(" expecting ")[0]
            raise ConditionError(f"when: {first}") from None
    return Condition(tuple(compiled), when, program)
