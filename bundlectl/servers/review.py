"""The `review` server: code metrics and diff viewing for code review, working in one root."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bundlectl.servers._tooling import Toolbox, ToolFailure
from bundlectl.servers.complexity import METRICS, report
from bundlectl.servers.confined_paths import Root
from bundlectl.servers.files import inside, read_below

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

MAX_DIFF_CHARS = 200_000


def _git_diff(root: Path, args: list[str]) -> str:
    try:
        done = subprocess.run(
            ["git", "diff", "--no-color", "--no-ext-diff", *args],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except FileNotFoundError:
        raise ToolFailure("git is not installed") from None
    except subprocess.TimeoutExpired:
        raise ToolFailure("git diff took longer than 60 s") from None
    if done.returncode != 0:
        raise ToolFailure(f"git diff failed: {done.stderr.strip() or done.returncode}")
    return done.stdout


def build(root: Path) -> MCPServer:
    return toolbox(root).server()


def toolbox(root: Path) -> Toolbox:
    box = Toolbox(
        "bundlectl-review", instructions=f"Code review helpers for the repository at {root}."
    )

    folder = Root(root)

    @box.tool(annotations={"readOnlyHint": True, "openWorldHint": False})
    def complexity_metrics(
        file_path: str,
        language: str = "python",
        include_functions: bool = True,
        metrics: list[str] | None = None,
    ) -> dict[str, Any]:
        """Complexity of a source file: cyclomatic (McCabe) and cognitive (SonarSource)
        complexity and lines of code, per function and in total. Supported language: python.
        `metrics` picks from cyclomatic, cognitive, loc (default: all)."""
        if language.lower() != "python":
            raise ToolFailure(f"language {language!r} is not supported; supported: python")
        chosen = metrics or list(METRICS)
        unknown = [m for m in chosen if m not in METRICS]
        if unknown:
            raise ToolFailure(f"unknown metrics {unknown}; choose from {list(METRICS)}")
        data, _ = read_below(folder, file_path)
        try:
            source = data.decode("utf-8")
            return report(source, file_path, chosen, include_functions)
        except (SyntaxError, UnicodeDecodeError) as exc:
            raise ToolFailure(f"cannot parse {file_path}: {exc}") from None

    @box.tool(annotations={"readOnlyHint": True, "openWorldHint": False}, structured_output=False)
    def view_diff(
        base: str | None = None,
        head: str | None = None,
        paths: list[str] | None = None,
        staged: bool = False,
        context_lines: int = 3,
    ) -> str:
        """A unified git diff: the working tree against the index (default), the index against
        HEAD (`staged`), the working tree against `base`, or `base` against `head`. `paths`
        limits it to files or folders. Long diffs are cut at 200,000 characters."""
        args = [f"--unified={max(0, min(context_lines, 100))}"]
        if staged:
            args.append("--cached")
        for ref in (base, head):
            if ref is not None:
                if ref.startswith("-") or not ref.strip():
                    raise ToolFailure(f"invalid ref {ref!r}")
                args.append(ref)
        if head is not None and base is None:
            raise ToolFailure("head needs a base")
        args.append("--")
        args.extend(inside(folder, p) for p in paths or [])
        diff = _git_diff(root, args)
        if len(diff) > MAX_DIFF_CHARS:
            cut = len(diff) - MAX_DIFF_CHARS
            diff = diff[:MAX_DIFF_CHARS] + f"\n... diff cut: {cut} more characters\n"
        return diff or "(no differences)"

    return box
