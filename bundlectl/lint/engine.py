"""Find the files to lint, load them without stopping at the first error, run every check."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from pydantic import BaseModel

from bundlectl.config import paths
from bundlectl.config.models import BundleManifest, ProjectConfig
from bundlectl.config.project import Project
from bundlectl.config.validation import check_doc
from bundlectl.config.yamlio import read_yaml
from bundlectl.errors import BundlectlError, InputFileError, UsageError
from bundlectl.lint import (
    checks_conditions,
    checks_descriptions,
    checks_files,
    checks_identity,
    checks_invariants,
    checks_policy,
    checks_refs,
    checks_secrets,
    checks_supply,
    suppress,
)
from bundlectl.lint.context import Context, LintedFile, from_problem
from bundlectl.lint.rules import RULES, SEVERITY_RANK, Finding, Severity
from bundlectl.policy.inheritance import extends_problems
from bundlectl.resolve.resolved import resolve_project, unmatched_default

Check = Callable[[Context], Iterable[Finding]]

# The checks, in the order of the rule ids they report.
CHECKS: list[Check] = [
    checks_files.file_problems,
    checks_files.yaml11_scalars,
    checks_files.merge_keys,
    checks_refs.unknown_bundles,
    checks_refs.unsatisfiable,
    checks_refs.lock_drift,
    checks_refs.rule_targets,
    checks_refs.server_collisions,
    checks_refs.invalid_extends,
    checks_refs.gateway_name_clashes,
    checks_refs.shared_servers,
    checks_policy.overridden_and_shadowed,
    checks_policy.permits_nothing,
    checks_policy.broad_destructive,
    checks_policy.default_allow,
    checks_policy.future_tools,
    checks_policy.policy_tests,
    checks_policy.detokenize_targets,
    checks_policy.limit_targets,
    checks_policy.local_rules,
    checks_invariants.invariants,
    checks_identity.broad_matches,
    checks_identity.overlapping_matches,
    checks_identity.approvers_as_agents,
    checks_conditions.condition_arguments,
    checks_conditions.condition_expressions,
    checks_secrets.plaintext_secrets,
    checks_secrets.literal_tokens,
    checks_secrets.missing_env,
    checks_supply.unpinned,
    checks_supply.shadowed_builtins,
    checks_supply.launcher_options,
    checks_supply.code_loading_env,
    checks_supply.container_widening,
    checks_supply.sandbox_widened,
    checks_supply.sandbox_write_unneeded,
    checks_supply.sandbox_declared_later,
    checks_supply.replaced_bundle_servers,
    checks_descriptions.descriptions,
]


@dataclass
class Selection:
    """Which rules run and at what severity (CLI options over the config's `lint:`)."""

    select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    severity: dict[str, Severity] = field(default_factory=dict)
    environment: bool = False  # `--env`: the checks that read this machine's environment

    def wants(self, rule: str) -> bool:
        if self.select and not any(rule.startswith(p) for p in self.select):
            return False
        return not any(rule.startswith(p) for p in self.ignore)


def _load(kind: str, path: Path, model: type[BaseModel]) -> LintedFile:
    doc = read_yaml(path, paths.display_path(path))
    linted = LintedFile(kind, doc)
    linted.model, linted.problems = check_doc(doc, model, what=kind)
    return linted


def collect(targets: list[Path], config: Path | None) -> tuple[list[Path | None], list[Path]]:
    """(project configs, manifest files) named by the targets; nothing named: this project."""
    configs: list[Path | None] = []
    manifests: list[Path] = []
    if not targets:
        found = paths.find_config(Path.cwd(), config)
        if found is None:
            raise UsageError(
                "no bundlectl.yaml here or above, and no PATH given",
                hint="run lint in a project, or name files: bundlectl lint FILE",
            )
        return [found], []
    for target in targets:
        if not target.exists():
            raise UsageError(f"{target}: no such file or folder")
        if target.is_dir():
            if (target / paths.CONFIG_NAME).is_file():
                configs.append(target / paths.CONFIG_NAME)
            else:
                manifests += sorted(target.glob("*/*.yaml"))
        elif target.name == paths.LOCK_NAME:
            configs.append(target.with_name(paths.CONFIG_NAME))
        elif target.name == paths.CONFIG_NAME:
            configs.append(target)
        else:
            manifests.append(target)
    return list(dict.fromkeys(configs)), manifests


def lint_project(config_path: Path) -> tuple[Context, list[Finding]]:
    config = _load("config", config_path, ProjectConfig)
    ctx = Context([config])
    extra: list[Finding] = []
    if config.model is None:
        return ctx, extra
    ctx.project = Project(config_path.resolve(), config.doc, config.model)
    for source in (s for s in ctx.project.registry.sources if s.is_project):
        for name in source.names():
            for file in sorted(source.versions(name).values()):
                ctx.files.append(_load("manifest", file, BundleManifest))
    # Missing registries, misnamed folders and files, manifests that do not match their place.
    extra += [from_problem(checks_files.rule_of(p), p) for p in ctx.project.registry_problems()]
    try:
        ctx.resolution = resolve_project(ctx.project, strict=False)
        ctx.policy_ok = not extends_problems(ctx.resolution.merged.agents)
        unmatched_default(ctx.project, ctx.resolution.merged)
    except InputFileError as exc:  # the lock, or a manifest outside the lint targets
        extra += [from_problem(checks_files.rule_of(p), p) for p in exc.problems]
    except BundlectlError as exc:
        ctx.resolution_error = exc
    return ctx, extra


def run(targets: list[Path], config: Path | None, selection: Selection) -> list[Finding]:
    """Every finding of every target, suppressions applied, sorted by position."""
    configs, manifests = collect(targets, config)
    contexts: list[tuple[Context, list[Finding]]] = []
    for path in configs:
        if path is not None:
            contexts.append(lint_project(path))
    if manifests:
        contexts.append((Context([_load("manifest", m, BundleManifest) for m in manifests]), []))
    findings: list[Finding] = []
    texts: dict[str, str] = {}
    for ctx, extra in contexts:
        findings += extra
        ctx.environment = selection.environment
        for check in CHECKS:
            findings += check(ctx)
        for linted in ctx.files:
            texts[linted.doc.file] = linted.doc.text
    findings = _dedupe(findings)
    suppressions = [s for file, text in texts.items() for s in suppress.find(file, text)]
    settings = _config_selection(contexts, selection)
    kept = [f for f in findings if settings.wants(f.rule)]
    unused = suppress.apply(kept, suppressions)
    result = [f for f in kept if not f.suppressed] + [u for u in unused if settings.wants(u.rule)]
    result = [
        replace(f, severity=settings.severity[f.rule]) if f.rule in settings.severity else f
        for f in result
    ]
    return sorted(result, key=Finding.sort_key)


def _dedupe(findings: list[Finding]) -> list[Finding]:
    seen: set[tuple[str, str, int, int, str]] = set()
    out = []
    for f in findings:
        p = f.problem
        key = (f.rule, p.file, p.line, p.column, p.message)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def _config_selection(contexts: list[tuple[Context, list[Finding]]], cli: Selection) -> Selection:
    """The config's `lint:` section, with the command line's choices on top."""
    settings = Selection(list(cli.select), list(cli.ignore), {})
    for ctx, _ in contexts:
        model = ctx.config_model
        if model is not None:
            if not cli.select:
                settings.select += model.lint.select
            settings.ignore += model.lint.ignore
            settings.severity.update(model.lint.severity)
    settings.severity.update(cli.severity)
    return settings


def failing(findings: list[Finding], level: Severity) -> bool:
    return any(SEVERITY_RANK[f.severity] >= SEVERITY_RANK[level] for f in findings)


def check_ids(ids: list[str]) -> list[str]:
    """Validate --select/--ignore values (ids or prefixes of ids)."""
    out = []
    for raw in ids:
        for item in raw.split(","):
            code = item.strip().upper()
            if not code:
                continue
            if not any(rule.startswith(code) for rule in RULES):
                raise UsageError(
                    f"no lint rule matches {code!r}",
                    hint="rule ids look like BCL201; prefixes like BCL2 work too",
                )
            out.append(code)
    return out
