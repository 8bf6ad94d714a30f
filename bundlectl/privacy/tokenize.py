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

import base64
import functools
import operator
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bundlectl.config.settings import seconds
from bundlectl.policy.patterns import part_matches, split_rule
from bundlectl.privacy.checks import CHECKS, iban_ok
from bundlectl.privacy.tokens import SharedTokens

BUILTIN = ("email", "phone", "credit_card", "iban", "ip_address")
# Tried in this order at each position: the strictest checks first, phone (any digits) last.
_ORDER = ("email", "iban", "credit_card", "ip_address", "phone")

_PATTERNS = {
    "email": r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}",
    "iban": r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?\b",
    # Card numbers as printed: 13-19 digits in groups of four (one separator throughout) or
    # Amex's 4-6-5, starting with a card network's digit (2-6).
    "credit_card": (
        r"\b(?:[2-6][0-9]{3}([ -]?)[0-9]{4}\1[0-9]{4}\1[0-9]{1,7}"
        r"|3[47][0-9]{2}([ -]?)[0-9]{6}\2[0-9]{5})\b"
    ),
    "ip_address": r"\b(?:\d{1,3}\.){3}\d{1,3}\b|\b(?:[0-9A-Fa-f]{1,4}:){7}[0-9A-Fa-f]{1,4}\b",
    # International (+, up to E.164's 15 digits) or North American (area code and exchange
    # start with 2-9). phonenumbers then decides whether the number exists.
    "phone": (
        r"(?<![\w.+])(?:\+[0-9](?:[ ().-]{0,2}[0-9]){6,14}"
        r"|(?:1[ .-]?)?(?:\([2-9][0-9]{2}\) ?|[2-9][0-9]{2}[ .-]?)[2-9][0-9]{2}[ .-]?[0-9]{4})"
        r"(?!\w|\.[0-9])"
    ),
}
_TOKEN = re.compile(r"\[([A-Z][A-Z0-9_]*)_(\d+)\]")
_START = operator.itemgetter(0)
_RUNS_REMEMBERED = 8192


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
# Every run a phone, card or IP address can be in ([0-9], not \d: ASCII digits scan ~2x faster),
# starting at a number's first digit. ISO dates are everywhere in results and never part of a
# phone or card number: a run that is only a date (`2026-11-23T10:00`) is not even started, so
# it costs no Python work; dates inside a run are blanked before the run is classified.
_DIGITS = re.compile(
    r"[0-9](?<![0-9][0-9])"
    r"(?![0-9]{3}-[0-9][0-9]-[0-9][0-9](?![0-9]|[ ().-]+[0-9]))"
    r"[0-9 ().-]{5,}[0-9]"
)
_DATES = re.compile(r"(?<![0-9])[0-9]{4}-[0-9][0-9]-[0-9][0-9](?![0-9])")
_IBAN_START = re.compile(r"[A-Z][A-Z][0-9][0-9]")
_IBAN = re.compile(_PATTERNS["iban"])
_CARD = re.compile(_PATTERNS["credit_card"])
_IP = re.compile(_PATTERNS["ip_address"])
_PHONE = re.compile(_PATTERNS["phone"])


def _blank(match: re.Match[str]) -> str:
    return " " * len(match.group())


def _shorter(text: str, first: int, last: int) -> int:
    """The end of the candidate `text[first:last]` one group of digits shorter."""
    cut = last - 1
    while cut > first and text[cut - 1].isdigit():
        cut -= 1
    while cut > first and not text[cut - 1].isdigit():
        cut -= 1
    return cut


