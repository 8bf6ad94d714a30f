"""JSON Schema checks of what crosses a server's boundary — a call's arguments against the
tool's input schema, a result's structured content against its output schema — with one
checker per schema object, whichever session or front door asks."""

from __future__ import annotations

import contextlib
import functools
import json
from typing import Any


def preload() -> None:
    """Import the validator now, while a stdio server we just started gets ready (hundreds of
    milliseconds): the import (~20 ms) then costs nothing on the way to the call."""
    with contextlib.suppress(ImportError):
        import jsonschema_rs  # noqa: F401


class Checker:
    """A schema's validators, made once per schema object (a warm gateway checks every call of
    a tool against the same one; writing the schema out as a key cost more than checking small
    arguments).

    `jsonschema_rs` (Rust) answers whether an instance is valid in about a microsecond; when it
    says no, or cannot take the schema, Python's `jsonschema` decides and words the errors, so
    every message and every refusal is jsonschema's, as the SDK's own servers report them.
    Neither fetches a `$ref` from the network or a file."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.schema = schema
        self.fast: Any = None
        # A schema it refuses goes to jsonschema; so does every schema where it is not
        # installed (it is a CPython-only dependency).
        with contextlib.suppress(Exception):
            import jsonschema_rs

            self.fast = jsonschema_rs.validator_for(schema, validate_formats=False, offline=True)

    def valid(self, instance: Any) -> bool:
        """True when `instance` is certainly valid (False: ask `full`)."""
        try:
            return self.fast is not None and bool(self.fast.is_valid(instance))
        except Exception:  # numbers beyond 64 bits, and anything else it cannot take
            return False

    @functools.cached_property
    def full(self) -> Any:
        """jsonschema's validator (raises what jsonschema raises on a schema it cannot use)."""
        return _validator(json.dumps(self.schema, sort_keys=True))


_CHECKERS: dict[int, Checker] = {}


def checker(schema: dict[str, Any]) -> Checker:
    """The schema object's checker: found by identity while the object lives."""
    hit = _CHECKERS.get(id(schema))
    if hit is not None and hit.schema is schema:
        return hit
    if len(_CHECKERS) >= 1024:
        _CHECKERS.clear()
    made = _CHECKERS[id(schema)] = Checker(schema)  # it keeps the object, and so its id
    return made


@functools.lru_cache(maxsize=256)
def _validator(schema: str) -> Any:
    """jsonschema's validator for a schema (as canonical JSON), made once. Its registry
    retrieves nothing: left alone, jsonschema fetches a `$ref` that names a URL (a server's
    schema could make us send requests anywhere)."""
    from jsonschema import Draft202012Validator
    from jsonschema.validators import validator_for
    from referencing import Registry

    parsed = json.loads(schema)
    cls = validator_for(parsed, default=Draft202012Validator)
    nothing = Registry(retrieve=_retrieve_nothing)  # type: ignore[call-arg]  # attrs-made
    return cls(parsed, registry=nothing)


def _retrieve_nothing(uri: str) -> Any:
    from referencing.exceptions import NoSuchResource

    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]  # attrs-made __init__
