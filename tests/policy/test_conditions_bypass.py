"""Argument conditions judge what the server will act on (SPEC 10): regression tests for the ways
past a `{path: }`, a number or a `not` that an adversarial run found (issue: security).

Each attack is tried through the front doors that share the pipeline: `exec`, `serve` (the SDK
path, in process), code mode; the engine's own answer is checked for the whole class."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

from bundlectl.policy.conditions import MISSING, compile_matcher, normalised
from tests.conftest import TEST_SERVERS, Run, write

PY = sys.executable

DOCW = """
version: 1
bundles: [basic]
agents:
  docw:
    allow:
      - {tool: files.write_file, args: {path: {path: "docs/**"}}}
      - {tool: files.read_file, args: {path: {path: "docs/**"}}}
  reader:
    allow: [files.read_file]
    deny:
      - {tool: files.read_file, args: {path: {path: "secrets/**"}}}
policy: {default: deny}
"""


@pytest.fixture
def docw(project: Path, run: Run) -> Path:
    write(project / "bundlectl.yaml", DOCW)
    for folder in ("docs", "src", "secrets"):
        (project / folder).mkdir()
    (project / "secrets" / "key").write_text("TOPSECRET")
    (project / "docs" / "guide.md").write_text("guide")
    assert run("lock").code == 0
    return project


# Paths that mean something else to some reader: never an allow, always a deny.
AMBIGUOUS = [
    "docs\\x/../src/pwned.py",  # a backslash: one name here, a separator elsewhere
    "docs\\..\\src\\pwned.py",
    "~/docs/x",  # a home folder to a shell-minded server
    "file:docs/x",  # a URI scheme
    "C:docs/x",  # a drive letter
    "docs/%2e%2e/src/x",  # percent-escapes of `.`, `/`, `\`
    "docs%2f..%2fsrc/x",
    "docs/\uff0e\uff0e/src/x",  # fullwidth dots: `..` after NFKC
    "docs\uff0f..\uff0fsrc/x",  # fullwidth solidus
    "docs/x\x00.md",
    "",
]


@pytest.mark.parametrize("path", AMBIGUOUS)
def test_a_path_with_more_than_one_meaning_never_allows_and_always_denies(path: str) -> None:
    matcher = compile_matcher({"path": "docs/**"})
    assert normalised(path) is None
    assert matcher.holds(path, strict=False) is False
    assert compile_matcher({"path": "secrets/**"}).holds(path, strict=True) is True


@pytest.mark.parametrize(
    ("raw", "value", "strict", "holds"),
    [
        (5, 5.0, True, True),  # numbers compare as numbers: a deny on 5 catches 5.0
        (5, 5.0, False, True),
        (5.0, 5, True, True),
        ([1, 5], 5.0, True, True),
        (5, True, True, True),  # a boolean is no number: a deny holds, an allow does not
        (5, True, False, False),
        (True, 1, True, True),
        (5, math.nan, True, True),  # NaN: every comparison false, so a deny holds
        (5, math.nan, False, False),
        ({"min": 5}, math.nan, True, True),
        ({"min": 5}, math.nan, False, False),
        ({"max": 5}, math.inf, True, True),
        ({"max": 5}, -math.inf, False, False),
        ({"min": 5}, "9", True, True),  # a range cannot judge a string
        ({"min": 5}, "9", False, False),
        # a string matcher given a list or an object cannot judge it
        ({"not": {"path": "secrets/**"}}, ["secrets/key"], False, False),
        ({"not": {"path": "secrets/**"}}, {"path": "secrets/key"}, False, False),
        ({"not": {"path": "secrets/**"}}, ["secrets/key"], True, True),
        ({"path": "secrets/**"}, ["secrets/key"], True, True),
        ({"glob": "rm*"}, ["rm"], True, True),
        ({"re": "main"}, {"branch": "main"}, False, False),
        ({"not": "main"}, 7, False, False),
        ({"not": {"min": 10}}, "100", False, False),
        ({"not": {"min": 10}}, 3, False, True),  # judged: 3 is below 10
        (None, 0, False, False),
        (None, None, False, True),
    ],
)
def test_a_matcher_judges_only_values_of_its_type(
    raw: Any, value: Any, strict: bool, holds: bool
) -> None:
    assert compile_matcher(raw).holds(value, strict) is holds, (raw, value, strict)


def test_the_builtin_server_reading_follows_links_below_the_root(tmp_path: Path) -> None:
    from bundlectl.servers import path_reader

    root = tmp_path / "root"
    for folder in ("docs", "src", "secrets"):
        (root / folder).mkdir(parents=True)
    (root / "docs" / "srclink").symlink_to("../src")
    (root / "docs" / "abs").symlink_to(root / "secrets")
    (root / "docs" / "out").symlink_to("/etc")
    read = path_reader(root)
    assert read("docs/srclink/x.py") == ["docs/srclink/x.py", "src/x.py"]
    assert read("docs/abs/key") == ["docs/abs/key", "secrets/key"]
    assert read("docs/new/../srclink/x.py") == ["docs/srclink/x.py", "src/x.py"]
    assert read("docs/out/passwd")[1] is None  # leaves the root
    assert read("docs\\x") == [None]
    allow = compile_matcher({"path": "docs/**"})
    deny = compile_matcher({"path": "secrets/**"})
    assert allow.holds("docs/srclink/x.py", False, read) is False
    assert allow.holds("docs/sub/x.md", False, read) is True
    assert allow.holds("docs/out/passwd", False, read) is False
    assert deny.holds("docs/abs/key", True, read) is True
    assert deny.holds("docs/guide.md", True, read) is False


def test_exec_refuses_a_backslash_path_that_the_server_reads_as_a_climb(
    docw: Path, run: Run
) -> None:
    """The issue's attack: `docs\\x/../src/pwned.py` was `docs/src/pwned.py` to the policy and
    `src/pwned.py` to the files server."""
    attack = run(
        "exec", "-a", "docw", "files.write_file", "path=docs\\x/../src/pwned.py", "content=PWNED"
    )
    assert attack.code == 3, attack.err
    assert not (docw / "src" / "pwned.py").exists()
    secret = run("exec", "-a", "reader", "files.read_file", "path=docs\\..\\secrets\\key")
    assert secret.code == 3 and "TOPSECRET" not in secret.out
    fine = run("exec", "-a", "docw", "files.write_file", "path=docs/ok.md", "content=ok")
    assert fine.code == 0, fine.err


def test_exec_decides_a_linked_path_on_where_the_link_leads(docw: Path, run: Run) -> None:
    (docw / "docs" / "srclink").symlink_to("../src")
    (docw / "docs" / "keys").symlink_to("../secrets")
    widened = run("exec", "-a", "docw", "files.write_file", "path=docs/srclink/x.py", "content=x")
    assert widened.code == 3, widened.err
    assert not (docw / "src" / "x.py").exists()
    through = run("exec", "-a", "reader", "files.read_file", "path=docs/keys/key")
    assert through.code == 3 and "TOPSECRET" not in through.out
    assert run("exec", "-a", "reader", "files.read_file", "path=docs/guide.md").out == "guide\n"


def test_serve_and_code_mode_refuse_the_same_paths(
    docw: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bundlectl import client
    from tests.gateway.test_gateway_inprocess import serve_in_process, texts

    (docw / "docs" / "srclink").symlink_to("../src")
    attacks = ["docs\\x/../src/a.py", "docs/srclink/b.py", "docs/%2e%2e/src/c.py"]

    async def script(session: Any) -> list[Any]:
        found = []
        for path in attacks:
            args = {"path": path, "content": "x"}
            found.append(await session.call_tool("files__write_file", args))
        return found

    for result in serve_in_process(docw, "docw", script):
        assert result.is_error, texts(result)
    searched = serve_in_process(
        docw,
        "docw",
        lambda s: s.call_tool(
            "call_tool",
            {"name": "files.write_file", "arguments": {"path": attacks[0], "content": "x"}},
        ),
        mode="search",
    )
    assert searched.is_error
    monkeypatch.chdir(docw)
    for path in attacks:
        with pytest.raises(client.ToolDenied):
            client.call_tool("files.write_file", {"path": path, "content": "x"}, agent="docw")
    assert sorted(p.name for p in (docw / "src").iterdir()) == []


NUMBERS = f"""
version: 1
servers:
  kitchen:
    command: {PY}
    args: ["{TEST_SERVERS / "kitchen.py"}"]
