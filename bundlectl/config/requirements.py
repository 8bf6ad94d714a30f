"""Bundle requirements: a bundle name and an optional PEP 440 specifier set (`github>=1,<2`).

A deliberately small grammar (no extras, markers or URLs), parsed with `packaging.specifiers`
alone: `packaging.requirements` costs about 40 ms to import, a tenth of a command's budget.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.specifiers import InvalidSpecifier, SpecifierSet

NAME_RE = r"^[a-z0-9][a-z0-9_-]{0,62}$"
NAME_HELP = (
    "lowercase letters, digits, '-' and '_', starting with a letter or digit, at most 63 characters"
)
_SPLIT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(.*?)\s*$", re.DOTALL)
_NAME = re.compile(NAME_RE)


@dataclass(frozen=True)
class BundleRequirement:
    """A parsed requirement."""

    name: str
    specifier: SpecifierSet
    text: str


def parse_requirement(text: str) -> BundleRequirement:
    """Parse `name[specifiers]`; ValueError with a readable reason otherwise."""
    match = _SPLIT.match(text)
    if not match:
        raise ValueError(
            f"invalid requirement {text!r}: expected a bundle name, "
            "optionally followed by a version specifier such as >=1,<2"
        )
    name, spec = match.groups()
    if not _NAME.match(name):
        raise ValueError(f"bundle name {name!r} in {text!r} must be {NAME_HELP}")
    try:
        specifier = SpecifierSet(spec)
    except InvalidSpecifier:
        raise ValueError(
            f"invalid version specifier {spec!r} in {text!r}: use PEP 440 "
            "specifiers such as ==1.2.0, >=1,<2 or ~=1.1 (no extras, markers or "
            "URLs)"
        ) from None
    return BundleRequirement(name, specifier, text)


def requirement_name(text: str) -> str:
    return parse_requirement(text).name
