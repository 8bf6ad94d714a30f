"""`bundlectl policy diff [BASE]`: what a change does to who may do what (#59).

BASE is a git revision (default: where this branch left the default branch: the merge base with
`origin/HEAD`, `origin/main`, `main`, …) or the path of another project. A revision's project is
taken from git as it was committed (`git archive`), so its lock pins the bundle versions it had;
`bundlectl.local.yaml` is left out on both sides (it is this machine's, never reviewed). Exit 0
when nothing changes in who may do what, 1 when something does (so CI can require a label), 2
for a BASE that is neither.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import re
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bundlectl import __version__
from bundlectl.config.paths import CONFIG_NAME, display_path
from bundlectl.config.project import Project, load_project, project_from_text
from bundlectl.errors import BundlectlError, UsageError
from bundlectl.output import Shared, emit_json, out, paint, visible, write
from bundlectl.resolve.diff import ABSENT, Cell, OtherChange, PolicyDiff, ToolChange, compare
from bundlectl.resolve.resolved import Resolution, resolve_project
from bundlectl.spread import over_cores

DEFAULT_BRANCHES = ("origin/HEAD", "origin/main", "origin/master", "main", "master")
SIGN = {"widened": "+", "narrowed": "-", "changed": "~"}


@dataclasses.dataclass(frozen=True)
class Side:
    """The base as it was: its resolution, what to call it, and where its files were put (the
    positions of its rules are shown relative to its project)."""

    resolution: Resolution
    label: str
    root: Path | None = None  # the temporary copy of a revision

    def where(self, text: str | None) -> str | None:
        """`text` (a position, a reason) with the copy's paths as `REVISION:path`."""
        if text is None or self.root is None:
            return text
        shown = self._shown
        for prefix in self._prefixes:
            text = text.replace(prefix, shown)
        return text

    @functools.cached_property
    def _shown(self) -> str:
        return self.label.split(" ")[0] + ":"

    @functools.cached_property
    def _prefixes(self) -> tuple[str, ...]:
        """How the copy's paths appear in positions (asked once: a diff has thousands)."""
        assert self.root is not None
        return tuple({str(self.root) + "/", display_path(self.root) + "/"})


def diff(config: Path | None, base: str | None, *, fmt: str, agents: list[str]) -> int:
    current = _without_local(load_project(config))
    after = resolve_project(current)
    with tempfile.TemporaryDirectory(prefix="bundlectl-diff-") as scratch:
        before = _base(current, base, Path(scratch))
        for agent in agents:
            if agent not in after.policy.set.agents and agent not in (
                before.resolution.policy.set.agents
            ):
                raise UsageError(
                    f"agent {agent!r} is listed on neither side",
                    hint="agents: " + ", ".join(sorted(after.policy.agents)),
                )
        found = compare(before.resolution, after, agents=agents or None, spread=over_cores)
        REPORTERS[fmt](found, before, current)
    return 1 if found else 0


def _without_local(project: Project) -> Project:
    return dataclasses.replace(project, local=None)


def _base(current: Project, base: str | None, scratch: Path) -> Side:
    if base is not None and Path(base).exists():
        path = Path(base)
        found = path / CONFIG_NAME if path.is_dir() else path
        try:
            project = _without_local(load_project(found))
        except BundlectlError as exc:
            raise _at_base(exc, base) from None
        return Side(resolve_project(project), str(base))
    root = current.config_path.parent
    top = _git(root, "rev-parse", "--show-toplevel")
    if top is None:
        raise UsageError(
            f"{base or 'the base'} is not a path, and {root} is not in a git repository",
            hint="pass BASE: a git revision, or the path of the project to compare with",
        )
    revision = base or _default_base(root)
    commit = _git(root, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}")
    if commit is None:
        raise UsageError(
            f"BASE {revision!r} is neither a path nor a git revision",
            hint="pass a branch, tag or commit (e.g. origin/main), or a project's path",
        )
    inside = root.resolve().relative_to(Path(top).resolve()).as_posix()
    label = f"{revision} ({commit[:12]})" if revision != commit else commit[:12]
    copy = scratch / "base"
    copy.mkdir()
    _extract(root, commit, inside, copy)
    at = copy / inside / CONFIG_NAME
    try:
        if at.is_file():
            project = _without_local(load_project(at))
        else:  # the project did not exist there: everything is new
            at.parent.mkdir(parents=True, exist_ok=True)
            project = project_from_text(at, "version: 1\n")
        resolution = resolve_project(project)
    except BundlectlError as exc:
        raise _at_base(exc, label) from None
    return Side(resolution, label, (copy / inside).resolve())


def _at_base(exc: BundlectlError, label: str) -> BundlectlError:
    exc.message = f"the base ({label}): {exc.message}"
    return exc


