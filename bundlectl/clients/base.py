"""What every client module shares (`bundlectl.clients` lists the modules).

The shared model: an `Export` is the servers an agent may use, each with the agent's decision
for every declared tool (`ServerPlan`); a client writes what it can express exactly and names,
as `Misfit`s, the rules it cannot — the command then fails (exit 1) or, with `--via auto`, falls
back to the gateway entry. `Imported` is what a client file says, in bundlectl's terms.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the CLI reads NAMES at start-up: no policy engine for that
    from bundlectl.policy.rules import Decision

GATEWAY_ENTRY = "bundlectl"  # the one server entry of a gateway export
_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


@dataclass
class ServerPlan:
    """One server the agent may use: how it runs, and the agent's decision on each tool."""

    name: str
    spec: Any  # models.ServerSpec (with `${VAR}` references, never values)
    decisions: list[Decision]  # one per tool of its catalog (declared, or live)
    whole: str | None = None  # "allow"/"ask": the policy covers every tool, declared or not
    secret_vars: frozenset[str] = frozenset()
    live: bool = False  # the catalog was read from the running server, not declared
    builtin: bool = False  # a built-in server: its declared catalog is its own
    unlisted_denied: bool = False  # the policy could deny a tool missing from the catalog

    def tools(self, effect: str) -> list[str]:
        return [d.tool for d in self.decisions if d.effect == effect]

    @property
    def stale_risk(self) -> bool:
        """Whether the client would have to be told a tool outside the declared catalog is
        denied: a catalog nobody checked against the server (not `--live`, not built in),
        where the policy could deny a tool the server has and the catalog lacks. A client
        that asks about or offers tools it is not told of would grant such a tool."""
        return self.whole is None and not (self.live or self.builtin) and self.unlisted_denied

    def stale_rule(self) -> str:
        """The misfit's label for `stale_risk`."""
        return (
            f"server {self.name}: a tool it has beyond its declared catalog would be denied "
            "by the policy, and the catalog was not checked against the server (export --live "
            "checks it)"
        )

    @property
    def exact_catalog(self) -> bool:
        """Whether the catalog is all there is to decide on (a server without one can be
        exported only when the policy covers it whole)."""
        return bool(self.decisions) or self.live or self.whole is not None


@dataclass
class Misfit:
    """A rule (or a server setting) the client cannot express exactly."""

    what: str  # e.g. "ask rule files.write_file (bundlectl.yaml:12:5)"
    why: str  # the client's limitation


@dataclass
class Export:
    agent: str
    servers: list[ServerPlan]
    config_path: Path
    project_root: Path
    absolute: bool = False  # the file lives outside the project: paths in it are absolute
    # The rules with argument conditions (labels): no client can express them (SPEC 10).
    conditional: list[str] = field(default_factory=list)
    # Servers this machine cannot start as written (what each needs): the client cannot either.
    cannot_start: list[str] = field(default_factory=list)
    # Servers that run in bundlectl's sandbox (`policy.sandbox`): a client starting them itself
    # would start them outside it.
    sandboxed: list[str] = field(default_factory=list)

    @property
    def variables(self) -> list[str]:
        """The environment variables the agent's servers reference: a gateway entry must pass
        them on where the client does not pass its whole environment (Codex, Gemini)."""
        found: set[str] = set()
        for plan in self.servers:
            spec = plan.spec
            texts = [spec.command or "", *spec.args, spec.cwd or "", spec.url or ""]
            texts += [*spec.env.values(), *spec.headers.values()]
            found.update(var for text in texts for var, _ in references(text))
        return sorted(found)


