"""`bundlectl registry search QUERY` (issue 40): bundles of the project's registries by name or
description, and servers of an MCP Registry (`--from mcp-registry`), whose answer is recorded
JSON of the registry's API served on loopback — then imported with `import server-json URL` from
the URL the search names."""

from __future__ import annotations

import http.server
import json
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Run, load_yaml, send_json, write

RECORDED = json.loads(
    (Path(__file__).parents[1] / "data" / "mcp-registry-servers.json").read_text()
)


class Registry:
    """An MCP Registry on loopback: `/v0.1/servers` (or only `/v0` when `legacy`) filtered by
    `search`, and each server's latest version; `hold` keeps every answer back until released."""

    def __init__(self, legacy: bool = False, hold: bool = False) -> None:
        self.asked: list[str] = []
        self.release = threading.Event()
        if not hold:
            self.release.set()
        registry = self
        api = "/v0" if legacy else "/v0.1"

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                registry.asked.append(self.path)
                registry.release.wait(30)
                path, _, query = self.path.partition("?")
                params = urllib.parse.parse_qs(query)
                entries = RECORDED["servers"]
                if path == f"{api}/servers":
                    wanted = params.get("search", [""])[0]
                    found = [e for e in entries if wanted in e["server"]["name"]]
                    limit = int(params.get("limit", ["30"])[0])
                    send_json(self, {"servers": found[:limit], "metadata": {"count": len(found)}})
                    return
                prefix = f"{api}/servers/"
                if path.startswith(prefix) and path.endswith("/versions/latest"):
                    name = urllib.parse.unquote(path[len(prefix) : -len("/versions/latest")])
                    for entry in entries:
                        if entry["server"]["name"] == name:
                            send_json(self, entry)
                            return
                self.send_error(404)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def registry() -> Iterator[Registry]:
    served = Registry()
    yield served
    served.stop()


def test_a_search_finds_servers_and_names_the_url_that_imports_one(
    registry: Registry, project: Path, run: Run
) -> None:
    found = run("registry", "search", "time", "--from", "mcp-registry", "--url", registry.url)
    assert found.code == 0, found.err
    assert found.lines[0].split() == ["NAME", "VERSION", "RUNS", "STATUS", "DESCRIPTION"]
    assert found.lines[1].split() == [
        *("io.github.example/time-server", "1.4.0", "pypi", "active"),
        *["Current", "time", "and", "timezone", "conversions."],
    ]
    assert found.lines[2].split()[:5] == [
        *("com.example/timesheets", "0.9.1", "npm,", "streamable-http", "deprecated"),
    ]
    assert "Log and report hours worked." in found.lines[2]  # folded onto its row
    assert len(found.lines) == 3  # weather's name does not hold "time"
    url = f"{registry.url}/v0.1/servers/io.github.example%2Ftime-server/versions/latest"
    assert f"note: import one into the project: bundlectl import server-json {url}" in found.err
    assert registry.asked[0] == "/v0.1/servers?search=time&version=latest&limit=20"

    write(project / "bundlectl.yaml", "version: 1\n")
    imported = run("import", "server-json", url)
    assert imported.code == 0, imported.err
    server = load_yaml(project / "bundlectl.yaml")["servers"]["time-server"]
    assert server["args"] == ["example-time-server==1.4.0"]
    assert server["env"] == {"LOCAL_TIMEZONE": "${LOCAL_TIMEZONE:-UTC}"}

    as_json = run(
        *("registry", "search", "weather", "--from", "mcp-registry", "--url", registry.url),
        *("--format", "json", "--limit", "5"),
    )
    (weather,) = json.loads(as_json.out)["servers"]
    assert weather["runs"] == ["sse"] and weather["version"] == "2.0.0"


def test_an_older_registry_is_asked_on_v0_and_a_slow_one_gives_up_at_the_timeout(
    project: Path, run: Run
) -> None:
    legacy = Registry(legacy=True)
    try:
        found = run("registry", "search", "weather", "--from", "mcp-registry", "--url", legacy.url)
    finally:
        legacy.stop()
    assert found.code == 0, found.err
    assert [p.split("?")[0] for p in legacy.asked] == ["/v0.1/servers", "/v0/servers"]
    assert "io.github.example/weather" in found.out
    assert "/v0/servers/io.github.example%2Fweather/versions/latest" in found.err

    slow = Registry(hold=True)
    try:
        given_up = run(
            *("registry", "search", "time", "--from", "mcp-registry", "--url", slow.url),
            *("--timeout", "0.3"),
        )
    finally:
        slow.stop()
    assert given_up.code == 2
    assert f"error: cannot reach the registry {slow.url} (no answer within 0.3 s)" in given_up.err
    assert "raise --timeout" in given_up.err


def test_the_projects_registries_are_searched_by_name_and_description(
    project: Path, run: Run
) -> None:
    write(project / "bundlectl.yaml", "version: 1\nregistries: [team]\n")
    write(
        project / "team" / "weather" / "1.0.0.yaml",
        "name: weather\nversion: 1.0.0\ndescription: Forecasts for a place, with git-free maps.\n"
        "servers:\n  forecast: {command: python, tools: []}\n",
    )
    found = run("registry", "search", "git", "--format", "json")
    assert found.code == 0, found.err
    names = [(b["name"], b["source"]) for b in json.loads(found.out)["bundles"]]
    # by name (code-review holds "git" in its description, github in its name) and description
    assert names == [
        ("code-review", "builtin"),
        ("docs-writer", "builtin"),
        ("github", "builtin"),
        ("weather", "team"),
    ]
    nothing = run("registry", "search", "zzz")
    assert nothing.code == 0
    assert nothing.out == "no bundle's name or description holds 'zzz'\n"
    assert "--from mcp-registry" in nothing.err
    # a bundle folder whose only file is not named by a version has no versions: passed over
    write(project / "team" / "broken" / "latest.yaml", "name: broken\n")
    broken = run("registry", "search", "bro")
    assert broken.code == 0, broken.err
    assert broken.out == "no bundle's name or description holds 'bro'\n"
    zero = run("registry", "search", "x", "--from", "mcp-registry", "--timeout", "0")
    assert zero.code == 2 and "--timeout 0: give a number of seconds above 0" in zero.err
    misused = run("registry", "search", "git", "--url", "http://127.0.0.1:9")
    assert misused.code == 2 and "--url is for --from mcp-registry" in misused.err
