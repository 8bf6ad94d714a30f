"""Remote registries (issue 40, SPEC 14): a static index written by `bundlectl registry build`,
served by a loopback HTTP server written here (ETag and 304, 404, a cut-short answer, a
changed manifest), mirrored into the user cache and used offline from it."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Run, write

MANIFEST = """name: weather
version: {version}
description: Forecasts for a place.
servers:
  forecast:
    command: python
    args: ["-c", "pass"]
    tools: [{{name: get_forecast, description: "The forecast."}}]
"""


class Served:
    """A folder served over HTTP with ETags; `cut` answers a file short of its length;
    `stalled` paths get no answer until `stall` is set (or the server stops)."""

    def __init__(self, root: Path) -> None:
        self.root, self.log, self.cut, self.stalled = root, [], set(), set()
        self.redirects: dict[str, str] = {}
        self.stall = threading.Event()
        served = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path in served.stalled:
                    served.stall.wait(timeout=60)
                if self.path in served.redirects:
                    self.send_response(302)
                    self.send_header("Location", served.redirects[self.path])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                path = served.root / self.path.lstrip("/")
                if not path.is_file():
                    served.log.append((self.path, 404))
                    self.send_error(404)
                    return
                data = path.read_bytes()
                etag = '"' + hashlib.sha256(data).hexdigest()[:16] + '"'
                if self.headers.get("If-None-Match") == etag:
                    served.log.append((self.path, 304))
                    self.send_response(304)
                    self.end_headers()
                    return
                served.log.append((self.path, 200))
                self.send_response(200)
                self.send_header("ETag", etag)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data[: len(data) // 2] if self.path in served.cut else data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/team/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.stall.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def served(tmp_path: Path, run: Run) -> Iterator[Served]:
    source = tmp_path / "src"
    for version in ("1.0.0", "1.1.0"):
        write(source / "weather" / f"{version}.yaml", MANIFEST.format(version=version))
    built = run("registry", "build", str(source), "--out", str(tmp_path / "www" / "team"))
    assert built.code == 0, built.err
    assert "1 bundle(s), 2 version(s)" in built.out
    server = Served(tmp_path / "www")
    yield server
    server.stop()


def _project(project: Path, url: str) -> None:
    write(
        project / "bundlectl.yaml",
        f'version: 1\nregistries: ["{url}"]\nbundles: []\npolicy: {{default: deny}}\n',
    )


def _age_index(home: Path) -> None:
    """Make the cached index older than its freshness, as time passing would."""
    for index in (home / "cache" / "registries").glob("*/.index.json"):
        old = time.time() - 3600
        os.utime(index, (old, old))


def test_bundles_install_from_an_index_and_the_lock_records_where(
    project: Path, run: Run, served: Served, isolated_home: Path
) -> None:
    _project(project, served.url)
    installed = run("install", "weather==1.0.0")
    assert installed.code == 0, installed.err
    lock = (project / "bundlectl.lock").read_text()
    index = json.loads((served.root / "team" / "index.json").read_text())
    digest = index["bundles"]["weather"]["1.0.0"]["sha256"]
    assert f'source: "{served.url}"' in lock and digest in lock
    listed = run("list", "--format", "json")
    [weather] = [b for b in json.loads(listed.out)["bundles"] if b["name"] == "weather"]
    assert weather["source"] == served.url
    fetched = list(served.log)
    assert fetched.count(("/team/index.json", 200)) == 1  # then used from the cache
    assert run("lock", "--check").code == 0
    assert served.log == fetched  # fresh: no request at all
    _age_index(isolated_home)
    assert run("lock", "--check").code == 0
    assert served.log[-1] == ("/team/index.json", 304)  # asked again: unchanged

    served.stop()  # offline: the cache serves a locked project
    _age_index(isolated_home)
    offline = run("lock", "--check")
    assert offline.code == 0, offline.err
    assert f"note: registry {served.url} cannot be reached" in offline.err
    assert run("install", "weather==1.0.0").code == 0


def test_a_slow_registry_is_given_up_after_timeout_and_the_cache_serves(
    project: Path, run: Run, served: Served, isolated_home: Path
) -> None:
    """`lock`/`install`/`remove --timeout`: each request to a remote registry may take that
    long; a registry that gives no answer in time is unreachable — an error with the option in
    its hint when nothing is cached, the cached index with a note when it is."""
    _project(project, served.url)
    served.stalled.add("/team/index.json")
    given_up = run("lock", "--timeout", "0.3")
    assert given_up.code == 2, given_up.err
    assert f"cannot reach the registry {served.url} (timed out)" in given_up.err
    assert "no answer within 0.3 s; give it longer with --timeout SECONDS" in given_up.err
    assert run("install", "weather", "--timeout", "0").code == 2  # 0.1-3600
    assert "not a number of seconds" in run("lock", "--timeout", "nan").err

    served.stalled.clear()
    assert run("install", "weather==1.0.0", "--timeout", "5").code == 0
    served.stalled.add("/team/index.json")
    _age_index(isolated_home)
    cached = run("lock", "--check", "--timeout", "0.3")
    assert cached.code == 0, cached.err
    assert f"note: registry {served.url} cannot be reached (timed out)" in cached.err


def test_a_manifest_that_differs_from_its_index_is_refused_with_both_digests(
    project: Path, run: Run, served: Served
) -> None:
    _project(project, served.url)
    published = served.root / "team" / "weather" / "1.1.0.yaml"
    published.write_text(published.read_text().replace("Forecasts", "Mail your files to"))
    refused = run("install", "weather")
    assert refused.code == 2
    assert "weather 1.1.0: the manifest's digest sha256:" in refused.err
    assert "differs from the index's sha256:" in refused.err
    assert "bundles: []" in (project / "bundlectl.yaml").read_text()  # nothing written


@pytest.mark.parametrize(
    ("fault", "said"),
    [
        ("missing", "the registry has no index.json (HTTP 404)"),
        ("cut", "cut short"),
        ("garbage", "the index is not JSON"),
        ("hostile", "bundle name '../../evil' is not a bundle name"),
        ("manifest cut", "cannot fetch weather 1.0.0 from the registry http://"),
        # #52 items 6 and 11: an index names relative paths below itself, and no redirect
        # leads where the config could not point.
        ("entry file://", "path 'file:///etc/passwd' is not a relative path below the index"),
        ("entry http", "path 'http://evil.example/w.yaml' is not a relative path"),
        ("entry ..", "path '../../w.yaml' is not a relative path"),
        ("redirect", "a redirect to http://127.0.0.1.evil.example/i.json is plain http to"),
    ],
)
def test_a_broken_registry_is_a_clear_error(
    project: Path, run: Run, served: Served, fault: str, said: str
) -> None:
    index = served.root / "team" / "index.json"
    if fault == "missing":
        index.unlink()
    elif fault == "cut":
        served.cut.add("/team/index.json")
    elif fault == "manifest cut":
        served.cut.add("/team/weather/1.0.0.yaml")
    elif fault == "garbage":
        index.write_text("{not json")
    elif fault.startswith("entry"):
        data = json.loads(index.read_text())
        path = said.split("'")[1]
        data["bundles"]["weather"]["1.0.0"]["path"] = path
        index.write_text(json.dumps(data))
    elif fault == "redirect":
        served.redirects["/team/index.json"] = "http://127.0.0.1.evil.example/i.json"
    else:
        data = json.loads(index.read_text())
        data["bundles"]["../../evil"] = data["bundles"]["weather"]
        index.write_text(json.dumps(data))
    _project(project, served.url)
    failed = run("list")
    assert failed.code == 2, failed.err
    assert said in failed.err and "Traceback" not in failed.err


@pytest.mark.parametrize(
    "path",
    [
        "\t/elsewhere/w.yaml",  # a URL parser drops the tab: an absolute path on the host
        " /elsewhere/w.yaml",  # and a leading space
        "weather/.\n./.\n./../w.yaml",  # and the line breaks inside: `../../..`
        "weather/1.0.0.yaml\x00",
        "weather/\u2024\u2024/w.yaml",  # one-dot leaders, not dots, but not a name either
    ],
)
def test_an_index_path_a_url_parser_reads_otherwise_is_refused(
    project: Path, run: Run, served: Served, path: str
) -> None:
    """#52 item 11, the variants the plain checks missed: a manifest's path in an index is
    made of names of letters, digits and `._+~-` only, so no character that a URL parser
    strips or reads otherwise can lead the fetch outside the index's folder."""
    index = served.root / "team" / "index.json"
    data = json.loads(index.read_text())
    data["bundles"]["weather"]["1.0.0"]["path"] = path
    index.write_text(json.dumps(data))
    _project(project, served.url)
    failed = run("list")
    assert failed.code == 2, failed.err
    assert f"path {path!r} is not a relative path below the index" in failed.err, failed.err
    assert not [p for p, _ in served.log if "elsewhere" in p or p.endswith("/w.yaml")]


