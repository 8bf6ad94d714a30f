"""What a tool's definition tells the model (#60): the model reads every listed tool's name,
description and parameters, so a third-party server can hide instructions there. Pure: text in,
findings out, no I/O; `lint` reports them at their position (BCL601-606), `tools --live` on what
the servers say now.

The rules, each documented with its examples in docs/lint-rules.md and measured on the labelled
corpus in tests/examples/descriptions (precision and recall in the docs):

- hidden text: characters a person does not see — Unicode tags (U+E0000-E007F, which spell out
  ASCII invisibly), zero-width and joiner characters, bidi controls, any other format character;
- mixed scripts in a name: letters of two scripts (a Cyrillic `a`, U+0430, in `read_file`)
  impersonate another tool;
- instructions to the model: phrases that address the model rather than describe the tool —
  "ignore previous instructions", "do not tell the user", "before using any tool", reading keys
  and secrets, passing them along; each phrase has a weight, the sum is the confidence;
- shadowing: a description that speaks of another server's tools;
- links and encoded blobs: URLs, long base64 or hex runs;
- parameters that invite secrets: `api_key`, `ssh_key`, `password`, or a catch-all parameter
  whose description asks for file contents or credentials.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass
from typing import Any

REPORTED = 0.5  # confidence from which instructions to the model are reported


@dataclass(frozen=True)
class Hit:
    rule: str  # BCL60x
    where: tuple[str | int, ...]  # below the tool: ("description",), ("input_schema", ...)
    message: str
    confidence: float = 1.0


# Phrases addressed to the model, each with its weight (a sum of 0.5 is reported), its words, and
# the words one of which it needs (looked for first, in the lowered text: a regex runs only then).
_INSTRUCTIONS: list[tuple[re.Pattern[str], float, str, tuple[str, ...]]] = [
    (re.compile(p), weight, label, needs)
    for p, weight, label, needs in [
        (
            r"\b(ignore|disregard|forget)\b.{0,30}\b(previous|prior|above|earlier|all|other|system)\b"
            r".{0,20}\b(instructions?|rules|prompts?|guidelines)",
            1.0,
            "tells the model to ignore its instructions",
            ("ignore", "disregard", "forget"),
        ),
        (
            r"\b(do not|don't|never|without)\b.{0,25}\b(tell|inform|notify|mention|reveal|show|"
            r"alert|ask)(ing)?\b.{0,20}\b(the )?(user|human|person|operator)",
            0.9,
            "tells the model to keep something from the user",
            ("user", "human", "person", "operator"),
        ),
        (
            r"\b(before|prior to|after)\b.{0,15}"
            r"\b(using|calling|invoking|running|executing)\b.{0,20}"
            r"\b(any|every|all|other|each)\b.{0,10}\btools?\b",
            0.6,
            "tells the model what to do around other tools",
            ("tool",),
        ),
        (
            r"(~/?\.ssh|id_rsa|id_ed25519|\.aws/credentials|\.env\b|/etc/passwd|\.netrc|"
            r"\.npmrc|\.git-credentials|kube/config|private[ _]key)",
            0.6,
            "names a secret file",
            (
                "ssh",
                "id_rsa",
                "id_ed25519",
                "credentials",
                ".env",
                "passwd",
                "netrc",
                "npmrc",
                "kube",
                "private",
            ),
        ),
        (
            r"\b(read|include|send|upload|pass|attach|append|copy|collect|forward|exfiltrate)\b"
            r".{0,40}\b(api[ _-]?keys?|passwords?|credentials?|ssh keys?|private keys?|"
            r"cookies?|environment variables|env vars|(secrets?|tokens?) (from|in|of|stored))\b",
            0.5,
            "asks for secrets",
            ("key", "password", "credential", "cookie", "env", "secret", "token"),
        ),
        (
            r"\b(pass|put|include|send|append|embed)\b.{0,30}"
            r"\b(it|its contents?|them|the contents?|"
            r"the file|the result|the output)\b.{0,20}\b(as|in|into|inside)\b.{0,15}"
            r"\b(parameter|argument|field|note|comment|the `?\w+`? (parameter|argument|field))",
            0.5,
            "asks to smuggle data through a parameter",
            ("parameter", "argument", "field", "note", "comment"),
        ),
        (
            r"<\s*(important|system|instructions?|secret|hidden)\s*>",
            0.6,
            "carries a tag addressed to the model",
            ("<",),
        ),
        (
            r"\b(you|the (assistant|model|ai|agent|llm))\s+(must|should|have to|are required to|"
            r"will)\s+(always|never|first|also|now|immediately)\b",
            0.5,
            "gives the model standing orders",
            ("must", "should", "have to", "required to", "will"),
        ),
        (
            r"\b(always|must)\b.{0,15}\b(bcc|cc|forward|redirect|copy)\b",
            0.6,
            "redirects what the user sends",
            ("bcc", "cc", "forward", "redirect", "copy"),
        ),
        (
            r"\b(system prompt|your instructions|your rules|jailbreak|developer mode)\b",
            0.6,
            "speaks of the model's own instructions",
            ("prompt", "instructions", "rules", "jailbreak", "developer mode"),
        ),
        (
            r"\b(this is|it is|that is)\b.{0,15}\b(very )?(important|critical|mandatory|required)\b"
            r".{0,30}\b(otherwise|or else|else)\b",
            0.4,
            "pressures the model",
            ("otherwise", "or else", "else"),
        ),
        (
            r"\b(curl|wget|bash -c|sh -c|powershell|eval\()",
            0.5,
            "carries a command to run",
            ("curl", "wget", "bash -c", "sh -c", "powershell", "eval("),
        ),
    ]
]

_URL = re.compile(r"\b(?:https?|ftp|file|data):[^\s\"'<>)]+", re.IGNORECASE)
_BASE64 = re.compile(r"(?<![A-Za-z0-9+/])[A-Za-z0-9+/]{40,}={0,2}(?![A-Za-z0-9+/])")
_HEX = re.compile(r"\b[0-9a-fA-F]{64,}\b")
_SECRET_NAME = re.compile(
    r"^(api[_-]?key|apikey|access[_-]?key|secret|client[_-]?secret|password|passwd|token|"
    r"auth[_-]?token|bearer|private[_-]?key|ssh[_-]?key|credentials?|cookie|session[_-]?id|"
    r"aws[_-]?secret[_-]?access[_-]?key)$",
    re.IGNORECASE,
)
_CATCH_ALL = re.compile(
    r"^(note|notes|context|extra|metadata|comment|details|info|data|debug)$", re.IGNORECASE
)
_ASKS_FOR_CONTENT = re.compile(
    r"\b(include|contents? of|paste|copy|full text|everything|all (the )?(files?|data)|"
    r"credentials?|keys?|secrets?|tokens?|passwords?|history|conversation)\b",
    re.IGNORECASE,
)


def _hidden(text: str) -> list[str]:
    """The invisible characters of `text`, named (a run of Unicode tags as the text it spells)."""
    if text.isascii():  # no format character is ASCII: most texts end here
        return []
    found: list[str] = []
    tags = "".join(chr(ord(c) - 0xE0000) for c in text if 0xE0000 <= ord(c) <= 0xE007F)
    if tags:
        shown = "".join(c if c.isprintable() else "?" for c in tags)[:60]
        found.append(f"Unicode tags spelling {shown!r}")
    for char in dict.fromkeys(text):
        code = ord(char)
        if 0xE0000 <= code <= 0xE007F:
            continue
        if unicodedata.category(char) in ("Cf", "Co", "Cn") or code in (0x115F, 0x1160, 0x3164):
            name = unicodedata.name(char, "unnamed")
            found.append(f"U+{code:04X} {name}")
    return found


def _scripts(name: str) -> set[str]:
    scripts = set()
    for char in name:
        if char.isalpha():
            label = unicodedata.name(char, "")
            scripts.add(label.split(" ")[0] if label else "UNKNOWN")
    return scripts


def instructions(text: str) -> tuple[float, list[str]]:
    """How strongly `text` addresses the model (0-1), and why."""
    folded = text if text.isascii() else unicodedata.normalize("NFKC", text)
    low = folded.lower()
    score, why = 0.0, []
    for pattern, weight, label, needs in _INSTRUCTIONS:
        if any(word in low for word in needs) and pattern.search(low):
            score += weight
            why.append(label)
    return min(score, 1.0), why


_WORD = re.compile(r"[\w.]*\w")


def _words(text: str) -> list[str]:
    """The identifiers of a text, dotted ones whole (`mail.send_email`) and in parts."""
    found = _WORD.findall(text)
    return found + [part for word in found if "." in word for part in word.split(".")]


def scan_text(text: str, where: tuple[str | int, ...], others: Set[str]) -> list[Hit]:
    """The findings of one text the model reads (a description)."""
    hits: list[Hit] = []
    hidden = _hidden(text)
    if hidden:
        hits.append(
            Hit("BCL601", where, "holds characters a person cannot see: " + "; ".join(hidden[:4]))
        )
    score, why = instructions(text)
    if score >= REPORTED:
        hits.append(
            Hit(
                "BCL603",
                where,
                f"addresses the model (confidence {score:.1f}): {'; '.join(why)}",
                score,
            )
        )
    named = list(dict.fromkeys(t for t in _words(text) if t in others)) if others else []
    if named:
        hits.append(
            Hit("BCL604", where, "speaks of another server's tools: " + ", ".join(named[:3]))
        )
    links = _URL.findall(text) if ":" in text else []
    blobs = [b for b in _BASE64.findall(text) if not b.isalpha()] + _HEX.findall(text)
    if links or blobs:
        what = ([f"a link ({links[0][:60]})"] if links else []) + (
            [f"an encoded run of {len(blobs[0])} characters"] if blobs else []
        )
        hits.append(Hit("BCL605", where, "carries " + " and ".join(what)))
    return hits


def scan_tool(
    name: str, description: str, schema: Mapping[str, Any] | None, others: Iterable[str] = ()
) -> list[Hit]:
    """Everything of one tool the model reads: its name, description and parameters. `others`:
    the names of other servers' tools (shadowing); a set is used as it is."""
    others = others if isinstance(others, Set) else frozenset(others)
    hits: list[Hit] = []
    hidden = _hidden(name)
    if hidden:
        hits.append(
            Hit(
                "BCL601",
                ("name",),
                "the name holds characters a person cannot see: " + "; ".join(hidden[:4]),
            )
        )
    if len(_scripts(name)) > 1:
        hits.append(
            Hit(
                "BCL602",
                ("name",),
                f"the name {name!r} mixes scripts "
                f"({', '.join(sorted(_scripts(name)))}): it can pass for another tool",
            )
        )
    hits += scan_text(description, ("description",), others)
    properties = (schema or {}).get("properties")
    if isinstance(properties, dict):
        for key, spec in properties.items():
            where: tuple[str | int, ...] = ("input_schema", "properties", str(key))
            text = spec.get("description", "") if isinstance(spec, dict) else ""
            key_text = str(key)
            if _hidden(key_text) or len(_scripts(key_text)) > 1:
                hits.append(
                    Hit(
                        "BCL602",
                        where,
                        f"parameter {key_text!r} has hidden or mixed-script characters",
                    )
                )
            if isinstance(text, str) and text:
                hits += scan_text(text, (*where, "description"), others)
            if _SECRET_NAME.match(key_text):
                hits.append(
                    Hit(
                        "BCL606",
                        where,
                        f"parameter {key_text!r} asks the model for a "
                        "secret: the model would have to hold it",
                    )
                )
            elif (
                _CATCH_ALL.match(key_text)
                and isinstance(text, str)
                and _ASKS_FOR_CONTENT.search(text)
            ):
                hits.append(
                    Hit(
                        "BCL606",
                        where,
                        f"catch-all parameter {key_text!r} asks for contents: {text[:80]!r}",
                    )
                )
    return hits


