"""`bundlectl read` and `bundlectl prompt`: resources and prompts from the command line, under
the policy `serve` applies to them, against the conformance suite's fixture server (stdio)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, Run, write

PY = sys.executable
DOWNSTREAM = REPO / "tests" / "servers" / "conformance.py"


@pytest.fixture
def conf(project: Path, run: Run) -> Path:
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        bundles: [basic]
        servers:
          conf: {{command: {PY}, args: ["{DOWNSTREAM}"]}}
        agents:
          suite: {{allow: ["conf.*"]}}
          reader: {{allow: [files.read_file]}}
        policy: {{default: deny}}
        """,
    )
    assert run("lock").code == 0
    return project


def audit(home: Path) -> list[tuple[str, str, str, str, str]]:
    lines = (home / "state" / "audit.jsonl").read_text().splitlines()
    return [
        (r["agent"], r["server"], r["tool"], r["decision"], r["outcome"])
        for r in map(json.loads, lines)
    ]


def test_read_lists_reads_and_saves_under_the_policy(
    conf: Path, run: Run, isolated_home: Path, tmp_path: Path
) -> None:
    listed = run("read", "conf", "-a", "suite")
    assert listed.code == 0, listed.err
    assert "test://static-text (text/plain)  static-text" in listed.lines
    assert "test://template/{id}/data  (template) template" in listed.lines
    text = run("read", "conf", "test://static-text", "-a", "suite")
    assert (text.code, text.out) == (0, "This is the content of the static text resource.\n")
    binary = run(
        "read", "conf", "test://static-binary", "-a", "suite", "--output-dir", str(tmp_path / "o")
    )
    assert binary.code == 0, binary.err
    saved = tmp_path / "o" / "resource-1.png"
    assert binary.out == f"[resource: {saved} (image/png, {saved.stat().st_size:,} bytes)]\n"
    assert saved.read_bytes().startswith(b"\x89PNG")
    missing = run("read", "conf", "test://nope", "-a", "suite")
    assert missing.code == 4
    assert "server 'conf' has no resource 'test://nope'" in missing.err
    assert "`bundlectl read conf` lists them" in missing.err
    denied = run("read", "conf", "test://static-text", "-a", "reader")
    assert denied.code == 3
    assert "agent 'reader' may not read the resources of server 'conf'" in denied.err
    typo = run("read", "cnf", "x", "-a", "suite")
    assert typo.code == 2 and "did you mean 'conf'?" in typo.err
    assert audit(isolated_home) == [
        ("suite", "conf", "resources/list", "allow", "ok"),
        ("suite", "conf", "resources/read", "allow", "ok"),
        ("suite", "conf", "resources/read", "allow", "ok"),
        # the policy let it through; the server has no such resource
        ("suite", "conf", "resources/read", "allow", "not-found"),
        ("reader", "conf", "resources/read", "deny", "denied"),
    ]


def test_prompt_lists_and_fills_in_under_the_policy(conf: Path, run: Run) -> None:
    got = run("prompt", "conf", "test_prompt_with_arguments", "arg1=a", "arg2=b", "-a", "suite")
    assert got.code == 0, got.err
    assert got.out == "user: Prompt with arguments: arg1='a', arg2='b'\n"
    listed = run("prompt", "conf", "-a", "suite", "--format", "json")
    assert listed.code == 0, listed.err
    names = [p["name"] for p in json.loads(listed.out)["prompts"]]
    assert "test_prompt_with_arguments" in names and "test_simple_prompt" in names
    missing = run("prompt", "conf", "nope", "-a", "suite")
    assert missing.code == 4 and "server 'conf' has no prompt 'nope'" in missing.err
    bad = run("prompt", "conf", "x", "oops", "-a", "suite")
    assert bad.code == 2 and "'oops' is not KEY=VALUE" in bad.err
    short = run("prompt", "conf", "test_prompt_with_arguments", "arg1=a", "-a", "suite")
    assert short.code == 2  # it said the prompt did not exist
    assert "prompt 'test_prompt_with_arguments' of server 'conf' needs argument(s) arg2" in (
        short.err
    )
    denied = run("prompt", "conf", "test_simple_prompt", "-a", "reader")
    assert denied.code == 3 and "may not get the prompts of server 'conf'" in denied.err