@dataclass
class Imported:
    """A client file in bundlectl's terms."""

    servers: dict[str, dict[str, Any]] = field(default_factory=dict)  # name → ServerSpec data
    allow: list[str] = field(default_factory=list)
    ask: list[str] = field(default_factory=list)
    deny: list[str] = field(default_factory=list)
    secrets: dict[str, str] = field(default_factory=dict)  # variable → where a literal was
    notes: list[str] = field(default_factory=list)
    agents: dict[str, dict[str, list[str]]] | None = None  # agix: its own agents
    bundles: list[str] = field(default_factory=list)  # agix: the bundles it uses
    # What the client does with a server's tools that no list names ("ask": it asks the user).
    unlisted: dict[str, str] = field(default_factory=dict)
    default_allow: bool = False  # agix: unlisted agents get every tool
    # bundlectl's own gateway entries found (entry name → the agent it serves): nothing of
    # them is imported, since the project's policy already says what they serve
    gateways: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Client:
    """One client's file format."""

    name: str
    title: str
    project_file: str | None  # relative to the project root; None: user-level only
    user_file: Callable[[], Path]
    # (target file, reader of current file texts, export, managed server names, via gateway)
    # → the new text of every file it writes, and what did not fit.
    write: Callable[
        [Path, Callable[[Path], str], Export, set[str], bool],
        tuple[dict[Path, str], list[Misfit]],
    ]
    read: Callable[[str, str], Imported]
    source: str  # where the format was taken from, and when
    # (target file, project root) → what the user should know about the file written there
    # (another file the client reads instead, ...)
    notes: Callable[[Path, Path], list[str]] = lambda target, root: []
    jsonc: bool = False  # the client also reads NAME.jsonc in place of NAME.json

    def default_path(self, root: Path) -> Path:
        """The client's file in the project (or the user's, for a user-level client); the
        user's `NAME.jsonc` when the client reads one and there is no `NAME.json`, so the
        servers go where the user's own settings and comments are."""
        path = root / self.project_file if self.project_file else self.user_file()
        other = path.with_suffix(".jsonc")
        if self.jsonc and path.suffix == ".json" and not path.exists() and other.exists():
            return other
        return path


def references(text: str) -> list[tuple[str, str | None]]:
    return [(m.group(1), m.group(2)) for m in _REF.finditer(text)]


def rewrite_refs(text: str, style: Callable[[str, str | None], str]) -> str:
    """`${VAR}` / `${VAR:-default}` references in the client's own syntax."""
    return _REF.sub(lambda m: style(m.group(1), m.group(2)), text)


def rule_label(decision: Decision) -> str:
    rule = decision.rule
    where = f"{rule.label} ({rule.origin})" if rule is not None else "the policy default"
    return f"{decision.qualified}: {where}"


def gateway_spec(export: Export, *, absolute: bool) -> dict[str, Any]:
    """The one entry of a gateway export: `bundlectl serve --agent A`.

    In a file inside the project the entry runs `bundlectl` from PATH and finds the config by
    the upward search from wherever the client starts it (a relative `-c` failed from a
    subfolder); a file elsewhere (the user's own) names the executable and the config by
    absolute path, since a desktop client does not have the project's environment on PATH."""
    outside = absolute or export.absolute
    argv = launcher() if outside else ["bundlectl"]
    args = [*argv[1:], "serve", "--agent", export.agent]
    if outside or export.config_path != export.project_root / "bundlectl.yaml":
        args += ["-c", str(export.config_path)]
    return {"command": argv[0], "args": args}


def gateway_agent(raw: Any) -> str | None:
    """The agent a server entry serves when it is bundlectl's own gateway (`bundlectl serve
    [--agent A]`, however bundlectl is started), else None."""
    if not isinstance(raw, dict):
        return None
    command = str(raw.get("command") or "")
    args = [str(a) for a in raw.get("args") or []]
    words = [*command.split(), *args]  # a command given as one string too
    starts = [i for i, w in enumerate(words) if Path(w).name in ("bundlectl", "bundlectl.exe")]
    rest = words[starts[0] + 1 :] if starts else []  # `python -m bundlectl serve` too
    if "serve" not in rest:
        return None
    for flag in ("--agent", "-a"):
        if flag in rest and rest.index(flag) + 1 < len(rest):
            return rest[rest.index(flag) + 1]
    return "default"


def launcher() -> list[str]:
    """How to start this bundlectl by absolute path: its console script, or this Python
    running the package."""
    script = Path(sys.argv[0] if sys.argv else "")
    if script.name == "bundlectl" and script.is_file():
        return [str(script.absolute())]
    return [sys.executable, "-m", "bundlectl"]
