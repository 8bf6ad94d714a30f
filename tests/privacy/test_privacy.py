"""Privacy (SPEC 9): personal data in tool results becomes stable tokens; only `detokenize`
tools get the real values back; the values reach no log, audit record or other tool."""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from bundlectl.config.settings import NamedPattern
from bundlectl.privacy.checks import _parsed_phone, _phone, iban_ok, luhn
from bundlectl.privacy.tokenize import Tokenizer, detectors
from tests.conftest import TEST_SERVERS, write
from tests.gateway.test_gateway import connected, texts

PY = sys.executable
VALUES = ["ann@example.com", "bob@example.org", "+1 650-253-0000", "+44 20 7946 0958"]
CARD = "4111 1111 1111 1111"


def test_detectors_check_what_they_find() -> None:
    tokens = Tokenizer(
        detectors(
            [
                "email",
                "phone",
                "credit_card",
                "iban",
                "ip_address",
                NamedPattern(name="employee_id", pattern="E[0-9]{6}"),
            ]
        )
    )
    text = (
        "ann@example.com +1 650-253-0000 card 4111 1111 1111 1111 fake 4111 1111 1111 1112 "
        "DE89 3704 0044 0532 0130 00 bad DE00 3704 0044 0532 0130 00 10.1.2.3 999.1.2.3 "
        "E123456 ann@example.com order 12345678"
    )
    assert tokens.text(text) == (
        "[EMAIL_1] [PHONE_1] card [CREDIT_CARD_1] fake 4111 1111 1111 1112 "
        "[IBAN_1] bad DE00 3704 0044 0532 0130 00 [IP_ADDRESS_1] 999.1.2.3 "
        "[EMPLOYEE_ID_1] [EMAIL_1] order 12345678"
    )
    assert tokens.restore(tokens.text(text)) == text
    assert "ann@example.com" not in repr(tokens)
    assert luhn("4111111111111111") and not luhn("4111111111111112")
    assert iban_ok("GB82 WEST 1234 5698 7654 32") and not iban_ok("GB00 WEST 1234 5698 7654 32")


def test_numbers_found_where_logs_and_tables_put_them() -> None:
    """Dates are never part of a number, a number followed by another is tried shorter, a
    sentence's full stop ends a number, and the same digits after a letter are no number
    (the remembered answer for a run depends on the characters around it)."""
    tokens = Tokenizer(detectors(["phone", "credit_card", "ip_address"]))
    text = (
        "2026-11-23 650-253-0000 at 2026-11-23T10:00:00Z; call 650-253-0000. "
        "x6502530000 or 6502530000 +1 650-253-0000 12 34 (650) 253-0000 "
        "amex 3782 822463 10005 visa 4111-1111-1111-1111 99 order 1234 5678 9012 345 "
        "v1.650.253.0000.5 12 345 678 910"
    )
    assert tokens.text(text) == (
        "2026-11-23 [PHONE_1] at 2026-11-23T10:00:00Z; call [PHONE_1]. "
        "x6502530000 or [PHONE_2] [PHONE_3] 12 34 [PHONE_4] "
        "amex [CREDIT_CARD_1] visa [CREDIT_CARD_2] 99 order 1234 5678 9012 345 "
        "v1.650.253.0000.5 12 345 678 910"
    )
    assert tokens.text("again: 6502530000, x6502530000") == "again: [PHONE_2], x6502530000"