def _git(cwd: Path, *args: str) -> str | None:
    git = shutil.which("git")
    if git is None:
        return None
    done = subprocess.run(
        [git, *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=60
    )
    return done.stdout.strip() if done.returncode == 0 else None


def _default_base(root: Path) -> str:
    for branch in DEFAULT_BRANCHES:
        found = _git(root, "merge-base", "HEAD", branch)
        if found is not None:
            return found
    raise UsageError(
        "no default branch to compare with (none of " + ", ".join(DEFAULT_BRANCHES) + ")",
        hint="pass BASE: a git revision (e.g. HEAD~1) or the path of another project",
    )


def _extract(root: Path, commit: str, inside: str, into: Path) -> None:
    """The project's folder as committed at `commit`, written under `into`."""
    git = shutil.which("git")
    assert git is not None
    done = subprocess.run(
        [git, "archive", "--format=tar", commit, "--", inside],
        cwd=root,
        capture_output=True,
        check=False,
        timeout=120,
    )
    if done.returncode != 0:  # the folder did not exist at that revision
        return
    with tarfile.open(fileobj=io.BytesIO(done.stdout)) as archive:
        archive.extractall(into, filter="data")


# --- reports ----------------------------------------------------------------------------------


SHOWN = 8  # tools named in one line of a group; the rest are counted


def _tools(change: ToolChange, shown: int | None = SHOWN) -> str:
    names = [visible(t) for t in change.tools]
    if shown is None or len(names) <= shown:
        listed = ", ".join(names)
    else:
        listed = ", ".join(names[:shown]) + f", … {len(names) - shown} more"
    return listed + (f" ({len(names)} tools)" if len(names) > 1 else "")


def _cell_text(cell: Cell) -> str:
    return "not in the catalog" if cell.effect == ABSENT else cell.shown


def _because(cell: Cell, where: str | None, side: Side | None = None) -> str:
    """The deciding rule and where it is written (`side`: the base, whose copy's paths are
    shown as `REVISION:path`)."""
    if cell.effect == ABSENT:
        return "-"
    rule = cell.rule or cell.reason
    said = f"{rule} ({where})" if where else rule
    return side.where(said) or said if side is not None else said


def _text(found: PolicyDiff, base: Side, current: Project) -> None:
    out(f"policy diff: {base.label} → the working tree ({found.agents_compared} agents compared)")
    for agent, changes in found.by_agent().items():
        out(f"agent {visible(agent)}:")
        for c in changes:
            mark = paint(SIGN[c.kind], "deny" if c.kind == "widened" else "allow")
            out(
                f"  {mark} {_tools(c)}: {visible(_cell_text(c.before))} → "
                f"{visible(_cell_text(c.after))}"
            )
            out(f"      now:    {visible(_because(c.after, c.after.where))}")
            out(f"      before: {visible(_because(c.before, c.before.where, base))}")
    for o in found.other:
        out(_other_line(o))
    counts = found.counts()
    if not found:
        out("no change in who may do what")
    else:
        out(
            f"{counts['widened']} widened, {counts['narrowed']} narrowed, {counts['changed']} "
            f"changed, {counts['other']} other changes"
        )


def _other_line(o: OtherChange) -> str:
    sign = "+" if o.widens else "-"
    what = {
        "identity": f"who may act as {o.subject!r}" if o.subject != "gateway.auth" else o.subject,
        "limits": "quota",
        "pinning": o.subject,  # policy.pin_tools, or a reviewed definition (policy.pins X)
        "sandbox": "policy.sandbox",
        "server": f"server {o.subject!r}",
    }[o.what]
    return (
        f"{sign} {visible(what)}: {visible(o.before or '(none)')} → {visible(o.after or '(none)')}"
    )


# What a pull request's author could write in a rule (a condition's value, a description) that
# the comment's reader would not see as written: an HTML comment or tag (`<!--` hides the rest),
# an entity (`&#8238;` is a right-to-left override), a link, a code span, a strikethrough.
_MARKDOWN = str.maketrans({c: "\\" + c for c in "\\`[]<>&|~"})


def _md(text: str) -> str:
    """Text in a comment's table cell: escaped as `visible` does, each markdown or HTML sign
    backslash-escaped (CommonMark shows it as itself), on one line."""
    return visible(text).translate(_MARKDOWN).replace("\n", " ")


def _code(text: str) -> str:
    """Text as a code span, fenced by one more backtick than its longest run of them."""
    shown = visible(text)
    fence = "`" * (max(map(len, re.findall("`+", shown)), default=0) + 1)
    pad = " " if shown.startswith("`") or shown.endswith("`") else ""
    return f"{fence}{pad}{shown}{pad}{fence}"


def _markdown(found: PolicyDiff, base: Side, current: Project) -> None:
    counts = found.counts()
    lines = [f"### bundlectl policy diff against {_code(base.label)}", ""]
    if not found:
        lines.append("No change in who may do what.")
    else:
        lines.append(
            f"**{counts['widened']} widened**, {counts['narrowed']} narrowed, "
            f"{counts['changed']} changed, {counts['other']} other changes."
        )
    for agent, changes in sorted(
        found.by_agent().items(), key=lambda item: (item[1][0].kind != "widened", item[0])
    ):
        lines += ["", f"#### Agent {_code(agent)}", ""]
        lines += [
            "| | Tools | Before | After | Why now | Why before |",
            "|---|---|---|---|---|---|",
        ]
        for c in changes:
            lines.append(
                f"| {SIGN[c.kind]} | {_md(_tools(c))} | {_md(_cell_text(c.before))} | "
                f"**{_md(_cell_text(c.after))}** | {_md(_because(c.after, c.after.where))} | "
                f"{_md(_because(c.before, c.before.where, base))} |"
            )
    if found.other:
        lines += ["", "#### Identities, quotas, sandbox and servers", ""]
        lines += ["| | What | Before | After |", "|---|---|---|---|"]
        for o in found.other:
            sign, what = _other_line(o).split(" ", 1)
            name = what.split(": ", 1)[0]
            was, now = _md(o.before or "(none)"), _md(o.after or "(none)")
            lines.append(f"| {sign} | {_md(name)} | {was} | {now} |")
    write("\n".join(lines) + "\n")


def _cell_json(cell: Cell, side: Side | None = None) -> dict[str, Any]:
    shown = side.where if side is not None else (lambda text: text)
    return {
        "effect": cell.effect,
        "conditions": list(cell.conditions),
        "rule": cell.rule,
        "where": shown(cell.where),
        "reason": shown(cell.reason),
    }


def _json(found: PolicyDiff, base: Side, current: Project) -> None:
    shared: dict[tuple[int, bool], Shared] = {}  # cells are shared by the changes they decide

    def cell(value: Cell, side: Side | None = None) -> Shared:
        key = (id(value), side is None)
        found = shared.get(key)
        if found is None:
            found = shared[key] = Shared(_cell_json(value, side))
        return found

    emit_json(
        {
            "format_version": 1,
            "base": base.label,
            "changed": bool(found),
            "counts": found.counts(),
            "tools": [
                {
                    "agent": c.agent,
                    "tools": list(c.tools),
                    "kind": c.kind,
                    "before": cell(c.before, base),
                    "after": cell(c.after),
                }
                for changes in found.by_agent().values()
                for c in changes
            ],
            "other": [dataclasses.asdict(o) for o in found.other],
        }
    )


def _region(where: str | None, fallback: str) -> tuple[str, int, int]:
    if where is None:
        return fallback, 1, 1
    parts = where.rsplit(":", 2)
    if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
        return parts[0], int(parts[1]), max(1, int(parts[2]))
    return where, 1, 1


def _sarif(found: PolicyDiff, base: Side, current: Project) -> None:
    """Each widened grant a result at the rule that now grants it (code scanning)."""
    config = current.config_path.name
    results = []
    for changes in found.by_agent().values():
        for c in changes:
            if c.kind != "widened":
                continue
            file, line, column = _region(c.after.where, config)
            results.append(
                {
                    "ruleId": "policy-widened",
                    "level": "warning",
                    "message": {
                        "text": f"agent {c.agent!r} gets {_tools(c)}: {_cell_text(c.before)} → "
                        f"{_cell_text(c.after)} ({_because(c.after, None)}; before: "
                        f"{_because(c.before, c.before.where, base)})"
                    },
                    "locations": [
                        {
                            "physicalLocation": {
                                "artifactLocation": {"uri": file},
                                "region": {"startLine": line, "startColumn": column},
                            }
                        }
                    ],
                    "partialFingerprints": {
                        "bundlectlPolicyDiff/v1": f"{c.agent}|{c.after.rule}|{c.tool}"
                    },
                }
            )
    rule = {
        "id": "policy-widened",
        "name": "policy-widened",
        "shortDescription": {"text": "A change gives an agent more than it had."},
        "help": {"text": "Review the grant; `bundlectl policy explain` shows the deciding rule."},
        "defaultConfiguration": {"level": "warning"},
    }
    driver = {"name": "bundlectl", "version": __version__, "rules": [rule]}
    log = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{"tool": {"driver": driver}, "results": results}],
    }
    write(json.dumps(log, indent=2) + "\n")


REPORTERS: dict[str, Callable[[PolicyDiff, Side, Project], None]] = {
    "text": _text,
    "markdown": _markdown,
    "json": _json,
    "sarif": _sarif,
}
__all__ = ["REPORTERS", "ToolChange", "diff"]
