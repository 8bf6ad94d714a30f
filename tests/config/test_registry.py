"""Registry sources, precedence, identity checks and publishing."""

import subprocess
import sys
from pathlib import Path

import pytest

from bundlectl.config import paths
from tests.conftest import REPO, TEST_SERVERS, Run, load_yaml, make_registry, write


def test_project_registry_wins_over_user_and_builtin_without_mixing(
    project: Path, run: Run
) -> None:
    make_registry(project / "bundles", {"basic": {"0.1.0": {"description": "local basic"}}})
    make_registry(paths.user_registry_dir(), {"basic": {"9.0.0": {}}, "extra": {"1.0.0": {}}})
    write(project / "bundlectl.yaml", "version: 1\nregistries: [./bundles]\nbundles: [basic]\n")
    result = run("show", "basic")
    assert result.code == 0, result.err
    assert result.lines[:2] == ["basic 0.1.0 (./bundles): local basic", "versions: 0.1.0"]
    # The built-in basic 1.x and the user's 9.0 never mix with the project's.
    assert run("show", "basic>=1").code == 1
    listing = run("registry", "list")
    assert "basic" in listing.out and "./bundles" in listing.out


def test_manifest_identity_must_match_its_path(project: Path, run: Run) -> None:
    write(project / "bundles" / "thing" / "1.0.0.yaml", "name: other\nversion: 1.0.1\n")
    write(project / "bundlectl.yaml", "version: 1\nregistries: [bundles]\n")
    result = run("show", "thing")
    assert result.code == 2
    assert result.err_lines[0].endswith(
        "thing/1.0.0.yaml:1:7: name: manifest name 'other' does not match its folder 'thing'"
    )


def test_invalid_manifest_reports_positions(project: Path, run: Run) -> None:
    write(
        project / "bundles" / "bad" / "1.0.0.yaml",
        """
        name: bad
        version: 1.0.0
        servers:
          s:
            command: x
            tools:
              - {name: a}
              - {name: a}
        agents:
          x: {allow: ["a b"]}
    """,
    )
    write(project / "bundlectl.yaml", "version: 1\nregistries: [bundles]\n")
    result = run("show", "bad")
    assert result.code == 2
    errors = [e.split("bad/1.0.0.yaml:")[1] for e in result.err_lines if e.startswith("error:")]
    assert errors == [
        "4:3: servers.s: tools declared twice: a",
        "10:15: agents.x.allow[0]: unsupported pattern 'a b': ' ' is not allowed; only '*' and "
        "'?' are wildcards",
    ]


def test_registry_add_is_immutable(tmp_path: Path, run: Run) -> None:
    manifest = write(tmp_path / "m.yaml", "name: mine\nversion: 1.0.0\ndescription: one\n")
    first = run("registry", "add", str(manifest))
    assert first.code == 0, first.err
    assert first.lines[0].startswith("published mine 1.0.0 to ")
    assert run("registry", "add", str(manifest)).lines[0].startswith("unchanged mine 1.0.0")
    write(manifest, "name: mine\nversion: 1.0.0\ndescription: two\n")
    changed = run("registry", "add", str(manifest))
    assert changed.code == 1
    assert changed.err_lines == [
        "error: mine 1.0.0 is already published with different content",
        "hint: a published version is immutable: bump `version` and publish again",
    ]
    published = paths.user_registry_dir() / "mine" / "1.0.0.yaml"
    assert "description: one" in published.read_text()
    assert run("show", "mine").lines[0] == "mine 1.0.0 (user): one"


def test_registry_add_rejects_invalid_and_missing(tmp_path: Path, run: Run) -> None:
    bad = write(tmp_path / "m.yaml", "name: Mine\nversion: one\n")
    result = run("registry", "add", str(bad))
    assert result.code == 2
    assert len([e for e in result.err_lines if e.startswith("error:")]) == 2
    assert run("registry", "add", str(tmp_path / "absent.yaml")).code == 2
    assert not paths.user_registry_dir().exists()


def test_show_unknown_and_invalid(project: Path, run: Run) -> None:
    result = run("show", "githb")  # a wrong argument: a usage error, as install says it
    assert (result.code, result.err_lines) == (
        2,
        [
            "error: no bundle named 'githb' in any registry",
            "hint: did you mean 'github'?",
        ],
    )
    assert run("show", "github>>1").code == 2


