"""Shared fixtures. Every test gets its own BUNDLECTL_HOME; the real home is unreachable."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import platformdirs
import pytest
from ruamel.yaml import YAML

from bundlectl.cli import main

REPO = Path(__file__).resolve().parent.parent
# A 2025-11-25 `initialize` request, for tests that speak raw JSON-RPC to a server or gateway.
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}


@pytest.fixture(autouse=True)
def _isolated_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Point every bundlectl location at a temp dir and make platformdirs unusable."""
    home = tmp_path_factory.mktemp("bundlectl-home")
    monkeypatch.setenv("BUNDLECTL_HOME", str(home))
    for var in ("BUNDLECTL_CONFIG", "BUNDLECTL_AUDIT_LOG", "BUNDLECTL_DEBUG"):
        monkeypatch.delenv(var, raising=False)

    def unreachable(*args: object, **kwargs: object) -> str:
        raise AssertionError("a test tried to use the real home directory")

    for name in ("user_config_dir", "user_data_dir", "user_state_dir", "user_cache_dir"):
        monkeypatch.setattr(platformdirs, name, unreachable)
    return home


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()

    @property
    def err_lines(self) -> list[str]:
        return self.err.splitlines()


Run = Callable[..., Result]


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Run:
    """Run the real CLI entry point in-process; returns exit code, stdout and stderr."""

    def invoke(*args: str) -> Result:
        capsys.readouterr()
        code = main(list(args))
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return invoke


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty project folder that is the working directory."""
    root = tmp_path / "project"
    root.mkdir()
    monkeypatch.chdir(root)
    return root


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def make_registry(folder: Path, index: dict[str, dict[str, dict[str, Any]]]) -> Path:
    """Materialise an index (name → version → manifest fields) as a registry folder."""
    yaml = YAML(typ="safe", pure=True)
    for name, versions in index.items():
        for version, fields in versions.items():
            target = folder / name / f"{version}.yaml"
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("w") as handle:
                yaml.dump({"name": name, "version": version, **(fields or {})}, handle)
    return folder


def load_yaml(path: Path) -> Any:
    return YAML(typ="safe", pure=True).load(path.read_text())


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    # The same examples on every run and machine (a deterministic suite), no example database.
    from hypothesis import settings

    settings.register_profile("bundlectl", derandomize=True, database=None, deadline=None)
    settings.load_profile("bundlectl")


@pytest.fixture
def isolated_home(_isolated_home: Path) -> Path:
    """The temporary BUNDLECTL_HOME of this test."""
    return _isolated_home
