"""What looks like a secret written out: known token shapes, and high-entropy values under
secret-sounding names. Lint (BCL3xx), `export` and `import` judge values by the same rules."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Collection, Iterable

from bundlectl.config.expand import references

_TOKENS = [
    ("a GitHub token", re.compile(r"\b(gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,})")),
    ("an AWS access key", re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("a Slack token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    ("an OpenAI-style API key", re.compile(r"\bsk-(proj-|ant-)?[A-Za-z0-9_-]{20,}")),
    ("a Google API key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b")),
    ("a private key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")),
    ("a password in a URL", re.compile(r"[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@", re.I)),
]
SECRET_NAME = re.compile(r"(secret|token|passw|pwd|api[_-]?key|auth|credential|private)", re.I)


def _entropy(text: str) -> float:
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def secret_kind(key: str, value: str) -> str | None:
    """What kind of literal secret `value` is, if any. References (${VAR}) are never secrets."""
    literal = re.sub(r"\$\{[^}]*\}", "", value)
    for kind, pattern in _TOKENS:
        if pattern.search(literal):
            return kind
    candidate = literal.removeprefix("Bearer ").removeprefix("Basic ").strip()
    if (
        SECRET_NAME.search(key)
        and len(candidate) >= 16
        and " " not in candidate
        and _entropy(candidate) >= 3.5
    ):
        return "a high-entropy value in a secret-named key"
    return None


def secret_variables(values: Iterable[tuple[str, str]], secret_inputs: Collection[str]) -> set[str]:
    """The variables that `KEY: value` pairs (a server's env and headers) take secrets from: a
    bundle's secret input, or a secret-sounding key or variable name."""
    return {
        var
        for key, value in values
        for var in references(value)
        if var in secret_inputs or SECRET_NAME.search(key) or SECRET_NAME.search(var)
    }
