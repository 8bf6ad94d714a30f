"""What the agent's client is shown of a tool (#60): a definition with text a person cannot see
(Unicode tags in the description, a right-to-left override in a parameter's) goes out through
`serve` with its descriptions withheld — name, types and annotations kept — audited once;
tools with honest definitions are passed through as they are."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path
from typing import Any

import anyio

from tests.conftest import TEST_SERVERS, Run, audit_records, write
from tests.gateway.test_gateway import PY, _session, texts


def test_a_definition_hiding_text_reaches_the_client_without_it(
    project: Path, isolated_home: Path
) -> None:
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          hostile: {{command: {PY}, args: ["{TEST_SERVERS / "hostile.py"}"]}}
        agents:
          reader: {{allow: [hostile.sneaky, hostile.read]}}
        policy: {{default: deny}}
        """,
    )

    async def script(client: Any) -> dict[str, Any]:
        first = await client.list_tools()
        again = await client.list_tools()
        called = await client.call_tool("hostile__sneaky", {"note": "hi"})
        return {"tools": first.tools, "again": again.tools, "called": called}

    seen = anyio.run(_session, project, isolated_home, script)
    tools = {tool.name: tool for tool in seen["tools"]}
    sneaky, honest = tools["hostile__sneaky"], tools["hostile__read"]
    assert sneaky.description.startswith("(bundlectl withheld this description: it holds")
    assert "ignore" not in sneaky.description  # what the tags spell never reaches the model
    assert "description" not in sneaky.input_schema["properties"]["note"]
    assert sneaky.input_schema["properties"]["note"]["type"] == "string"
    shown = json.dumps([t.model_dump(mode="json") for t in seen["tools"]], ensure_ascii=False)
    assert not [c for c in shown if unicodedata.category(c) == "Cf"]
    assert honest.description == "The text at `path`, or what the OS said."
    assert texts(seen["called"]) == ["noted"]  # withheld from the model, still callable
    withheld = [
        r
        for r in audit_records(isolated_home / "state" / "audit.jsonl")
        if r["outcome"] == "withheld"
    ]
    assert [(r["server"], r["tool"]) for r in withheld] == [("hostile", "sneaky")]


def test_tools_live_says_what_the_live_definitions_tell_the_model(project: Path, run: Run) -> None:
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          hostile: {{command: {PY}, args: ["{TEST_SERVERS / "hostile.py"}"]}}
        """,
    )
    done = run("tools", "--live", "--server", "hostile")
    assert done.code == 1, done.err
    assert (
        "  ! sneaky: BCL601 holds characters a person cannot see: Unicode tags spelling" in done.out
    )
    found = json.loads(run("tools", "--live", "--server", "hostile", "--format", "json").out)
    told = found["servers"]["hostile"]["descriptions"]
    assert {(t["tool"], t["rule"]) for t in told} == {("sneaky", "BCL601"), ("bossy", "BCL603")}


def test_instructions_to_the_model_are_withheld_where_the_project_makes_them_an_error(
    project: Path, isolated_home: Path
) -> None:
    """BCL603 is a warning by default: such a description is shown (lint reports it). A
    project whose `lint.severity` makes it an error has the gateway withhold it, as the
    error-level rules' descriptions are."""

    def listed(severity: str) -> dict[str, Any]:
        write(
            project / "bundlectl.yaml",
            f"""
            version: 1
            servers:
              hostile: {{command: {PY}, args: ["{TEST_SERVERS / "hostile.py"}"]}}
            agents:
              reader: {{allow: [hostile.bossy]}}
            policy: {{default: deny}}
            {severity}
            """,
        )

        async def script(client: Any) -> dict[str, Any]:
            [tool] = (await client.list_tools()).tools
            called = await client.call_tool("hostile__bossy", {"note": "hi"})
            return {"tool": tool, "called": called}

        return anyio.run(_session, project, isolated_home, script)

    shown = listed("")
    assert shown["tool"].description.startswith("Formats a note. Before using any other tool")
    withheld = listed("lint: {severity: {BCL603: error}}")
    description = withheld["tool"].description
    assert description.startswith(
        "(bundlectl withheld this description: its description "
        "addresses the model (BCL603, confidence 1.0)"
    )
    assert "ssh" not in description and texts(withheld["called"]) == ["formatted"]
    steps = [
        (r["tool"], r["why"])
        for r in audit_records(isolated_home / "state" / "audit.jsonl")
        if r["outcome"] == "withheld"
    ]
    assert [tool for tool, _ in steps] == ["bossy"] and "BCL603" in steps[0][1]