def test_misnamed_manifests_and_folders_are_errors_in_every_resolving_command(
    project: Path, run: Run
) -> None:
    make_registry(project / "bundles", {"mb": {"1.0.0": {}}})
    write(project / "bundles" / "mb" / "1.x.yaml", "name: mb\nversion: 1.x\n")
    write(project / "bundles" / "BadName" / "1.0.0.yaml", "name: badname\nversion: 1.0.0\n")
    write(project / "bundlectl.yaml", "version: 1\nregistries: [./bundles]\nbundles: [mb]\n")
    expected = [
        "error: bundles/BadName/1.0.0.yaml:1:1: bundle folder 'BadName' is not a valid bundle "
        "name, so none of its manifests can be used",
        "error: bundles/mb/1.x.yaml:1:1: manifest file name '1.x.yaml' is not a PEP 440 version, "
        "so the manifest is not part of the registry",
    ]
    for command in (["lock"], ["resolve"], ["install", "basic"], ["lock", "--check"]):
        result = run(*command)
        assert result.code == 2, command
        assert [line for line in result.err_lines if line.startswith("error:")] == expected
    assert not (project / "bundlectl.lock").exists()
    assert "basic" not in (project / "bundlectl.yaml").read_text()


def test_an_invalid_manifest_of_an_unused_bundle_is_still_an_error(project: Path, run: Run) -> None:
    make_registry(project / "bundles", {"used": {"1.0.0": {}}})
    write(
        project / "bundles" / "unused" / "1.0.0.yaml", "name: unused\nversion: 1.0.0\nservers: 3\n"
    )
    write(project / "bundlectl.yaml", "version: 1\nregistries: [./bundles]\nbundles: [used]\n")
    result = run("lock")
    assert result.code == 2
    assert result.err_lines[0].startswith("error: bundles/unused/1.0.0.yaml:3:10: servers:")


def test_missing_project_registry_is_an_error_at_its_entry(project: Path, run: Run) -> None:
    (project / "bundles").mkdir()
    write(
        project / "bundlectl.yaml",
        "version: 1\nregistries: [./bundles, ./bundels, /nonexistent/dir]\nbundles: [basic]\n",
    )
    result = run("resolve")
    assert result.code == 2
    assert result.err_lines[:4] == [
        "error: bundlectl.yaml:2:25: registries[1]: registry './bundels' does not exist",
        "  hint: create the folder or fix the path; it is relative to bundlectl.yaml",
        "error: bundlectl.yaml:2:36: registries[2]: registry '/nonexistent/dir' does not exist",
        "  hint: create the folder or fix the path; it is relative to bundlectl.yaml",
    ]


def test_unknown_bundles_have_positions_in_resolve_as_in_lint(project: Path, run: Run) -> None:
    write(project / "bundlectl.yaml", "version: 1\nbundles:\n  - basic\n  - githib>=1\n")
    result = run("resolve")
    assert result.code == 2  # bad input (SPEC 4.1), as any other problem of the file
    assert result.err_lines == [
        "error: bundlectl.yaml:4:5: bundles[1]: no bundle named 'githib' in any registry",
        "  hint: did you mean github?",
    ]
    linted = run("lint", "--select", "BCL101")
    assert linted.lines[0].startswith("bundlectl.yaml:4:5: BCL101 error no bundle named 'githib'")


