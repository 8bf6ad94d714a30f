"""Registries in an OCI registry (issue 40, SPEC 14): `bundlectl registry push FOLDER oci://...`
publishes manifests as OCI artifacts, and a project that lists the `oci://` reference installs
and locks from it, then works offline from the cache. Against a real registry: Debian's
`docker-registry` (the reference `distribution` registry), started on loopback per test."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import Run, load_yaml, write

MANIFEST = """name: weather
version: {version}
description: {description}
servers:
  forecast:
    command: python
    args: ["-c", "pass"]
    tools: [{{name: get_forecast, description: "The forecast."}}]
"""


@dataclass
class Registry:
    process: subprocess.Popen[bytes]
    host: str

    def ref(self, repository: str = "team/bundles") -> str:
        return f"oci://{self.host}/{repository}"

    def tags(self, repository: str = "team/bundles") -> list[str]:
        url = f"http://{self.host}/v2/{repository}/tags/list"
        with urllib.request.urlopen(url, timeout=10) as response:
            return sorted(json.load(response)["tags"])

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Registry]:
    binary = shutil.which("docker-registry")
    assert binary, "Debian's docker-registry is needed (apt-get install docker-registry)"
    # oras looks for credentials in ~/.docker/config.json: never the real home's
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    port = _free_port()
    config = write(
        tmp_path / "registry.yml",
        "version: 0.1\nlog: {level: error}\n"
        f"storage: {{filesystem: {{rootdirectory: {tmp_path / 'blobs'}}}}}\n"
        f"http: {{addr: '127.0.0.1:{port}', secret: test}}\n",
    )
    log = tmp_path / "registry.log"
    with log.open("wb") as sink:
        process = subprocess.Popen([binary, "serve", str(config)], stdout=sink, stderr=sink)
    served = Registry(process, f"127.0.0.1:{port}")
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"http://{served.host}/v2/", timeout=2):
                break
        except (urllib.error.URLError, OSError):
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the registry did not start within 30 s"
            time.sleep(0.05)
    yield served
    if process.poll() is None:
        served.stop()


def _folder(root: Path, *versions: str, description: str = "Forecasts for a place.") -> Path:
    for version in versions:
        write(
            root / "weather" / f"{version}.yaml",
            MANIFEST.format(version=version, description=description),
        )
    return root


def _project(root: Path, ref: str) -> Path:
    write(
        root / "bundlectl.yaml",
        f"version: 1\nregistries:\n  - {ref}  # the team's registry\nbundles: []\n"
        "agents:\n  forecaster: {allow: [forecast.*]}\n",
    )
    return root


def test_a_pushed_registry_installs_locks_and_works_offline(
    registry: Registry, tmp_path: Path, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _folder(tmp_path / "src", "1.0.0", "1.1.0")
    pushed = run("registry", "push", str(folder), registry.ref(), "--format", "json")
    assert pushed.code == 0, pushed.err
    assert json.loads(pushed.out)["published"] == [
        {"name": "weather", "version": "1.0.0"},
        {"name": "weather", "version": "1.1.0"},
    ]
    assert registry.tags() == ["index", "weather-1.0.0", "weather-1.1.0"]

    project = _project(tmp_path / "proj", registry.ref())
    monkeypatch.chdir(project)
    installed = run("install", "weather<1.1")
    assert installed.code == 0, installed.err
    text = (project / "bundlectl.yaml").read_text()
    assert "# the team's registry" in text  # comments survive the edit
    locked = load_yaml(project / "bundlectl.lock")["bundles"]["weather"]
    assert locked["source"] == registry.ref()
    assert locked["version"] == "1.0.0"
    digest = (
        "sha256:"
        + __import__("hashlib").sha256((folder / "weather" / "1.0.0.yaml").read_bytes()).hexdigest()
    )
    assert locked["digest"] == digest  # the manifest's own sha256: its blob's address

    # the registry goes away and the cached index is stale: the lock still checks, offline
    registry.stop()
    cache = next((Path(os.environ["BUNDLECTL_HOME"]) / "cache" / "registries").iterdir())
    old = time.time() - 3600
    os.utime(cache / ".index.json", (old, old))
    checked = run("lock", "--check")
    assert checked.code == 0, checked.err
    assert f"note: registry {registry.ref()} cannot be reached (connection refused)" in checked.err
    shown = run("show", "weather")
    assert shown.code == 0 and "versions: 1.0.0, 1.1.0" in shown.out


def test_a_published_version_is_immutable_and_a_push_adds_to_what_is_there(
    registry: Registry, tmp_path: Path, run: Run
) -> None:
    first = _folder(tmp_path / "one", "1.0.0")
    assert run("registry", "push", str(first), registry.ref()).code == 0
    changed = _folder(tmp_path / "two", "1.0.0", "2.0.0", description="Other words.")
    refused = run("registry", "push", str(changed), registry.ref())
    assert refused.code == 1
    assert "already holds other content for weather 1.0.0: published as sha256:" in refused.err
    assert "hint: a published version is immutable: bump `version` and push again" in refused.err
    assert registry.tags() == ["index", "weather-1.0.0"]  # nothing of the refused push landed

    more = tmp_path / "three"
    shutil.copytree(first, more)
    _folder(more, "2.0.0")
    added = run("registry", "push", str(more), registry.ref())
    assert added.code == 0, added.err
    assert added.lines == [
        f"published weather 2.0.0 to {registry.ref()} (tag weather-2.0.0)",
        "1 version(s) already there, unchanged",
    ]
    project = _project(tmp_path / "proj", registry.ref())
    listed = run("list", "--format", "json", "-c", str(project / "bundlectl.yaml"))
    assert listed.code == 0, listed.err
    (weather,) = [b for b in json.loads(listed.out)["bundles"] if b["name"] == "weather"]
    assert weather["versions"] == ["1.0.0", "2.0.0"]


def test_what_is_not_a_bundlectl_registry_is_a_clear_error(
    registry: Registry, tmp_path: Path, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = _project(tmp_path / "proj", registry.ref("nothing/here"))
    monkeypatch.chdir(project)
    empty = run("install", "weather")
    assert empty.code == 2
    assert "has no tag 'index': not a bundlectl registry" in empty.err
    assert f"hint: publish one: bundlectl registry push FOLDER {registry.ref('nothing/here')}" in (
        empty.err
    )
    bad = run("registry", "push", str(tmp_path), f"oci://{registry.host}")
    assert bad.code == 2
    assert "is not an OCI registry reference" in bad.err
    registry.stop()
    gone = run("registry", "push", str(_folder(tmp_path / "src", "1.0.0")), registry.ref())
    assert gone.code == 2
    assert f"cannot reach the registry {registry.ref()} (connection refused)" in gone.err


@pytest.mark.parametrize(
    ("reference", "plain_http"),
    [
        ("oci://127.0.0.1:5000/team", True),
        ("oci://localhost/team", True),
        ("oci://[::1]:5000/team", True),
        ("oci://registry.example.com/team/bundles", False),
        ("oci://localhost.example.com:5000/team", False),  # not this machine: HTTPS
        ("oci://127.0.0.1.example.com/team", False),
    ],
)
def test_only_a_registry_on_this_machine_is_spoken_to_over_plain_http(
    reference: str, plain_http: bool
) -> None:
    from bundlectl.config.oci import Reference

    assert Reference.parse(reference).insecure is plain_http