@dataclass
class Tokenizer:
    """One session's tokens: value ↔ token, in memory; with `shared`, an agent's map that
    replicas share through the state store (`privacy.tokens`), which gives the tokens and
    keeps the values, this one caching what it learnt.

    Fast on large results: e-mail addresses are found from each `@` (a C-speed search), digits
    in one pass over numeric runs that the card, IP and phone checks then classify, IBANs from a
    two-letters-two-digits prefix; only named patterns get a pass of their own."""

    detectors: list[Detector]
    shared: SharedTokens | None = None
    _tokens: dict[tuple[str, str], str] = field(default_factory=dict)  # (label, value) → token
    _values: dict[str, str] = field(default_factory=dict)  # token → value
    _counts: dict[str, int] = field(default_factory=dict)
    _runs: dict[str, list[tuple[int, int, Detector]]] = field(default_factory=dict)
    _asked: dict[tuple[str, str], float] = field(default_factory=dict)  # shared: when asked

    def __post_init__(self) -> None:
        named = {d.name: d for d in self.detectors}
        self._email = named.get("email")
        self._iban = named.get("iban")
        # Tried in this order on a run of digits; the first kind that matches takes the run.
        self._number_kinds = [
            (named[kind], pattern, minimum, dots)
            for kind, pattern, minimum, dots in (
                ("credit_card", _CARD, 13, 0),
                ("ip_address", _IP, 7, 3),
                ("phone", _PHONE, 7, 0),
            )
            if kind in named
        ]
        self._custom = [(d, re.compile(d.pattern)) for d in self.detectors if d.name not in CHECKS]

    def __repr__(self) -> str:  # never show the map, even in a traceback
        return f"Tokenizer({len(self._values)} tokens)"

    def token(self, detector: Detector, value: str) -> str:
        key = (detector.label, value)
        shared = self.shared
        if shared is not None:  # the store gives it (and keeps the map alive while it is used)
            now = time.monotonic()
            if key not in self._tokens or self._asked[key] + shared.refresh < now:
                token = shared.token_for(detector.label, value)
                self._tokens[key], self._values[token], self._asked[key] = token, value, now
            return self._tokens[key]
        if key not in self._tokens:
            self._counts[detector.label] = self._counts.get(detector.label, 0) + 1
            token = f"[{detector.label}_{self._counts[detector.label]}]"
            self._tokens[key] = token
            self._values[token] = value
        return self._tokens[key]

    def _spans(self, text: str) -> list[tuple[int, int, Detector]]:
        found: list[tuple[int, int, Detector]] = []
        email = self._email
        if email is not None:
            at = text.find("@")
            while at >= 0:
                window = _EMAIL.search(text, max(0, at - 64), at + 256)
                while window is not None and window.end() <= at:
                    window = _EMAIL.search(text, window.end(), at + 256)
                if window is not None and window.start() <= at:
                    found.append((window.start(), window.end(), email))
                    at = text.find("@", window.end())
                else:
                    at = text.find("@", at + 1)
        iban = self._iban
        if iban is not None:
            for start in _IBAN_START.finditer(text):
                match = _IBAN.match(text, start.start())
                alone = start.start() == 0 or not text[start.start() - 1].isalnum()
                if match and alone and iban_ok(match.group()):
                    found.append((match.start(), match.end(), iban))
        if self._number_kinds:
            numbers = self._numbers
            for run in _DIGITS.finditer(text):
                numbers(text, run.start(), run.end(), found)
        for detector, pattern in self._custom:
            found.extend((m.start(), m.end(), detector) for m in pattern.finditer(text))
        return found

    def _numbers(
        self, text: str, start: int, end: int, found: list[tuple[int, int, Detector]]
    ) -> None:
        """What a run of digits (and separators) holds: a card, IP addresses or phone numbers.
        The kind's own pattern and check decide; the run's length only rules kinds out.
        Results repeat the same numbers (a user's phone on every row): the answer for a run,
        with the one character either side its patterns look at, is remembered."""
        if start and text[start - 1] in "+(":
            start -= 1
            if start and text[start - 1] == "+":  # +(
                start -= 1
        key = text[start - 1 if start else 0 : end + 1]
        known = self._runs.get(key)
        if known is None:
            known = self._classify(text, start, end)
            if len(self._runs) >= _RUNS_REMEMBERED:
                self._runs.clear()
            self._runs[key] = known
        for offset, stop, detector in known:
            found.append((start + offset, start + stop, detector))

    def _classify(self, text: str, start: int, end: int) -> list[tuple[int, int, Detector]]:
        """The matches in `text[start:end]`, relative to `start`. The first kind with a
        confirmed match takes the run; a candidate that fails its check is tried shorter (a
        number followed by another: `650-253-0000 12`) before the search moves on."""
        before = 1 if start else 0
        local = text[start - before : end + 1]
        if "-" in local:
            local = _DATES.sub(_blank, local)
        stop = before + end - start
        out: list[tuple[int, int, Detector]] = []
        for detector, pattern, minimum, dots in self._number_kinds:
            if end - start < minimum or (dots and local.count(".") < dots):
                continue
            check, position = detector.check, before
            while (match := pattern.search(local, position, stop)) is not None:
                first, last = match.span()
                while not check(local[first:last]):
                    last = _shorter(local, first, last)
                    if last - first < minimum:
                        break
                else:
                    out.append((first - before, last - before, detector))
                    position = last
                    continue
                position = first + 1
            if out:
                break
        return out

    def text(self, text: str) -> str:
        """`text` with every confirmed match replaced by its token; where two matches overlap,
        the one that starts first wins (the longer one if both start at one place)."""
        if not self.detectors or not text:
            return text
        spans = self._spans(text)
        if not spans:
            return text
        spans.sort(key=_START)  # stable: at one start, detectors keep their order
        parts: list[str] = []
        known = self._tokens if self.shared is None else {}  # shared: `token` says when to ask
        position = last = -1
        for start, end, detector in spans:
            if start < position:
                if start != last or end <= position:
                    continue  # inside a match already replaced
                parts.pop()  # a longer match at the same start replaces the shorter one
            else:
                parts.append(text[max(position, 0) : start])
            value = text[start:end]
            parts.append(known.get((detector.label, value)) or self.token(detector, value))
            position, last = end, start
        parts.append(text[max(position, 0) :])
        return "".join(parts)

    def value(self, value: Any) -> Any:
        """Every string in a JSON-like value tokenized, keys included (a table keyed by
        e-mail address is still personal data)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, dict):
            return {
                self.text(k) if isinstance(k, str) else k: self.value(v) for k, v in value.items()
            }
        return value

    def conceal(self, text: str) -> str:
        """`text` for the agent's eyes: every real value this session knows back to its token
        (an error message may quote a value a detokenize tool was given), then tokenized."""
        if self._values:
            values = sorted(set(self._values.values()), key=len, reverse=True)
            pattern = re.compile("|".join(re.escape(v) for v in values if v))
            by_value = {v: t for t, v in self._values.items()}
            text = pattern.sub(lambda m: by_value[m.group()], text)
        return self.text(text)

    def listed(self, item: Any, *fields: str) -> Any:
        """A listed resource, template or prompt (a protocol model) with the text of `fields`
        tokenized, and its prompt arguments' descriptions: a listing shows what a read would."""
        update: dict[str, Any] = {}
        for name in fields:
            value = getattr(item, name, None)
            if isinstance(value, str) and (tokenized := self.text(value)) != value:
                update[name] = tokenized
        arguments = getattr(item, "arguments", None)
        if arguments:
            update["arguments"] = [self.listed(a, "description", "title") for a in arguments]
        return item.model_copy(update=update) if update else item

    def restore(self, value: Any) -> Any:
        """Tokens of this session put back to their values (for a `detokenize` tool)."""
        if isinstance(value, str):
            return _TOKEN.sub(lambda m: self._value_of(m.group()), value)
        if isinstance(value, list):
            return [self.restore(v) for v in value]
        if isinstance(value, dict):
            return {k: self.restore(v) for k, v in value.items()}
        return value

    def _value_of(self, token: str) -> str:
        """The value behind a token (itself when no one gave it): this map's, or one another
        replica gave in the shared map (a token's value never changes, so it is kept)."""
        found = self._values.get(token)
        if found is None and self.shared is not None:
            found = self.shared.value_of(token)
            if found is not None:
                self._values[token] = found
        return token if found is None else found

    def _block(self, block: Any) -> Any:
        kind = getattr(block, "type", None)
        if kind == "text":
            return block.model_copy(update={"text": self.text(block.text)})
        if kind == "resource":
            return block.model_copy(update={"resource": self.contents(block.resource)})
        if kind == "resource_link":
            update = {
                name: self.text(getattr(block, name))
                for name in ("name", "title", "description")
                if isinstance(getattr(block, name, None), str)
            }
            return block.model_copy(update={**update, "uri": self.text(str(block.uri))})
        return block

    def contents(self, item: Any) -> Any:
        """A resource's contents (embedded, or read): its URI and text tokenized, and a blob
        that is UTF-8 text too (images and other binary data are left as they are)."""
        update: dict[str, Any] = {"uri": self.text(str(item.uri))}
        if isinstance(getattr(item, "text", None), str):
            update["text"] = self.text(item.text)
        blob = getattr(item, "blob", None)
        if isinstance(blob, str):
            try:
                decoded = base64.b64decode(blob, validate=True).decode("utf-8")
            except (ValueError, UnicodeDecodeError):
                decoded = None
            if decoded is not None and (hidden := self.text(decoded)) != decoded:
                update["blob"] = base64.b64encode(hidden.encode()).decode("ascii")
        return item.model_copy(update=update)

    def read(self, result: Any) -> Any:
        """A ReadResourceResult with every contents item tokenized."""
        return result.model_copy(update={"contents": [self.contents(c) for c in result.contents]})

    def prompt(self, result: Any) -> Any:
        """A GetPromptResult with its description and every message's content tokenized."""
        messages = [
            m.model_copy(update={"content": self._block(m.content)}) for m in result.messages
        ]
        update: dict[str, Any] = {"messages": messages}
        if isinstance(result.description, str):
            update["description"] = self.text(result.description)
        return result.model_copy(update=update)

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
    ttl: float = 86400.0  # a shared map's life in the store after its last use

    @classmethod
    def of(cls, config: Any) -> Privacy | None:
        settings = config.privacy
        if not settings.tokenize:
            return None
        return cls(detectors(settings.tokenize), list(settings.detokenize), seconds(settings.ttl))

    def session(self, shared: SharedTokens | None = None) -> Tokenizer:
        return Tokenizer(self.detectors, shared)

    def gets_real_values(self, server: str, tool: str) -> bool:
        for rule in self.detokenize:
            server_part, tool_part = split_rule(rule)
            if part_matches(server_part, server) and part_matches(tool_part, tool):
                return True
        return False
