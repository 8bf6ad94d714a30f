"""Personal data kept out of the model's context (SPEC 9 "Privacy"): tool results are scanned and
each match replaced by a stable token per session (`[EMAIL_1]`); a later call's arguments get the
real values back only for the tools `privacy.detokenize` names. The token map lives in memory for
the session and is never logged, audited or written.

Detectors: `email`, `phone` (candidates found by a pattern, confirmed by `phonenumbers`, Google's
libphonenumber metadata: real numbering plans, not any run of digits), `credit_card` (Luhn),
`iban` (mod 97), `ip_address` (the `ipaddress` module), and named regexes. One combined pattern
finds every candidate in one pass over the text; a candidate that fails its check is left alone.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

BUILTIN = ("email", "phone", "credit_card", "iban", "ip_address")
# Tried in this order at each position: the strictest checks first, phone (any digits) last.
_ORDER = ("email", "iban", "credit_card", "ip_address", "phone")

_PATTERNS = {
    "email": r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}",
    "iban": r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?\b",
    "credit_card": r"\b\d(?:[ -]?\d){12,18}\b",
    "ip_address": r"\b(?:\d{1,3}\.){3}\d{1,3}\b|\b(?:[0-9A-Fa-f]{1,4}:){7}[0-9A-Fa-f]{1,4}\b",
    "phone": r"(?<![\w+])\+?\(?\d[\d ().-]{5,18}\d\b",
}
_TOKEN = re.compile(r"\[([A-Z][A-Z0-9_]*)_(\d+)\]")


def luhn(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char)
        if index % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def iban_ok(text: str) -> bool:
    compact = text.replace(" ", "")
    if not 15 <= len(compact) <= 34:
        return False
    moved = compact[4:] + compact[:4]
    number = "".join(str(int(c, 36)) for c in moved)
    return int(number) % 97 == 1


def _card(text: str) -> bool:
    digits = text.replace(" ", "").replace("-", "")
    return 13 <= len(digits) <= 19 and luhn(digits)


def _ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


@functools.lru_cache(maxsize=4096)
def _phone(text: str) -> bool:
    """A real number of some numbering plan (international with +, else North American)."""
    import phonenumbers

    digits = [c for c in text if c.isdigit()]
    if len(digits) < 7:
        return False
    try:
        number = phonenumbers.parse(text, None if text.startswith("+") else "US")
    except phonenumbers.NumberParseException:
        return False
    return bool(phonenumbers.is_valid_number(number))


CHECKS: dict[str, Callable[[str], bool]] = {
    "email": lambda text: True,
    "iban": iban_ok,
    "credit_card": _card,
    "ip_address": _ip,
    "phone": _phone,
}


@dataclass(frozen=True)
class Detector:
    name: str  # "email", or a named pattern's name
    pattern: str
    check: Callable[[str], bool] = lambda text: True

    @functools.cached_property
    def label(self) -> str:
        return re.sub(r"[^A-Z0-9]+", "_", self.name.upper())


def detectors(settings: list[Any]) -> list[Detector]:
    """The configured detectors, built-ins in a fixed order first (a card number before the
    phone detector can take its digits)."""
    chosen: list[Detector] = []
    names = {s for s in settings if isinstance(s, str)}
    for name in _ORDER:
        if name in names:
            chosen.append(Detector(name, _PATTERNS[name], CHECKS[name]))
    for item in settings:
        if not isinstance(item, str):
            chosen.append(Detector(item.name, item.pattern))
    return chosen


_EMAIL = re.compile(_PATTERNS["email"])
# Every run a phone, card or IP address can be in ([0-9], not \d: ASCII digits scan ~2x faster).
_DIGITS = re.compile(r"[0-9][0-9 ().-]{5,}[0-9]")
_IBAN_START = re.compile(r"[A-Z][A-Z][0-9][0-9]")
# ISO dates are everywhere in results and never a phone number: blanked (same length, in C)
# before the digit scan, so they cost no Python work.
_DATES = re.compile(r"[0-9]{4}-[0-9][0-9]-[0-9][0-9](?![0-9])")
_IBAN = re.compile(_PATTERNS["iban"])
_CARD = re.compile(_PATTERNS["credit_card"])
_IP = re.compile(_PATTERNS["ip_address"])
_PHONE = re.compile(r"(?<![\w.+])\+?\(?\d[\d ().-]{5,18}\d(?![\w.])")


@dataclass
class Tokenizer:
    """One session's tokens: value ↔ token, in memory only.

    Fast on large results: e-mail addresses are found from each `@` (a C-speed search), digits
    in one pass over numeric runs that the card, IP and phone checks then classify, IBANs from a
    two-letters-two-digits prefix; only named patterns get a pass of their own."""

    detectors: list[Detector]
    _tokens: dict[tuple[str, str], str] = field(default_factory=dict)  # (label, value) → token
    _values: dict[str, str] = field(default_factory=dict)  # token → value
    _counts: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._by_name = {d.name: d for d in self.detectors}
        self._custom = [(d, re.compile(d.pattern)) for d in self.detectors if d.name not in CHECKS]

    def __repr__(self) -> str:  # never show the map, even in a traceback
        return f"Tokenizer({len(self._values)} tokens)"

    def token(self, detector: Detector, value: str) -> str:
        key = (detector.label, value)
        if key not in self._tokens:
            self._counts[detector.label] = self._counts.get(detector.label, 0) + 1
            token = f"[{detector.label}_{self._counts[detector.label]}]"
            self._tokens[key] = token
            self._values[token] = value
        return self._tokens[key]

    def _spans(self, text: str) -> list[tuple[int, int, Detector]]:
        found: list[tuple[int, int, Detector]] = []
        named = self._by_name
        if "email" in named:
            at = text.find("@")
            while at >= 0:
                window = _EMAIL.search(text, max(0, at - 64), at + 256)
                while window is not None and window.end() <= at:
                    window = _EMAIL.search(text, window.end(), at + 256)
                if window is not None and window.start() <= at:
                    found.append((window.start(), window.end(), named["email"]))
                    at = text.find("@", window.end())
                else:
                    at = text.find("@", at + 1)
        if "iban" in named:
            for start in _IBAN_START.finditer(text):
                match = _IBAN.match(text, start.start())
                alone = start.start() == 0 or not text[start.start() - 1].isalnum()
                if match and alone and iban_ok(match.group()):
                    found.append((match.start(), match.end(), named["iban"]))
        if {"credit_card", "ip_address", "phone"} & set(named):
            masked = _DATES.sub("          ", text) if "-" in text else text
            for run in _DIGITS.finditer(masked):
                found.extend(self._numbers(masked, run.start(), run.end()))
        for detector, pattern in self._custom:
            found.extend((m.start(), m.end(), detector) for m in pattern.finditer(text))
        return found

    def _numbers(self, text: str, start: int, end: int) -> list[tuple[int, int, Detector]]:
        """What a run of digits (and separators) holds: a card, IP addresses, phone numbers.
        Cheap counts first: most runs in real results are dates, times and sizes."""
        named = self._by_name
        if start and text[start - 1] == "+":
            start -= 1
        run = text[start:end]
        digits = len(run) - run.count(" ") - run.count("-") - run.count(".") - run.count("(")
        digits -= run.count(")") + run.count("+")
        kinds = []
        if digits >= 13 and "credit_card" in named:
            kinds.append(("credit_card", _CARD))
        if run.count(".") >= 3 and "ip_address" in named:
            kinds.append(("ip_address", _IP))
        if digits >= 7 and "phone" in named:
            kinds.append(("phone", _PHONE))
        out: list[tuple[int, int, Detector]] = []
        for kind, pattern in kinds:
            detector = named[kind]
            for match in pattern.finditer(text, start, end):
                if detector.check(match.group()):
                    out.append((match.start(), match.end(), detector))
            if out:
                return out
        return out

    def text(self, text: str) -> str:
        """`text` with every confirmed match replaced by its token."""
        if not self.detectors or not text:
            return text
        spans = sorted(self._spans(text), key=lambda span: (span[0], -span[1]))
        if not spans:
            return text
        parts: list[str] = []
        position = 0
        for start, end, detector in spans:
            if start < position:
                continue  # inside a match already replaced
            parts.append(text[position:start])
            parts.append(self.token(detector, text[start:end]))
            position = end
        parts.append(text[position:])
        return "".join(parts)

    def value(self, value: Any) -> Any:
        """Every string in a JSON-like value tokenized (keys kept)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        return value

    def restore(self, value: Any) -> Any:
        """Tokens of this session put back to their values (for a `detokenize` tool)."""
        if isinstance(value, str):
            return _TOKEN.sub(lambda m: self._values.get(m.group(), m.group()), value)
        if isinstance(value, list):
            return [self.restore(v) for v in value]
        if isinstance(value, dict):
            return {k: self.restore(v) for k, v in value.items()}
        return value

    def _block(self, block: Any) -> Any:
        kind = getattr(block, "type", None)
        if kind == "text":
            return block.model_copy(update={"text": self.text(block.text)})
        if kind == "resource" and hasattr(block.resource, "text"):
            text = self.text(block.resource.text)
            return block.model_copy(
                update={"resource": block.resource.model_copy(update={"text": text})}
            )
        return block

    def result(self, result: Any) -> Any:
        """A CallToolResult with its text and structured content tokenized."""
        content = [self._block(block) for block in result.content]
        update: dict[str, Any] = {"content": content}
        if result.structured_content is not None:
            update["structured_content"] = self.value(result.structured_content)
        return result.model_copy(update=update)


@dataclass
class Privacy:
    """The project's privacy settings: who gets real values, and a tokenizer per session."""

    detectors: list[Detector]
    detokenize: list[str]

    @classmethod
    def of(cls, config: Any) -> Privacy | None:
        settings = config.privacy
        if not settings.tokenize:
            return None
        return cls(detectors(settings.tokenize), list(settings.detokenize))

    def session(self) -> Tokenizer:
        return Tokenizer(self.detectors)

    def gets_real_values(self, server: str, tool: str) -> bool:
        from bundlectl.patterns import part_matches, split_rule

        for rule in self.detokenize:
            server_part, tool_part = split_rule(rule)
            if part_matches(server_part, server) and part_matches(tool_part, tool):
                return True
        return False