WITHHELD = "(bundlectl withheld this description: {why}; `bundlectl lint` shows it)"


def unseen(name: str, description: str, schema: Mapping[str, Any] | None) -> str | None:
    """Why a tool's definition must not reach a model as it is — text a person cannot see in
    its description or a parameter's, or a name that mixes scripts (BCL601, BCL602) — or None."""
    if _hidden(name) or len(_scripts(name)) > 1:
        return "its name has hidden or mixed-script characters"
    if _hidden(description):  # what they spell is never repeated to the model
        return "it holds characters a person cannot see"
    properties = (schema or {}).get("properties")
    for key, spec in properties.items() if isinstance(properties, dict) else ():
        text = spec.get("description", "") if isinstance(spec, dict) else ""
        if _hidden(str(key)) or (isinstance(text, str) and _hidden(text)):
            return f"its parameter {str(key)!r} holds characters a person cannot see"
    return None


def withheld(
    name: str, description: str, schema: Mapping[str, Any] | None, errors: Set[str]
) -> str | None:
    """Why the gateway withholds a tool's descriptions from the model: what `unseen` says, and
    instructions to the model (BCL603, a warning by default) where the project's
    `lint.severity` makes that rule an error — in the description or a parameter's. None: it
    is shown as it is. The reason never repeats what the text says."""
    why = unseen(name, description, schema)
    if why is not None or "BCL603" not in errors:
        return why
    texts = [("its description", description)]
    properties = (schema or {}).get("properties")
    for key, spec in properties.items() if isinstance(properties, dict) else ():
        text = spec.get("description") if isinstance(spec, dict) else None
        if isinstance(text, str):
            texts.append((f"its parameter {str(key)!r}", text))
    for where, text in texts:
        score, _ = instructions(text)
        if score >= REPORTED:
            return f"{where} addresses the model (BCL603, confidence {score:.1f})"
    return None


def withheld_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """An input schema whose parameters' descriptions are withheld (types and names kept: the
    policy and the call need them)."""
    copy = dict(schema)
    properties = schema.get("properties")
    if isinstance(properties, dict):
        copy["properties"] = {
            key: {k: v for k, v in spec.items() if k not in ("description", "title")}
            if isinstance(spec, dict)
            else spec
            for key, spec in properties.items()
        }
    return copy
