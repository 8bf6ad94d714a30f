"""The built-in bundles: valid, versioned, and faithful to the servers they describe."""

from pathlib import Path

import anyio
import pytest

from bundlectl.config import paths
from bundlectl.config.models import BundleManifest
from bundlectl.config.registry import Registry, Source
from tests.conftest import Run

BUILTIN = Registry([Source("builtin", paths.builtin_registry_dir())])


def test_the_five_bundles_are_there_and_valid() -> None:
    assert BUILTIN.names() == ["basic", "code-review", "devops", "docs-writer", "github"]
    for name in BUILTIN.names():
        for version in BUILTIN.versions(name):
            assert isinstance(BUILTIN.get(name, version).manifest, BundleManifest)
    assert len(BUILTIN.versions("github")) >= 2


def test_third_party_packages_are_pinned_and_secrets_are_references() -> None:
    for name in BUILTIN.names():
        for version in BUILTIN.versions(name):
            manifest = BUILTIN.get(name, version).manifest
            for server in manifest.servers.values():
                if server.command in ("npx", "uvx"):
                    package = server.args[-1]
                    assert "@" in package[1:] or "==" in package, package
                for value in server.env.values():
                    assert value.startswith("${"), value


@pytest.mark.parametrize(("bundle", "server"), [("basic", "files"), ("code-review", "review")])
def test_builtin_catalog_matches_the_real_server(bundle: str, server: str, tmp_path: Path) -> None:
    from mcp import Client

    from bundlectl.servers import build

    declared = BUILTIN.get(bundle, BUILTIN.versions(bundle)[-1]).manifest.servers[server].tools

    async def live() -> list[dict[str, object]]:
        async with Client(build(server, tmp_path)) as client:
            return [
                {
                    "name": t.name,
                    "description": t.description or "",
                    "input_schema": t.input_schema,
                    "output_schema": t.output_schema,
                    "annotations": t.annotations.model_dump(by_alias=True, exclude_none=True)
                    if t.annotations
                    else {},
                }
                for t in (await client.list_tools()).tools
            ]

    expected = [t.model_dump(exclude={"title"}) for t in declared]
    assert anyio.run(live) == expected


def test_show_lists_servers_tools_inputs_and_agents(project: Path, run: Run) -> None:
    result = run("show", "github==1.1.0")
    assert result.code == 0
    assert result.lines[:5] == [
        "github 1.1.0 (builtin): GitHub repositories, issues and pull requests (reference server)",
        "versions: 1.0.0, 1.1.0, 2.0.0, 2.1.0",
        "requires: -",
        "inputs:",
        "  GITHUB_TOKEN  required, secret  GitHub personal access token with repo scope",
    ]
    assert "  github  stdio: npx -y @modelcontextprotocol/server-github@2025.4.8" in result.lines
    assert "    env: GITHUB_PERSONAL_ACCESS_TOKEN=${GITHUB_TOKEN}" in result.lines
    assert "    tools (26):" in result.lines
    # Where it runs by default (#55): 1.1.0 declares nothing, so no network; 2.1.0 declares it.
    assert any(
        line.startswith("    sandbox: writes nothing; no network; 2G of memory")
        and line.endswith("(and where a project's rules bound its writes)")
        for line in result.lines
    ), result.out
    newest = run("show", "github").lines
    assert (
        "    sandbox: writes nothing; the machine's network; 2G of memory; in its container "
        "(the runtime's isolation)"
    ) in newest
    assert not any("sandbox" in line for line in run("show", "basic").lines)  # built in
    assert "  github-reader  allow: github.get_*, github.search_*, github.list_*" in result.lines
    as_json = run("show", "docs-writer", "--format", "json")
    assert '"requires": [\n      "basic>=1.0,<2",\n      "github>=1.1,<3"\n    ]' in as_json.out


def test_list_and_init(project: Path, run: Run) -> None:
    listing = run("list")
    assert listing.lines[0].split() == [
        "NAME",
        "NEWEST",
        "VERSIONS",
        "INSTALLED",
        "SOURCE",
        "DESCRIPTION",
    ]
    assert [line.split()[0] for line in listing.lines[1:]] == BUILTIN.names()
    init = run("init")
    assert init.code == 0, init.err
    assert (project / "bundlectl.lock").exists()
    assert run("init").code == 2
    assert run("init", "--force").code == 0
    assert run("list", "--installed").lines[1].split()[:4] == ["basic", "1.1.0", "1.0.0,", "1.1.0"]
    assert run("lock", "--check").code == 0