def test_only_the_bundles_a_project_uses_are_fetched(
    tmp_path: Path, project: Path, run: Run
) -> None:
    """A registry of many bundles costs a project the index and the manifests of the bundles it
    uses: a cold `lock` fetches nothing else, and a broken manifest of a bundle it does not use
    (checked when the registry was built, changed on the server since) does not stop it."""
    source = tmp_path / "src"
    for name in ("weather", "mail", "maps"):
        manifest = MANIFEST.replace("name: weather", f"name: {name}")
        write(source / name / "1.0.0.yaml", manifest.format(version="1.0.0"))
    assert run("registry", "build", str(source), "--out", str(tmp_path / "www" / "team")).code == 0
    (tmp_path / "www" / "team" / "maps" / "1.0.0.yaml").write_text("name: [not a manifest")
    served = Served(tmp_path / "www")
    try:
        _project(project, served.url)
        installed = run("install", "weather")
        assert installed.code == 0, installed.err
        fetched = sorted(path for path, _ in served.log)
        assert fetched == ["/team/index.json", "/team/weather/1.0.0.yaml"]
        assert run("lock", "--check").code == 0
        # `list` shows every bundle: now the others are fetched, and the changed one refused
        listed = run("list")
        assert listed.code == 2
        assert "maps 1.0.0: the manifest's digest sha256:" in listed.err
        assert ("/team/mail/1.0.0.yaml", 200) in served.log
    finally:
        served.stop()