agents:
  bot:
    allow: [kitchen.add, kitchen.sleep]
    deny:
      - {{tool: kitchen.add, args: {{a: 5}}}}
      - {{tool: kitchen.sleep, args: {{seconds: {{min: 5}}}}}}
policy: {{default: deny}}
"""


def test_numbers_compare_as_numbers_and_nan_is_refused_at_the_door(project: Path, run: Run) -> None:
    write(project / "bundlectl.yaml", NUMBERS)
    assert run("exec", "-a", "bot", "kitchen.add", "--args", '{"a": 5.0, "b": 1}').code == 3
    assert run("exec", "-a", "bot", "kitchen.add", "--args", '{"a": 4.0, "b": 1}').code == 0
    for bad in ("NaN", "Infinity", "-Infinity", "1e999"):
        refused = run("exec", "-a", "bot", "kitchen.sleep", "--args", f'{{"seconds": {bad}}}')
        assert refused.code == 2, refused.err
        assert "not a JSON number" in refused.err
    typed = run("exec", "-a", "bot", "kitchen.sleep", "seconds=1e999")
    assert typed.code == 4 and "not a valid number" in typed.err
    checked = run("policy", "check", "-a", "bot", "kitchen.add", "--args", '{"a": 5.0}')
    assert checked.code == 3


def test_the_pipeline_refuses_nan_whatever_parsed_it(project: Path) -> None:
    """HTTP's parser (pydantic) takes NaN and the infinities; the pipeline every front door
    calls refuses them before anything is decided on them, and records why."""
    from bundlectl.calls.audit import AuditLog
    from bundlectl.calls.pipeline import Pipeline
    from bundlectl.config.project import load_project
    from bundlectl.errors import ToolCallError
    from bundlectl.resolve.resolved import resolve_project
    from tests.gateway.test_gateway_inprocess import serve_in_process

    write(project / "bundlectl.yaml", NUMBERS)
    resolution = resolve_project(load_project(project / "bundlectl.yaml"))
    pipeline = Pipeline(resolution, AuditLog(resolution, via="serve"), confirm=None)
    for bad in (math.nan, math.inf, [1, -math.inf], {"deep": [math.nan]}):
        with pytest.raises(ToolCallError, match="NaN or an infinity"):
            pipeline.judge("bot", "kitchen", "sleep", interactive=True, arguments={"seconds": bad})
    assert pipeline.judge("bot", "kitchen", "sleep", interactive=True, arguments={"seconds": 1})

    async def script(session: Any) -> list[Any]:
        return [
            await session.call_tool("kitchen__add", {"a": 5.0, "b": 1}),
            await session.call_tool("kitchen__add", {"a": 4.0, "b": 1}),
        ]

    five, four = serve_in_process(project, "bot", script)
    assert five.is_error and not four.is_error


def test_the_gateway_over_stdio_answers_nan_with_a_parse_error(project: Path) -> None:
    import subprocess
    import sys

    from tests.conftest import INITIALIZE

    write(project / "bundlectl.yaml", NUMBERS)
    call = '{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": '
    call += '{"name": "kitchen__sleep", "arguments": {"seconds": NaN}}}'
    marker = {"jsonrpc": "2.0", "id": 3, "method": "ping"}
    lines = [json.dumps(INITIALIZE), call, json.dumps(marker)]
    done = subprocess.run(
        [sys.executable, "-m", "bundlectl", "serve", "--agent", "bot"],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        cwd=project,
        timeout=60,
        check=False,
    )
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    refused = next(a for a in answers if "error" in a)
    assert (
        refused["error"]["code"] == -32700
        and "NaN is not a JSON number" in refused["error"]["message"]
    )
    assert any(a.get("id") == 3 for a in answers)  # it went on after the refusal
    assert not any(a.get("id") == 2 for a in answers)


def test_conditions_judge_the_values_behind_privacy_tokens(project: Path, tmp_path: Path) -> None:
    """A deny on an address caught `alice@example.com` but let `[EMAIL_1]` through, which the
    `detokenize` tool then received as `alice@example.com`."""
    from tests.privacy.test_privacy import _in_process

    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        bundles: [basic]
        servers:
          kitchen:
            command: {PY}
            args: ["{TEST_SERVERS / "kitchen.py"}"]
        agents:
          clerk:
            allow: [kitchen.people, files.write_file]
            deny:
              - {{tool: files.write_file, args: {{content: "*@example.com*"}}}}
        policy: {{default: deny}}
        privacy:
          tokenize: [email]
          detokenize: [files.write_file]
        """,
    )

    async def script(session: Any) -> list[Any]:
        people = await session.call_tool("kitchen__people", {})
        token = json.dumps(people.structured_content).split('"email": "')[1].split('"')[0]
        assert token.startswith("[EMAIL_")
        write_token = {"path": "a.txt", "content": f"to {token}"}
        plain = {"path": "b.txt", "content": "to nobody"}
        return [
            await session.call_tool("files__write_file", write_token),
            await session.call_tool("files__write_file", plain),
        ]

    [(tokened, plain)], _ = _in_process(project, "clerk", [script])
    assert tokened.is_error and not (project / "a.txt").exists()
    assert not plain.is_error and (project / "b.txt").read_text() == "to nobody"


def test_a_missing_value_is_still_judged_as_missing() -> None:
    assert compile_matcher({"present": False}).holds(MISSING, True) is True
    assert compile_matcher({"path": "docs/**"}).holds(MISSING, True) is False
