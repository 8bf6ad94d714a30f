"""The built-in `review` server through `bundlectl exec` (in-process), and its metrics."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from bundlectl.servers.complexity import analyse
from tests.conftest import Run, write

SOURCE = textwrap.dedent(
    """\
    def flat():
        return 1


    def branchy(items, flag):
        total = 0
        for item in items:              # cyclomatic +1, cognitive +1
            if item and flag:           # cyclomatic +1 +1 (and), cognitive +2 (nested) +1 (and)
                total += 1
            elif item:                  # cyclomatic +1, cognitive +1
                total -= 1
        try:
            total = total // len(items)
        except ZeroDivisionError:       # cyclomatic +1, cognitive +1
            total = 0
        return total if total else -1   # cyclomatic +1, cognitive +1


    class Box:
        def get(self, key):
            match key:                  # cognitive +1
                case "a":               # cyclomatic +1 per case
                    return 1
                case _:
                    return [x for x in range(3) if x]  # +1 loop +1 if, in both measures


    async def later(flag):
        while flag:                     # cyclomatic +1, cognitive +1
            flag = await flag()
        return lambda: flag
    """
)


def test_metrics_per_function() -> None:
    found = {f.name: (f.cyclomatic, f.cognitive, f.loc) for f in analyse(SOURCE)}
    assert found == {
        "flat": (1, 0, 2),
        "branchy": (7, 7, 12),
        "Box.get": (5, 3, 6),
        "later": (2, 1, 4),
    }


@pytest.fixture
def reviewed(project: Path) -> Path:
    write(
        project / "bundlectl.yaml", "version: 1\nbundles: [code-review]\npolicy: {default: allow}\n"
    )
    write(project / "app.py", SOURCE)
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    subprocess.run(["git", "add", "app.py"], cwd=project, check=True)
    env = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", *env, "commit", "-qm", "one"], cwd=project, check=True)
    return project


def test_complexity_metrics_tool(reviewed: Path, run: Run) -> None:
    result = run("exec", "review.complexity_metrics", "file_path=app.py", 'metrics=["cyclomatic"]')
    assert result.code == 0, result.err
    data = json.loads(result.out)
    assert data["summary"] == {
        "functions": 4,
        "lines": len(SOURCE.splitlines()),
        "max_cyclomatic": 7,
        "total_cyclomatic": 15,
    }
    assert data["functions"][1] == {"name": "branchy", "line": 5, "end_line": 16, "cyclomatic": 7}
    for args, message in [
        (["file_path=app.py", "language=go"], "language 'go' is not supported"),
        (["file_path=app.py", 'metrics=["speed"]'], "unknown metrics ['speed']"),
        (["file_path=missing.py"], "'missing.py' does not exist"),
        (["file_path=."], "'.' is not a file"),
        (["file_path=../outside.py"], "outside"),
    ]:
        failed = run("exec", "review.complexity_metrics", *args)
        assert failed.code == 1 and message in failed.err, (args, failed.err)
    write(reviewed / "broken.py", "def (:\n")
    broken = run("exec", "review.complexity_metrics", "file_path=broken.py")
    assert broken.code == 1 and "cannot parse broken.py" in broken.err


def test_view_diff_tool(reviewed: Path, run: Run) -> None:
    assert run("exec", "review.view_diff").out == "(no differences)\n"
    (reviewed / "app.py").write_text(SOURCE.replace("return 1\n", "return 2\n", 1))
    diff = run("exec", "review.view_diff", 'paths=["app.py"]', "context_lines=0")
    assert diff.code == 0, diff.err
    assert "-    return 1\n+    return 2\n" in diff.out
    against_head = run("exec", "review.view_diff", "base=HEAD", "context_lines=0")
    assert against_head.out == diff.out  # nothing is staged: index and HEAD agree
    staged = run("exec", "review.view_diff", "staged=true")
    assert staged.out == "(no differences)\n"
    for args, message in [
        (["base=--output=x"], "invalid ref '--output=x'"),
        (["head=HEAD"], "head needs a base"),
    ]:
        failed = run("exec", "review.view_diff", *args)
        assert failed.code == 1 and message in failed.err, (args, failed.err)
