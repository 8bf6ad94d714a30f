"""`bundlectl codegen` (SPEC 9): the agent's tools as a typed Python package that passes
`mypy --strict`, whose functions reach the real servers through the policy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bundlectl.codegen import _Module, generate, generate_typescript, identifier, py_type
from bundlectl.models import ToolSpec
from tests.conftest import Run, write

PY = sys.executable


@pytest.fixture
def coded(project: Path, run: Run) -> Path:
    write(
        project / "bundlectl.yaml",
        """
        version: 1
        bundles: [basic, github, code-review, devops, docs-writer]
        agents:
          all: {allow: ["*"]}
          reader: {allow: [files.read_file], deny: [files.write_file]}
        policy: {default: deny}
        """,
    )
    (project / "hello.txt").write_text("hello\n")
    return project


def test_the_five_bundles_generate_code_that_passes_mypy_strict(coded: Path, run: Run) -> None:
    result = run("codegen", "--agent", "all", "--out", "gen")
    assert result.code == 0, result.err
    assert "155 tools of 7 server(s)" in result.err
    checked = subprocess.run(
        [PY, "-m", "mypy", "--strict", "--no-incremental", "servers"],
        cwd=coded / "gen",
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout[-3000:]
    readme = (coded / "gen" / "README.md").read_text()
    assert "servers/files/" in readme and "from servers.files.read_file import read_file" in readme


def test_only_the_agents_tools_are_generated_and_the_output_is_stable(
    coded: Path, run: Run
) -> None:
    assert run("codegen", "--agent", "reader", "--out", "gen").code == 0
    files = sorted(p.relative_to(coded / "gen").as_posix() for p in (coded / "gen").rglob("*.*"))
    assert files == [
        ".bundlectl-codegen.json",
        "README.md",
        "servers/__init__.py",
        "servers/files/__init__.py",
        "servers/files/read_file.py",
        "servers/py.typed",
    ]
    before = {p: p.read_bytes() for p in (coded / "gen").rglob("*") if p.is_file()}
    assert run("codegen", "--agent", "reader", "--out", "gen", "--check").code == 0
    assert run("codegen", "--agent", "reader", "--out", "gen").code == 0
    assert before == {p: p.read_bytes() for p in (coded / "gen").rglob("*") if p.is_file()}
    config = coded / "bundlectl.yaml"
    config.write_text(config.read_text().replace("allow: [files.read_file]", "allow: [files.*]"))
    drift = run("codegen", "--agent", "reader", "--out", "gen", "--check")
    assert drift.code == 1 and "generated file(s) differ" in drift.err
    assert run("codegen", "--agent", "reader", "--out", "gen").code == 0
    assert (coded / "gen" / "servers" / "files" / "list_directory.py").exists()
    config.write_text(config.read_text().replace("allow: [files.*]", "allow: [files.read_file]"))
    assert run("codegen", "--agent", "reader", "--out", "gen").code == 0
    assert not (coded / "gen" / "servers" / "files" / "list_directory.py").exists()  # stale: gone


def test_codegen_replaces_and_removes_only_the_files_it_wrote(coded: Path, run: Run) -> None:
    """#24 item 3: `--out .` never overwrites the project's README; a folder generated for
    another agent loses the servers this one may not use (and `--check` says so); a file of the
    user's inside the folder stays."""
    readme = coded / "README.md"
    readme.write_text("# my project\n")
    refused = run("codegen", "--agent", "all", "--out", ".")
    assert refused.code == 2, refused.err
    assert "would overwrite 1 file(s) it did not write: README.md" in refused.err
    assert readme.read_text() == "# my project\n" and not (coded / "servers").exists()

    assert run("codegen", "--agent", "all", "--out", "gen").code == 0
    servers = coded / "gen" / "servers"
    assert (servers / "review").is_dir()
    (servers / "mine.py").write_text("# the user's own\n")
    drift = run("codegen", "--agent", "reader", "--out", "gen", "--check")
    assert drift.code == 1 and "generated file(s) differ" in drift.err, drift.err
    assert run("codegen", "--agent", "reader", "--out", "gen").code == 0
    assert sorted(p.name for p in servers.iterdir()) == [
        "__init__.py",
        "files",
        "mine.py",
        "py.typed",
    ]
    assert run("codegen", "--agent", "reader", "--out", "gen", "--check").code == 0
    (coded / "gen" / "servers" / "files" / "extra.py").write_text("x = 1\n")
    assert run("codegen", "--agent", "reader", "--out", "gen").code == 0
    assert (coded / "gen" / "servers" / "files" / "extra.py").exists()  # not ours: kept