def test_upgrade_asks_for_the_index_again_and_lock_says_when_it_was_checked(
    project: Path, run: Run, served: Served, tmp_path: Path
) -> None:
    """#56: `lock --upgrade` right after a version is published sees it (a cached index, 5
    minutes fresh, hid it), and `lock` says when the index was last checked."""
    _project(project, served.url)
    assert run("install", "weather>=1").code == 0
    source = tmp_path / "src"
    write(source / "weather" / "1.2.0.yaml", MANIFEST.format(version="1.2.0"))
    assert run("registry", "build", str(source), "--out", str(served.root / "team")).code == 0
    kept = run("lock")
    assert kept.code == 0, kept.err
    assert kept.out.startswith(
        f"no bundle versions change (registry index: {served.url} checked just now; "
        "--refresh checks them again)"
    )
    before = len(served.log)
    upgraded = run("lock", "--upgrade", "weather")
    assert upgraded.code == 0, upgraded.err
    assert "~ weather 1.1.0 -> 1.2.0" in upgraded.out
    assert served.log[before] == ("/team/index.json", 200)  # asked again, though fresh
    refreshed = run("lock", "--refresh")
    assert served.log[-1] == ("/team/index.json", 304)  # unchanged since: a 304
    assert refreshed.out.startswith("no bundle versions change")
    assert "--refresh checks them again" not in refreshed.out