@pytest.mark.no_cover  # 9,000 parses traced took 43 s of a loaded suite; the unit tests cover
def test_phone_numbers_decided_as_phonenumbers_decides() -> None:
    """Most numbers are decided from phonenumbers' metadata without parsing them: the answer
    must be the library's own, for every country calling code, national prefixes, brackets,
    non-geographic codes and North American shapes."""
    import phonenumbers

    chooser = random.Random(7)
    codes = sorted(phonenumbers.COUNTRY_CODE_TO_REGION_CODE)
    samples = []
    for _ in range(1200):  # 3,600 numbers: 9,000 took 12 s of the suite, untraced
        digits = "".join(chooser.choice("0123456789") for _ in range(chooser.randint(5, 12)))
        a, b, c = chooser.randint(100, 999), chooser.randint(100, 999), chooser.randint(0, 9999)
        samples += [
            f"+{chooser.choice(codes)} {digits[:3]}-{digits[3:]}",
            chooser.choice([f"{a}-{b}-{c:04d}", f"({a}) {b}-{c:04d}", f"1 {a} {b} {c:04d}"]),
            f"+{chooser.choice([44, 49, 33, 39, 7, 91, 800])} {chooser.choice(['', '(0)', '0'])}"
            f"{digits}",
        ]
    differ = [text for text in samples if _phone.__wrapped__(text) != _parsed_phone(text)]
    assert differ == []
    assert sum(map(_parsed_phone, samples)) > len(samples) // 10  # valid ones are tested too


