"""The docs a user reads: the generated references match the models and the rule table, and the
bundle workflow of docs/bundles.md works as written."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_the_deployment_manifests_of_the_docs_have_the_shape_kubernetes_and_compose_read() -> None:
    """docs/deploy.md's manifests, parsed as the tools would (no kubectl here): every Kubernetes
    object has its kind's required fields and its selector matches its pods; the compose file's
    gateway runs `serve --stateless` beside the Redis the project's `state.url` names."""
    from ruamel.yaml import YAML

    text = (Path(__file__).parent.parent / "docs" / "deploy.md").read_text()
    blocks = [b.split("\n", 1)[1] for b in text.split("```yaml")[1:]]
    blocks = [b.split("```", 1)[0] for b in blocks]
    yaml = YAML(typ="safe", pure=True)
    objects = [o for b in blocks for o in yaml.load_all(b) if o and "kind" in o]
    kinds = [o["kind"] for o in objects]
    assert kinds.count("Deployment") == 2 and kinds.count("Service") == 2
    for obj in objects:
        assert obj["apiVersion"] in ("apps/v1", "v1") and obj["metadata"]["name"]
        spec = obj["spec"]
        if obj["kind"] == "Deployment":
            labels = spec["template"]["metadata"]["labels"]
            assert spec["selector"]["matchLabels"].items() <= labels.items()
            for container in spec["template"]["spec"]["containers"]:
                assert container["name"] and container["image"]
        else:
            assert spec["selector"] and all("port" in p for p in spec["ports"])
    [compose] = [yaml.load(b) for b in blocks if b.lstrip().startswith("# compose")]
    gateway = compose["services"]["gateway"]
    assert {"serve", "--stateless"} <= set(gateway["command"])
    assert "redis" in gateway["depends_on"] and "REDIS_PASSWORD" in gateway["environment"]
    [state] = [yaml.load(b)["state"] for b in blocks if "state:" in b]
    assert state["url"].startswith("redis://") and "${REDIS_PASSWORD}" in state["url"]


def test_every_test_docs_security_names_exists() -> None:
    """docs/security.md names the tests that hold each rule: a renamed or removed test leaves
    a rule the page says is held with nothing holding it."""
    text = (REPO / "docs" / "security.md").read_text()
    named = re.findall(r"`(tests/[\w/.-]+?)(?:::(\w+))?`", text)
    assert len(named) >= 15
    missing = []
    for path, function in named:
        target = REPO / path
        if not target.exists():
            missing.append(path)
        elif function and not re.search(rf"^(async )?def {function}\(", target.read_text(), re.M):
            missing.append(f"{path}::{function}")
    assert missing == []


def test_the_docs_site_builds_strictly(tmp_path: Path) -> None:
    """mkdocs.yml's site: every page in the nav, every link and anchor resolves (strict)."""
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-4000:]
    assert (tmp_path / "site" / "getting-started" / "index.html").exists()


def test_the_readme_stays_a_front_door() -> None:
    """README.md is the way in (at most ~200 lines); the rest is in the guides under docs/."""
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    linked = set(re.findall(r"\]\(docs/([a-z-]+\.md)\)", text))
    nav = set(re.findall(r": ([a-z-]+\.md)$", (REPO / "mkdocs.yml").read_text(), re.MULTILINE))
    assert nav - {"index.md"} <= linked, f"guides the README does not link: {nav - linked}"


RUNNABLE = re.compile(r"<!-- runnable(?:: (\S+))? -->\n```\w*\n(.*?)```", re.DOTALL)
EXPECTED = re.compile(r"#.*?\bexit (\d+)")


def runnable_steps(path: Path) -> list[tuple[str | None, str]]:
    """The page's runnable blocks in order: (None, a line of a `sh` block to run) or (FILE,
    the text to write there) for a block marked `<!-- runnable: FILE -->`."""
    steps: list[tuple[str | None, str]] = []
    for name, block in RUNNABLE.findall(path.read_text()):
        if name:
            steps.append((name, block))
        else:
            steps += [(None, line) for line in block.splitlines() if line.strip()]
    return steps


@pytest.mark.parametrize(
    "page", ["README.md", "docs/getting-started.md", "docs/identities-locally.md"]
)
def test_the_runnable_blocks_of_the_docs_run_as_written(tmp_path: Path, page: str) -> None:
    """Each line of a runnable block runs in an empty folder with a fresh HOME, in order, and
    exits as its comment says (`# exit 3`; 0 without one); a block marked with a file name is
    written to that file first. The README's run where its Quick start leaves the reader: in
    `demo/`, after the main command's steps there."""
    steps = runnable_steps(REPO / page)
    assert steps, f"{page} has no runnable block"
    folder, home = tmp_path / "demo", tmp_path / "home"
    folder.mkdir()
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "BUNDLECTL_", "COV"))}
    env["HOME"] = str(home)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    if page == "README.md":
        text = (REPO / "README.md").read_text()
        main = re.search(r"<!-- main command -->\n```sh\n(.*?)\n```", text, re.DOTALL)
        assert main and "cd demo && " in main.group(1)
        steps = [(None, main.group(1).split("cd demo && ", 1)[1]), *steps]
    try:
        for name, text in steps:
            if name is not None:
                (folder / name).write_text(text)
                continue
            ran = subprocess.run(
                ["bash", "-c", text],
                cwd=folder,
                env=env,
                capture_output=True,
                text=True,
                check=False,
                timeout=120,
            )
            said = EXPECTED.search(text)
            expected = int(said.group(1)) if said else 0
            assert ran.returncode == expected, f"{text}\n{ran.stdout}{ran.stderr}"
    finally:  # what a page started in the background (`& echo $! > NAME.pid`) is stopped
        for pid in folder.glob("*.pid"):
            with contextlib.suppress(ValueError, OSError):
                os.kill(int(pid.read_text()), signal.SIGKILL)