def test_list_reads_descriptions_without_loading_manifests_again(
    tmp_path: Path, run: Run, isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a manifest was loaded and checked, `list` takes its description from a small summary
    beside the cached manifest; a changed manifest file is loaded afresh."""
    monkeypatch.chdir(tmp_path)
    first = run("list")
    assert first.code == 0
    cache = isolated_home / "cache" / "manifests"
    pickles = sorted(cache.glob("*.pickle"))
    assert pickles
    assert len(list(cache.glob("*.summary"))) == 5  # the newest version of each built-in bundle
    for path in pickles:
        path.unlink()
    assert run("list").out == first.out
    assert not list(cache.glob("*.pickle"))  # no manifest was loaded


def test_a_published_copy_of_a_builtin_bundle_is_named_as_the_change(
    project: Path, run: Run
) -> None:
    """#24 item 4: the same manifest, byte for byte, published to the user registry moves the
    bundle to another source; `lock --check` said "the lock's formatting differs"."""
    write(project / "bundlectl.yaml", "version: 1\nbundles: [basic]\n")
    assert run("lock").code == 0
    copy = paths.builtin_registry_dir() / "basic" / "1.1.0.yaml"
    published = run("registry", "add", str(copy))
    assert published.code == 0, published.err
    assert "now hides the built-in bundle 'basic'" in published.err
    stale = run("lock", "--check")
    assert stale.code == 1
    assert "bundle basic 1.1.0: now comes from registry user, locked from builtin" in stale.err
    assert "formatting" not in stale.err
    relocked = run("lock")
    assert relocked.code == 0
    assert "~ basic 1.1.0 (builtin) -> 1.1.0 (user)" in relocked.out
    assert "hides the built-in bundle 'basic'" in relocked.err
    assert run("lock", "--check").code == 0


def test_registry_catalog_writes_the_tools_a_manifests_servers_offer(
    tmp_path: Path, run: Run
) -> None:
    """A bundle author's catalog comes from the running server: `registry catalog` starts the
    manifest's servers, writes what they offer into it (comments kept, a stale entry gone) and
    says what changed; the result lints clean. A server that cannot start changes nothing."""
    manifest = write(
        tmp_path / "kitchen" / "1.0.0.yaml",
        f"""
        # our team's kitchen bundle
        name: kitchen
        version: 1.0.0
        description: Everything a server can send
        servers:
          kitchen:   # the real one
            command: {sys.executable}
            args: ["{TEST_SERVERS / "kitchen.py"}"]
            tools:
              - {{name: stale, description: gone, input_schema: {{type: object}}}}
          broken:
            command: {tmp_path / "no-such-server"}
        """,
    )
    refused = run("registry", "catalog", str(manifest), "--server", "kitchn")
    assert refused.code == 2
    assert refused.err_lines[-1] == "hint: its servers: kitchen, broken"
    before = manifest.read_text()
    failed = run("registry", "catalog", str(manifest))
    assert failed.code == 5, failed.err
    assert manifest.read_text() == before  # nothing written when a server cannot be asked

    done = run("registry", "catalog", str(manifest), "--server", "kitchen")
    assert done.code == 0, done.err
    said = done.err_lines[0]
    assert said.startswith("recorded 26 tool(s) of kitchen (added add, ") and said.endswith(
        "; removed stale)"
    )
    text = manifest.read_text()
    assert "# our team's kitchen bundle" in text and "# the real one" in text
    tools = {t["name"]: t for t in load_yaml(manifest)["servers"]["kitchen"]["tools"]}
    assert "stale" not in tools and tools["echo"]["description"] == "Repeat text."
    assert tools["echo"]["input_schema"]["required"] == ["text"]
    linted = run("lint", str(manifest))
    assert linted.code == 0, linted.out
    again = run("registry", "catalog", str(manifest), "--server", "kitchen")
    assert again.err_lines[0] == "recorded 26 tool(s) of kitchen (no change)"


def test_the_maintainers_catalog_script_answers_help() -> None:
    script = REPO / "scripts" / "collect_catalog.py"
    helped = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, check=False
    )
    assert helped.returncode == 0 and "registry catalog MANIFEST" in helped.stdout
    bare = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, check=False
    )
    assert bare.returncode == 2 and "Traceback" not in bare.stderr


def test_a_manifest_read_again_in_one_process_is_a_copy_and_each_cache_folder_gets_it(
    tmp_path: Path, isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that loads a manifest again (a reload, another home in the same process)
    unpickles what it kept in memory: a fresh object each time, and the entry written to each
    cache folder it is asked for in, as a first load writes it."""
    from bundlectl.config.registry import Registry, load_manifest_file

    registry = Registry.default(tmp_path)
    version = registry.versions("basic")[-1]
    path = paths.builtin_registry_dir() / "basic" / f"{version}.yaml"
    source = registry.source_of("basic")
    assert source is not None
    first = load_manifest_file(path, source)
    other_home = tmp_path / "other-home"
    monkeypatch.setenv("BUNDLECTL_HOME", str(other_home))
    again = load_manifest_file(path, source, display="shown elsewhere")
    assert again.manifest == first.manifest and again.digest == first.digest
    assert again.manifest is not first.manifest and again.doc is not first.doc
    assert (again.doc.file, first.doc.file) == ("shown elsewhere", str(path))
    for home in (isolated_home, other_home):
        assert list((home / "cache" / "manifests").glob("*.pickle")), home
