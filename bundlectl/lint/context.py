"""What the checks look at: the parsed files, and the resolved project when there is one."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bundlectl.config.yamlio import YamlDoc, YamlPath, format_path
from bundlectl.errors import Problem
from bundlectl.lint.rules import RULES, Finding

if TYPE_CHECKING:
    from bundlectl.config.models import BundleManifest, ProjectConfig, ServerSpec
    from bundlectl.config.project import Project
    from bundlectl.policy.rules import Rule
    from bundlectl.resolve.resolved import Resolution


@dataclass
class LintedFile:
    """One input file: its parse, and its model when it validated."""

    kind: str  # config | manifest | lock
    doc: YamlDoc
    model: Any = None
    problems: list[Problem] = field(default_factory=list)


@dataclass
class Context:
    """The files under lint, and the project they form (when the config is valid)."""

    files: list[LintedFile]
    project: Project | None = None
    resolution: Resolution | None = None
    resolution_error: Exception | None = None
    policy_ok: bool = False  # the agents' extends are sound, so the engine can be built
    # `lint --env`: also judge this machine's environment (BCL302); lint is otherwise the
    # project's alone, the same on every machine and in CI.
    environment: bool = False

    @property
    def config(self) -> LintedFile | None:
        return next((f for f in self.files if f.kind == "config"), None)

    def manifests(self) -> Iterator[tuple[LintedFile, BundleManifest]]:
        for f in self.files:
            if f.kind == "manifest" and f.model is not None:
                yield f, f.model

    def servers(self) -> Iterator[tuple[YamlDoc, str, ServerSpec]]:
        """Every server written in the files under lint: the config's, then the manifests'."""
        config, model = self.config, self.config_model
        if config is not None and model is not None:
            for name, spec in model.servers.items():
                yield config.doc, name, spec
        for linted, manifest in self.manifests():
            for name, spec in manifest.servers.items():
                yield linted.doc, name, spec

    @property
    def config_model(self) -> ProjectConfig | None:
        config = self.config
        return config.model if config is not None else None


def at(
    rule: str,
    doc: YamlDoc,
    path: YamlPath,
    message: str,
    *,
    key: bool = False,
    anchor: str = "",
    hint: str | None = None,
) -> Finding:
    """A finding at the node on `path` of `doc`."""
    span = doc.span(path, key=key)
    problem = Problem(
        doc.file,
        span.line,
        span.column,
        message,
        format_path(path),
        hint,
        end_line=span.end_line,
        end_column=span.end_column,
    )
    return Finding(rule, problem, RULES[rule].severity, anchor)


def from_problem(rule: str, problem: Problem) -> Finding:
    """A finding from a positioned problem of the loader or validator."""
    return Finding(rule, problem, RULES[rule].severity, problem.message)


def policy_parts(ctx: Context) -> tuple[Resolution, YamlDoc, ProjectConfig] | None:
    """What the policy checks need, when the config resolved and its policy is sound."""
    if not ctx.policy_ok or ctx.resolution is None or ctx.config is None:
        return None
    model = ctx.config_model
    return None if model is None else (ctx.resolution, ctx.config.doc, model)


def own_rules(resolution: Resolution, agent: str) -> list[tuple[YamlPath, Rule]]:
    """The agent's rules written in the config, with their YAML paths."""
    out: list[tuple[YamlPath, Rule]] = []
    spec = resolution.policy.set.agents.get(agent)
    position = dict.fromkeys(("allow", "ask", "deny"), 0)
    for rule in spec.rules if spec is not None else ():
        if rule.agent == agent and rule.origin.bundle is None:
            out.append((("agents", agent, rule.effect, position[rule.effect]), rule))
            position[rule.effect] += 1
    return out