@pytest.fixture
def private(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KITCHEN_LOG", str(tmp_path / "kitchen.log"))
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        bundles: [basic]
        servers:
          kitchen:
            command: {PY}
            args: ["{TEST_SERVERS / "kitchen.py"}"]
            env: {{KITCHEN_LOG: "${{KITCHEN_LOG}}"}}
        agents:
          clerk: {{allow: [kitchen.people, kitchen.note_down, files.write_file, files.read_file]}}
        policy: {{default: deny}}
        privacy:
          tokenize: [email, phone, credit_card]
          detokenize: [files.write_file]
        """,
    )
    return project


def test_the_agent_sees_tokens_and_only_detokenize_tools_get_values(
    private: Path, isolated_home: Path, tmp_path: Path
) -> None:
    from mcp import StdioServerParameters

    errlog = tmp_path / "gateway.log"

    async def session() -> dict[str, Any]:
        params = StdioServerParameters(
            command=PY,
            args=["-m", "bundlectl", "serve", "--agent", "clerk"],
            cwd=str(private),
            env={**os.environ, "BUNDLECTL_HOME": str(isolated_home)},
        )
        with errlog.open("w") as err:
            async with connected(params, errlog=err) as client:
                table = await client.call_tool("kitchen__people", {})
                seen = json.dumps(table.structured_content)
                content = " ".join(texts(table))
                await client.call_tool("files__write_file", {"path": "out.txt", "content": seen})
                await client.call_tool("kitchen__note_down", {"text": seen})
                back = await client.call_tool("files__read_file", {"path": "out.txt"})
                return {"seen": seen, "content": content, "back": texts(back)[0]}

    got = anyio.run(session)
    for value in [*VALUES, CARD]:
        assert value not in got["seen"] and value not in got["content"]
    assert "[EMAIL_1]" in got["seen"] and "[PHONE_2]" in got["seen"]
    assert "[CREDIT_CARD_1]" in got["seen"]
    assert "4111 1111 1111 1112" in got["seen"]  # a look-alike that fails Luhn is left alone
    written = (private / "out.txt").read_text()
    assert all(value in written for value in [*VALUES, CARD])  # the detokenize tool: real values
    assert "[EMAIL_1]" in got["back"]  # and reading it back tokenizes again
    recorded = (tmp_path / "kitchen.log").read_text()
    assert "[EMAIL_1]" in recorded and "ann@example.com" not in recorded  # others get tokens
    audit = (isolated_home / "state" / "audit.jsonl").read_text()
    logs = errlog.read_text() + "".join(
        p.read_text() for p in (isolated_home / "state" / "logs").glob("*.log")
    )
    for value in [*VALUES, CARD]:
        assert value not in audit and value not in logs


def test_the_code_mode_client_tokenizes_too(
    project: Path, isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`bundlectl.client.call_tool` in this process: results tokenized, values back only for
    the detokenize tool, a denied call raises `ToolDenied`, a failed one `ToolFailed`."""
    from bundlectl import client

    write(
        project / "bundlectl.yaml",
        """
        version: 1
        bundles: [basic]
        agents:
          clerk: {allow: [files.read_file, files.write_file]}
        policy: {default: deny}
        privacy:
          tokenize: [email]
          detokenize: [files.write_file]
        """,
    )
    (project / "contacts.txt").write_text("Ann <ann@example.com>\n")
    from bundlectl.codemode import runtime

    monkeypatch.setattr(runtime, "_SESSION", {})
    monkeypatch.setenv("BUNDLECTL_AGENT", "clerk")
    # With privacy set, the gateway is the default: in this process only when accepted.
    with pytest.raises(client.ToolFailed, match=r"BUNDLECTL_GATEWAY_URL .* or set "):
        client.call_tool("files.read_file", {"path": "contacts.txt"})
    monkeypatch.setenv("BUNDLECTL_PRIVACY_IN_PROCESS", "1")
    seen = client.call_tool("files.read_file", {"path": "contacts.txt"})
    assert seen == "Ann <[EMAIL_1]>\n"
    client.call_tool("files.write_file", {"path": "copy.txt", "content": seen})
    assert (project / "copy.txt").read_text() == "Ann <ann@example.com>\n"
    with pytest.raises(client.ToolDenied, match=r"may not call files\.list_directory"):
        client.call_tool("files.list_directory", {"path": "."})
    with pytest.raises(client.ToolFailed, match=r"no-such\.txt"):
        client.call_tool("files.read_file", {"path": "no-such.txt"})
    audit = (isolated_home / "state" / "audit.jsonl").read_text()
    assert "ann@example.com" not in audit and '"via": "code"' in audit


def _in_process(project: Path, agent: str, scripts: list[Any]) -> tuple[list[Any], Any]:
    """Each script against its own in-process client session of one gateway hub; the hub."""
    return _in_process_with(project, agent, scripts)


def _in_process_with(
    project: Path, agent: str, scripts: list[Any], **options: Any
) -> tuple[list[Any], Any]:
    """`_in_process`, the clients made with `options`."""
    from mcp import Client

    from bundlectl.calls.audit import AuditLog
    from bundlectl.calls.pipeline import Pipeline
    from bundlectl.config.project import load_project
    from bundlectl.gateway.handlers import mcp_server
    from bundlectl.gateway.hub import Hub
    from bundlectl.resolve.resolved import resolve_project

    found: list[Any] = []

    async def main() -> Any:
        resolution = resolve_project(load_project(project / "bundlectl.yaml"))
        pipeline = Pipeline(resolution, AuditLog(resolution, via="serve"), confirm=None)
        async with anyio.create_task_group() as group:
            hub = Hub(pipeline, group, agents={agent})
            server = mcp_server(hub, "direct", lambda ctx: agent)
            for script in scripts:
                async with Client(server, mode="legacy", **options) as client:
                    found.append(await script(client))
            group.cancel_scope.cancel()
        return hub

    return found, anyio.run(main)


def test_a_failed_validation_never_quotes_the_values_behind_tokens(
    private: Path, isolated_home: Path
) -> None:
    # A detokenize tool called with tokens in an argument of the wrong type: the validator's
    # message once quoted the real values, turning the gateway into a detokenizing oracle.
    async def script(client: Any) -> list[str]:
        table = json.dumps((await client.call_tool("kitchen__people", {})).structured_content)
        email = table[table.index("[EMAIL_") :].split("]")[0] + "]"
        wrong = await client.call_tool(
            "files__write_file", {"path": "x.txt", "content": [email, "[CREDIT_CARD_1]"]}
        )
        folder = await client.call_tool("files__write_file", {"path": ".", "content": email})
        return [email, texts(wrong)[0], texts(folder)[0]]

    [[email, wrong, folder]], _ = _in_process(private, "clerk", [script])
    assert "is not of type 'string'" in wrong and email in wrong
    for value in [*VALUES, CARD]:
        assert value not in wrong and value not in folder
    assert not (private / "x.txt").exists()


def test_code_mode_never_quotes_the_values_behind_tokens(
    private: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same oracle through `bundlectl.client` in this process: the values were put back
    # before validation, and the validator's message quoted them.
    from bundlectl import client
    from bundlectl.codemode import runtime

    monkeypatch.setattr(runtime, "_SESSION", {})
    monkeypatch.setenv("BUNDLECTL_AGENT", "clerk")
    monkeypatch.setenv("BUNDLECTL_PRIVACY_IN_PROCESS", "1")
    table = json.dumps(client.call_tool("kitchen.people", {}))
    email = table[table.index("[EMAIL_") :].split("]")[0] + "]"
    with pytest.raises(client.ToolFailed) as wrong:
        client.call_tool("files.write_file", {"path": "x.txt", "content": [email]})
    with pytest.raises(client.ToolFailed) as folder:
        client.call_tool("files.write_file", {"path": ".", "content": email})
    assert "is not of type 'string'" in str(wrong.value) and email in str(wrong.value)
    for value in [*VALUES, CARD]:
        assert value not in str(wrong.value) and value not in str(folder.value)
    assert not (private / "x.txt").exists()


def test_sessions_leave_nothing_behind_and_one_agent_has_one_map(private: Path) -> None:
    # 1,000 closed sessions once left 999 token maps (real values) and their listeners.
    import gc

    async def script(client: Any) -> str:
        table = await client.call_tool("kitchen__people", {})
        return json.dumps(table.structured_content)

    seen, hub = _in_process(private, "clerk", [script] * 20)
    assert all("[EMAIL_1]" in s for s in seen)
    gc.collect()
    assert len(hub.subscriptions.listeners) == 0 and len(hub.privacy.tokenizers) == 0
    assert list(hub.privacy.agent_tokenizers) == ["clerk"]  # no session outlives a request here


def test_a_session_id_header_never_picks_another_agents_token_map(
    private: Path, isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from tests.gateway.test_gateway_http import gateway

    monkeypatch.setenv("ALICE_TOKEN", "alice-" + "a" * 30)
    monkeypatch.setenv("BOB_TOKEN", "bob-" + "b" * 30)
    config = private / "bundlectl.yaml"
    config.write_text(
        config.read_text().replace(
            "  clerk:",
            '  alice: {token: "${ALICE_TOKEN}", allow: [kitchen.people]}\n'
            '  bob: {token: "${BOB_TOKEN}", allow: [files.write_file]}\n  clerk:',
        )
    )

    async def as_agent(url: str, token: str, headers: dict[str, str], script: Any) -> Any:
        auth = {"Authorization": f"Bearer {token}", **headers}
        async with (
            httpx2.AsyncClient(headers=auth, timeout=httpx2.Timeout(30, read=300)) as http,
            Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,
        ):
            return await script(client)

    async def people(client: Any) -> str:
        return json.dumps((await client.call_tool("kitchen__people", {})).structured_content)

    async def steal(client: Any) -> Any:
        return await client.call_tool(
            "files__write_file", {"path": "stolen.txt", "content": "[EMAIL_1] [PHONE_1]"}
        )

    async def script(url: str) -> str:
        table = await as_agent(url, "alice-" + "a" * 30, {}, people)
        forged = {"mcp-session-id": "agent:alice"}
        await as_agent(url, "bob-" + "b" * 30, forged, steal)
        return table

    with gateway(private, "--stateless") as (url, _):
        table = anyio.run(script, url)
    assert "[EMAIL_1]" in table
    stolen = (private / "stolen.txt").read_text()
    assert stolen == "[EMAIL_1] [PHONE_1]"  # bob's own (empty) map: tokens stay tokens
    for value in VALUES:
        assert value not in stolen


LEAKY = """
import base64
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import BlobResourceContents, EmbeddedResource, ResourceLink, TextContent

server = MCPServer("leaky", log_level="WARNING")
MAIL = "jane.doe@corp.example"


@server.tool(structured_output=False)
async def blocks(ctx: Context) -> list:
    await ctx.info(f"sending to {MAIL}")
    await ctx.report_progress(1, 2, f"mailing {MAIL}")
    blob = base64.b64encode(f"to: {MAIL}".encode()).decode()
    return [
        TextContent(type="text", text="see attachments"),
        ResourceLink(type="resource_link", name=MAIL, uri=f"mailto:{MAIL}", description=MAIL),
        EmbeddedResource(
            type="resource",
            resource=BlobResourceContents(
                uri=f"file:///{MAIL}.txt", mime_type="text/plain", blob=blob
            ),
        ),
    ]


@server.tool()
def keyed() -> dict[str, int]:
    return {MAIL: 1}


@server.resource("leaky://contact")
def contact() -> str:
    return f"contact: {MAIL}"


@server.prompt()
def write_to() -> str:
    return f"Write a note to {MAIL}"


server.run("stdio")
"""


def test_nothing_a_server_sends_reaches_the_agent_untokenized(
    project: Path, tmp_path: Path
) -> None:
    # Keys of structured content, resource links, embedded blobs, log messages, progress
    # messages, resources/read and prompts/get all carried the address in clear.
    script = tmp_path / "leaky.py"
    script.write_text(LEAKY)
    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          leaky: {{command: {PY}, args: ["{script}"]}}
        agents:
          clerk: {{allow: ["leaky.*"]}}
        policy: {{default: deny}}
        privacy: {{tokenize: [email]}}
        """,
    )
    heard: list[str] = []

    async def log(params: Any) -> None:
        heard.append(json.dumps(params.data))

    async def progress(done: float, total: float | None, message: str | None) -> None:
        heard.append(message or "")

    async def script_(client: Any) -> list[str]:
        blocks = await client.call_tool("leaky__blocks", {}, progress_callback=progress)
        keyed = await client.call_tool("leaky__keyed", {})
        read = await client.read_resource("leaky://contact")
        prompt = await client.get_prompt("leaky__write_to")
        dumped = [x.model_dump_json(by_alias=True) for x in (blocks, keyed, read, prompt)]
        return dumped

    [seen], _ = _in_process_with(project, "clerk", [script_], logging_callback=log)
    everything = " ".join(seen + heard)
    assert "jane.doe@corp.example" not in everything
    assert "amFuZS5kb2VAY29ycC5leGFtcGxl" not in everything  # nor inside base64
    assert everything.count("[EMAIL_1]") >= 6
    assert any("[EMAIL_1]" in h for h in heard)  # the log and the progress were tokenized


def test_an_approval_binds_the_values_behind_the_tokens_not_the_tokens(
    private: Path, run: Any, isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#52 item 12: with a token map per session, `[EMAIL_1]` is ann@ in one session and bob@
    in another; an approval of one session's write must not let the other's through."""
    from tests.gateway.test_gateway_http import client, gateway

    monkeypatch.setenv("CLERK_TOKEN", "clerk-" + "c" * 30)
    config = private / "bundlectl.yaml"
    config.write_text(
        config.read_text()
        .replace(
            "clerk: {allow: [kitchen.people, kitchen.note_down, files.write_file, "
            "files.read_file]}",
            'clerk: {token: "${CLERK_TOKEN}", allow: [kitchen.echo], ask: [files.write_file]}',
        )
        .replace("policy: {default: deny}", "policy: {default: deny, approvals: {ttl: 10m}}")
    )
    write_call = {"path": "to.txt", "content": "[EMAIL_1]"}

    async def write_as(url: str, email: str) -> str:
        async with client(url, "clerk-" + "c" * 30, mode="legacy") as session:
            echoed = await session.call_tool("kitchen__echo", {"text": email})
            assert texts(echoed) == ["[EMAIL_1]"]
            answer = await session.call_tool("files__write_file", write_call)
            return str(texts(answer)[0])

    with gateway(private, home=isolated_home) as (url, _):
        held = anyio.run(write_as, url, "ann@example.com")
        assert "approval request" in held, held
        listed = json.loads(run("approvals", "list", "--format", "json").out)["approvals"]
        [request] = listed
        assert request["arguments"] == write_call  # the approver sees the token
        assert run("approvals", "approve", request["id"], "--for", "1h").code == 0
        other = anyio.run(write_as, url, "bob@example.org")
        assert "approval request" in other and not (private / "to.txt").exists()
        assert anyio.run(write_as, url, "ann@example.com").startswith("wrote")
    assert (private / "to.txt").read_text() == "ann@example.com"
