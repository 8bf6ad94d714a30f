"""The docs a user reads: the generated references match the models and the rule table, and the
bundle workflow of docs/bundles.md works as written."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from tests.conftest import REPO, Run, write


def test_generated_docs_match_the_models_and_the_rules() -> None:
    spec = importlib.util.spec_from_file_location("gen_docs", REPO / "scripts" / "gen_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for path, text in module.generate().items():
        assert path.read_text() == text, f"{path.name} is stale: run python scripts/gen_docs.py"
    rules = (REPO / "docs" / "lint-rules.md").read_text()
    sections = rules.split("\n## ")[1:]
    assert len(sections) == len(module.RULES)
    without = [s.split("\n")[0] for s in sections if "Lint says:" not in s]
    assert without == [], f"rules without an example in tests/examples: {without}"


def test_the_bundle_workflow_of_the_docs_works_as_written(
    project: Path, run: Run, tmp_path: Path
) -> None:
    text = (REPO / "docs" / "bundles.md").read_text()
    manifest = re.search(r"```yaml\n# weather/1.0.0.yaml\n(.*?)```", text, re.DOTALL)
    assert manifest, "docs/bundles.md lost its example manifest"
    path = tmp_path / "weather" / "1.0.0.yaml"
    path.parent.mkdir()
    path.write_text(manifest.group(1))
    checked = run("lint", str(path))
    assert checked.code == 0, checked.out + checked.err
    assert run("registry", "add", str(path)).code == 0
    assert "weather" in run("list").out
    write(project / "bundlectl.yaml", "version: 1\nbundles: []\n")
    installed = run("install", "weather")
    assert installed.code == 0, installed.err
    assert "weather" in (project / "bundlectl.lock").read_text()
    shown = run("show", "weather")
    assert shown.code == 0 and "get_forecast" in shown.out