def test_a_generated_function_reaches_the_server_and_a_denied_one_raises(
    coded: Path, run: Run, isolated_home: Path
) -> None:
    assert run("codegen", "--agent", "all", "--out", "gen").code == 0
    script = """
import json
from bundlectl.client import ToolDenied
from servers.files.read_file import read_file
from servers.files.write_file import write_file
out = {"read": read_file(path="hello.txt")}
try:
    write_file(path="x.txt", content="no")
except ToolDenied as exc:
    out["denied"] = str(exc)
print(json.dumps(out))
"""
    env = {
        **os.environ,
        "BUNDLECTL_AGENT": "reader",
        "BUNDLECTL_HOME": str(isolated_home),
        "PYTHONPATH": str(coded / "gen"),
    }
    done = subprocess.run(
        [PY, "-c", script], cwd=coded, env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["read"] == "hello\n"
    assert "agent 'reader' may not call files.write_file: denied by" in out["denied"]
    assert not (coded / "x.txt").exists()
    log = [
        json.loads(line)
        for line in (isolated_home / "state" / "audit.jsonl").read_text().splitlines()
    ]
    assert [(r["tool"], r["outcome"], r["via"]) for r in log] == [
        ("read_file", "ok", "code"),
        ("write_file", "denied", "code"),
    ]


def types_of(schema: dict[str, Any]) -> tuple[str, list[str]]:
    module = _Module(root=schema)
    return py_type(schema, module, "Thing"), module.classes


def test_schema_types() -> None:
    assert types_of({"type": "string", "enum": ["a", "b"]})[0] == 'Literal["a", "b"]'
    assert types_of({"anyOf": [{"type": "string"}, {"type": "null"}]})[0] == "str | None"
    assert types_of({"type": ["integer", "null"]})[0] == "int | None"
    assert types_of({"type": "array", "items": {"type": "number"}})[0] == "list[float]"
    assert types_of({"type": "object"})[0] == "dict[str, Any]"
    assert types_of({})[0] == "Any"
    ref = {
        "$defs": {"Point": {"type": "object", "properties": {"x": {"type": "integer"}}}},
        "type": "object",
        "properties": {"at": {"$ref": "#/$defs/Point"}, "from": {"type": "string"}},
        "required": ["at"],
    }
    name, classes = types_of(ref)
    assert name == "Thing"
    assert any(
        c.startswith("class Point(TypedDict):\n") and "x: NotRequired[int]" in c for c in classes
    )
    # "from" is a keyword: the functional TypedDict syntax keeps the key as it is.
    assert 'Thing = TypedDict("Thing", {"at": Point, "from": NotRequired[str]})\n' in classes
    loop = {"$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}}}
    assert types_of({**loop, "$ref": "#/$defs/Node"})[0] == "Node"  # a recursive $ref ends


def test_names_become_distinct_identifiers() -> None:
    taken: set[str] = set()
    assert [identifier(n, taken) for n in ["get-env", "get_env", "class", "9lives", "é"]] == [
        "get_env",
        "get_env_2",
        "class_",
        "_9lives",
        "x",
    ]
    tools = [
        ToolSpec(
            name="do-it",
            input_schema={"type": "object", "properties": {"from": {"type": "string"}}},
        ),
        ToolSpec(name="do_it"),
    ]
    files = generate("a", [("my-server", tools)], config="bundlectl.yaml").files
    assert "servers/my_server/do_it.py" in files and "servers/my_server/do_it_2.py" in files
    assert "def do_it(*, from_: str | None = None) -> Any:" in files["servers/my_server/do_it.py"]
    assert 'arguments["from"] = from_' in files["servers/my_server/do_it.py"]


def test_typescript_passes_tsc_strict_and_runs_through_the_policy(
    coded: Path, run: Run, isolated_home: Path
) -> None:
    """The TypeScript twin: `tsc --noEmit --strict` over the five bundles' code, then compiled
    and run with Node: a call reaches the files server through `bundlectl exec`, a denied one
    throws ToolDenied."""
    from tests.test_gateway_everything import BIN, peer

    result = run("codegen", "--agent", "all", "--lang", "typescript", "--out", "ts")
    assert result.code == 0, result.err
    types = str(BIN.parent / "@types")
    tsc = [str(peer("tsc")), "-p", "tsconfig.json", "--typeRoots", types]
    checked = subprocess.run(
        [*tsc, "--noEmit", "--strict"],
        cwd=coded / "ts",
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout[-3000:]
    subprocess.run(tsc, cwd=coded / "ts", check=True, capture_output=True)
    script = """
const { readFile, writeFile } = require("./ts/build/servers/files");
(async () => {
  const out = { read: await readFile({ path: "hello.txt" }) };
  try { await writeFile({ path: "x.txt", content: "no" }); }
  catch (e) { out.denied = `${e.constructor.name}: ${e.message}`; }
  console.log(JSON.stringify(out));
})();
"""
    env = {
        **os.environ,
        "BUNDLECTL_AGENT": "reader",
        "BUNDLECTL_HOME": str(isolated_home),
        "PATH": f"{Path(PY).parent}{os.pathsep}{os.environ['PATH']}",
    }
    done = subprocess.run(
        ["node", "-e", script], cwd=coded, env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["read"] == "hello\n"
    assert out["denied"].startswith(
        "ToolDenied: error: agent 'reader' may not call files.write_file"
    )
    assert not (coded / "x.txt").exists()


@pytest.mark.parametrize(("names", "wire"), [("prefixed", "kitchen__echo"), ("bare", "echo")])
def test_typescript_calls_the_gateway_by_the_names_serve_gives(names: str, wire: str) -> None:
    echo = ToolSpec(name="echo", input_schema={"type": "object"})
    tree = generate_typescript("cook", [("kitchen", [echo])], config="bundlectl.yaml", names=names)
    module = tree.files["servers/kitchen/echo.ts"]
    assert f'callTool("kitchen.echo", input, "{wire}")' in module, module
