"""The approvers' page (issue 39, SPEC 11) in a real browser: headless Chromium with its driver
from Debian's packages (`chromium`, `chromium-driver`; `.ci/run` installs them), driven by
selenium, against `bundlectl approvals ui` and `serve --transport streamable-http`, with a real
`exec` waiting in its own process for the decision."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.calls.test_approvals import CONFIG, _exec_waiting, _first_pending
from tests.conftest import TEST_SERVERS, Run, audit_records, write
from tests.gateway.test_gateway_http import gateway

PY = sys.executable
APPROVER = "approver-" + "a" * 30
AGENT_TOKEN = "writer-" + "w" * 30
HOSTILE = "<img src=x onerror=window.__pwned=1><script>window.__pwned=2</script>"
UNSEEN = "\u2028\u202e\x9b"  # a line separator, a right-to-left override, a C1 control (#52)
WAIT = 30.0  # seconds a page may take to show what it must (a deadline, never a sleep)


@pytest.fixture
def held_project(project: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    write(project / "bundlectl.yaml", CONFIG.format(py=PY))
    monkeypatch.setenv("VAULT_TOKEN", "vault-secret-value-123")
    return project


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Callable[[], Any]]:
    """A factory of headless Chromium windows, each with a profile of its own (its own
    cookies: a second browser is a second approver)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opened: list[Any] = []

    def new() -> Any:
        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        for flag in (
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1200,900",
            f"--user-data-dir={tmp_path / f'chromium-{len(opened)}'}",
        ):
            options.add_argument(flag)
        driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
        opened.append(driver)
        return driver

    yield new
    for driver in opened:
        driver.quit()


def until(driver: Any, check: Callable[[Any], Any]) -> Any:
    """Wait for `check`; an element the page replaced while it was read (it redraws the
    status as answers come) is looked up again, and so is one asked for while the window was
    still following a redirect (a sign-in ends in several; on a loaded machine the first
    look can land between two of them: "aborted by navigation")."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
    from selenium.webdriver.support.ui import WebDriverWait

    def settled(window: Any) -> Any:
        try:
            return check(window)
        except WebDriverException as exc:
            if "aborted by navigation" not in str(exc):
                raise
            return False

    wait = WebDriverWait(
        driver, WAIT, poll_frequency=0.05, ignored_exceptions=(StaleElementReferenceException,)
    )
    return wait.until(settled)


def text_of(driver: Any) -> str:
    from selenium.webdriver.common.by import By

    return str(driver.find_element(By.TAG_NAME, "body").text)


@pytest.fixture
def page_ui(held_project: Path, isolated_home: Path) -> Iterator[str]:
    """`bundlectl approvals ui --no-browser`: the one-time sign-in URL it prints."""
    process = subprocess.Popen(
        [PY, "-m", "bundlectl", "approvals", "ui", "--no-browser"],
        cwd=held_project,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    url = process.stdout.readline().strip()
    assert url.startswith("http://127.0.0.1:") and "/approvals?token=" in url, process.stderr
    yield url
    process.terminate()
    process.communicate(timeout=10)


def test_a_held_call_is_approved_in_the_browser_and_its_arguments_stay_text(
    held_project: Path, run: Run, browser: Callable[[], Any], page_ui: str, isolated_home: Path
) -> None:
    from selenium.webdriver.common.by import By

    process = _exec_waiting(held_project, "path=x.txt", f"content={HOSTILE}{UNSEEN}")
    request = _first_pending(run, process)
    window = browser()
    window.get(page_ui)
    # Signed in: the token has left the address bar, and the held call is listed.
    assert window.current_url.endswith("/approvals")
    link = until(window, lambda w: w.find_element(By.LINK_TEXT, "files.write_file"))
    row = link.find_element(By.XPATH, "./ancestor::tr")
    assert "writer" in row.text and "pending" in row.text and "agents.writer.ask" in row.text
    link.click()
    until(window, lambda w: w.find_element(By.ID, "approve-once"))
    # The arguments as the approver sees them: the hostile value shown as its characters,
    # and nothing of it run or rendered.
    assert HOSTILE + "\\u2028\\u202e\\x9b" in text_of(window)
    assert window.find_elements(By.TAG_NAME, "img") == []
    assert window.execute_script("return window.__pwned === undefined")
    assert request["id"] in text_of(window)
    window.find_element(By.ID, "approve-once").click()
    _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert "approved by approvals page (127.0.0.1)" in err
    assert (held_project / "x.txt").read_text() == HOSTILE + UNSEEN
    until(window, lambda w: w.find_element(By.ID, "status").text == "used")  # taken by exec
    # who decided, apart from what became of it since (it read "used used by ...": #56)
    decided = until(window, lambda w: w.find_element(By.ID, "decided").text or None)
    assert decided == "approved by approvals page (127.0.0.1)"
    steps = [r["outcome"] for r in audit_records(isolated_home / "state" / "audit.jsonl")]
    assert "approved" in steps and steps[-1] == "ok"
    # The week's picture, from the same sign-in: the agent's day, its held call and its call.
    window.find_element(By.LINK_TEXT, "← all requests").click()
    until(window, lambda w: w.find_element(By.LINK_TEXT, "Activity →")).click()
    chart = until(window, lambda w: w.find_element(By.CSS_SELECTOR, "svg.chart"))
    assert "1 ok · 0 denied · 0 over limit · 0 errors · 1 held" in text_of(window)
    parts = chart.find_elements(By.TAG_NAME, "rect")
    assert len(parts) == 2 and chart.size["height"] > 100
    # The sign-in link was good once: a second browser cannot use it.
    other = browser()
    other.get(page_ui)
    assert (
        "not good" in text_of(other) and other.find_elements(By.LINK_TEXT, "files.write_file") == []
    )


def test_a_denial_reaches_the_caller_and_a_second_approvers_page(
    held_project: Path,
    run: Run,
    browser: Callable[[], Any],
    isolated_home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from selenium.webdriver.common.by import By

    monkeypatch.setenv("BUNDLECTL_APPROVER_TOKEN", APPROVER)
    with gateway(held_project, "--agent", "writer") as (url, _):
        process = _exec_waiting(held_project, "path=d.txt", "content=no")
        request = _first_pending(run, process)
        first, second = browser(), browser()
        for window in (first, second):
            window.get(f"{url}/approvals?token={APPROVER}")
            until(window, lambda w: w.find_element(By.LINK_TEXT, "files.write_file")).click()
            until(window, lambda w: w.find_element(By.ID, "deny"))
        first.find_element(By.NAME, "reason").send_keys("not on a Friday")
        first.find_element(By.ID, "deny").click()
        # The second approver's page shows the first one's decision without a reload.
        until(second, lambda w: w.find_element(By.ID, "status").text == "denied")
        assert "not on a Friday" in second.find_element(By.ID, "decided").text
        assert not second.find_element(By.ID, "decide").is_displayed()
        _, err = process.communicate(timeout=60)
        assert process.returncode == 3
        assert "was denied by approvals page (127.0.0.1): not on a Friday" in err
        assert not (held_project / "d.txt").exists()
        assert run("approvals", "show", request["id"]).out.count("denied by approvals page") == 1
        # No sign-in without the approver's token; a form without the session's CSRF token is
        # refused even with the session's cookie.
        for token in ("", "wrong-" + "x" * 30):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(f"{url}/approvals?token={token}", timeout=10)
            assert refused.value.code == 401
            refused.value.close()
        cookie = first.get_cookie("bundlectl_approver")["value"]
        forged = urllib.request.Request(
            f"{url}/approvals/{request['id']}",
            data=b"action=approve&csrf=forged",
            headers={"Cookie": f"bundlectl_approver={cookie}"},
        )
        with pytest.raises(urllib.error.HTTPError) as stale:
            urllib.request.urlopen(forged, timeout=10)
        assert stale.value.code == 403
        stale.value.close()


def test_an_approver_token_that_is_an_agents_token_is_refused(
    held_project: Path, isolated_home: Path
) -> None:
    text = (held_project / "bundlectl.yaml").read_text()
    write(
        held_project / "bundlectl.yaml",
        text.replace("  writer:\n", '  writer:\n    token: "${WRITER_TOKEN}"\n'),
    )
    env = {**os.environ, "WRITER_TOKEN": AGENT_TOKEN, "BUNDLECTL_APPROVER_TOKEN": AGENT_TOKEN}
    done = subprocess.run(
        [PY, "-m", "bundlectl", "serve", "--transport", "streamable-http", "--port", "0"],
        cwd=held_project,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "$BUNDLECTL_APPROVER_TOKEN is also agent 'writer''s token" in done.stderr
    # With a token of its own, the page is served beside /mcp.
    env["BUNDLECTL_APPROVER_TOKEN"] = APPROVER
    started = time.monotonic()
    process = subprocess.Popen(
        [PY, "-m", "bundlectl", "serve", "--transport", "streamable-http", "--port", "0"],
        cwd=held_project,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    try:
        lines = [process.stderr.readline(), process.stderr.readline()]
        assert "approvals page on http://127.0.0.1:" in lines[1], lines
        assert time.monotonic() - started < 60
        # A reload that gives an agent the approver's token is refused (#52 item 10): the
        # last good config stays, and the approver token still opens no agent's tools.
        url = lines[0].split(" on ")[1].split("/mcp")[0]
        config = held_project / "bundlectl.yaml"
        config.write_text(config.read_text().replace("${WRITER_TOKEN}", APPROVER))
        sent = urllib.request.Request(
            f"{url}/mcp",
            data=b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}',
            headers={"Authorization": f"Bearer {APPROVER}", "Content-Type": "application/json"},
        )
        with pytest.raises(urllib.error.HTTPError) as refused_call:
            urllib.request.urlopen(sent, timeout=30)
        refused_call.value.close()
        assert refused_call.value.code == 401
        refused = process.stderr.readline()
        assert "reload failed" in refused and "is also agent 'writer''s token" in refused
    finally:
        process.terminate()
        process.communicate(timeout=10)


def test_a_program_decides_through_the_approvers_api_with_the_approver_token(
    held_project: Path, run: Run, isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#39: beside the page, `serve` answers programs (a chat bot the notifier told, a CI job):
    the requests as JSON and a decision POSTed as JSON, with the approver token as a bearer
    token — never an agent's, never without one."""
    import json

    monkeypatch.setenv("BUNDLECTL_APPROVER_TOKEN", APPROVER)
    call = ("exec", "-a", "writer", "--no-wait", "files.write_file", "path=api.txt", "content=x")
    assert run(*call).code == 75

    def request(url: str, token: str | None, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body))
        sent = urllib.request.Request(
            url,
            data=data.encode() if isinstance(data, str) else data,
            method="GET" if body is None else "POST",
            headers={"Authorization": f"Bearer {token}"} if token else {},
        )
        try:
            with urllib.request.urlopen(sent, timeout=30) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            said = exc.read()
            return exc.code, json.loads(said) if said.startswith(b"{") else said.decode()

    with gateway(held_project, "--agent", "writer", home=isolated_home) as (url, _):
        status, listed = request(f"{url}/approvals/requests.json", APPROVER)
        assert status == 200, listed
        [held] = listed["approvals"]
        one = f"{url}/approvals/{held['id']}.json"
        assert request(f"{url}/approvals/requests.json", None)[0] == 401
        assert request(one, None, {"decision": "approve"})[0] == 401
        assert request(one, "not-the-token", {"decision": "approve"})[0] == 401
        assert request(one, APPROVER, b"{not json")[0] == 400
        bad = request(one, APPROVER, {"decision": "approve", "for": "3 weeks"})
        assert bad[0] == 400 and "once, 15m, 1h, 8h, 1d" in bad[1]["error"]
        assert request(f"{url}/approvals/nosuch.json", APPROVER, {"decision": "deny"})[0] == 404
        status, decided = request(one, APPROVER, {"decision": "approve"})
        assert status == 200 and decided["status"] == "approved", decided
        again = request(one, APPROVER, {"decision": "deny"})
        assert again[0] == 409 and "not pending" in again[1]["error"]
    done = run(*call)
    assert done.code == 0, done.err
    steps = [
        (r["outcome"], r.get("approver"))
        for r in audit_records(isolated_home / "state" / "audit.jsonl")
        if r["outcome"] == "approved"
    ]
    assert steps == [("approved", "approvers API (127.0.0.1)")]


def test_an_approver_sees_the_arguments_a_tool_does_not_declare_and_each_requests_arguments(
    held_project: Path, run: Run, page_ui: str
) -> None:
    """`note` is no argument of files.write_file: `approvals show` and the page mark it (the
    tool may ignore it, a server misuse it), after the declared ones; the list shows each
    request's arguments, so two held writes of one tool tell apart (#56)."""
    import http.cookiejar

    for path in ("notes/todo.txt", "deploy.sh"):
        held = run(
            "exec", "-a", "writer", "files.write_file", f"path={path}", "content=hi",
            "note=buy milk", "--no-wait",
        )  # fmt: skip
        assert held.code == 75, held.err
    requests = json.loads(run("approvals", "list", "--format", "json").out)["approvals"]
    first = requests[0]["id"]
    shown = run("approvals", "show", first)
    assert shown.lines[-1] == (
        "  not declared by the tool (it may ignore them, or a server misuse them): note"
    )
    assert json.loads(run("approvals", "show", first, "--format", "json").out)["undeclared"] == [
        "note"
    ]
    browser = urllib.request.build_opener(
        urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
    )
    with browser.open(page_ui, timeout=WAIT) as signed_in:  # the session cookie is kept
        assert signed_in.status == 200
    base = page_ui.split("/approvals?", maxsplit=1)[0]
    with browser.open(f"{base}/approvals/requests.json", timeout=WAIT) as listed:
        rows = json.load(listed)["approvals"]
    assert sorted(r["arguments"] for r in rows) == [
        'path="deploy.sh", content="hi", note="buy milk"',
        'path="notes/todo.txt", content="hi", note="buy milk"',
    ]
    with browser.open(f"{base}/approvals/{first}", timeout=WAIT) as page:
        detail = page.read().decode()
    marked = detail.split("<h2>Arguments</h2>")[1]
    assert marked.index("<code>content</code></th>") < marked.index("<code>note</code>")
    assert "<code>note</code><span class=undeclared>not declared by the tool</span>" in marked
    assert "<code>path</code><span class=undeclared>" not in marked


def test_the_activity_page_signs_in_with_its_link_as_the_approvals_page_does(
    page_ui: str,
) -> None:
    """`/activity?token=` signs in (it showed a sign-in page) and drops the token from the
    address bar, as `/approvals?token=` does (#56)."""
    import http.cookiejar

    browser = urllib.request.build_opener(
        urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
    )
    with browser.open(page_ui.replace("/approvals?", "/activity?"), timeout=WAIT) as landed:
        assert landed.status == 200 and landed.geturl().endswith("/activity")
        assert "<h1>Activity</h1>" in landed.read().decode()


def test_a_tool_changed_between_two_listings_is_held_and_approved_in_the_browser(
    project: Path,
    run: Run,
    browser: Callable[[], Any],
    isolated_home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """#60 item 3 end to end: through `serve` over HTTP a server changes a tool's description
    between two `tools/list` answers (a rug pull under `pin_tools`); the tool is withheld and
    its call refused naming a "tool changed" request; the approver reads the difference on the
    gateway's page in Chromium and approves; the new definition is pinned, and the same gateway
    lists and calls the tool again."""
    from selenium.webdriver.common.by import By

    from tests.config.test_pinning import live
    from tests.gateway.test_gateway_http import client, texts

    write(
        project / "bundlectl.yaml",
        f"""
        version: 1
        servers:
          kitchen:
            command: {PY}
            args: ["{TEST_SERVERS / "kitchen.py"}"]
            tools: {json.dumps(live("echo", "request_id", "rug_pull"))}
        agents:
          bot: {{allow: ["kitchen.*"]}}
        policy: {{default: deny, pin_tools: true}}
        """,
    )
    assert run("lock").code == 0
    monkeypatch.setenv("BUNDLECTL_APPROVER_TOKEN", APPROVER)

    async def session(url: str, *, rug_pull: bool) -> tuple[list[str], list[str], Any]:
        async with client(url) as agent:
            before = [t.name for t in (await agent.list_tools()).tools]
            if rug_pull:
                await agent.call_tool("kitchen__rug_pull", {})
            after = [t.name for t in (await agent.list_tools()).tools]
            return before, after, await agent.call_tool("kitchen__echo", {"text": "hi"})

    with gateway(project, "--agent", "bot", home=isolated_home) as (url, _):
        first, second, refused = anyio.run(lambda: session(url, rug_pull=True))
        assert "kitchen__echo" in first and "kitchen__echo" not in second
        assert refused.is_error
        held = re.search(r"held for a person to review: approval (\w+)", texts(refused)[0])
        assert held, texts(refused)
        window = browser()
        window.get(f"{url}/approvals?token={APPROVER}")
        link = until(window, lambda w: w.find_element(By.LINK_TEXT, "kitchen.echo"))
        assert "tool changed: description" in link.find_element(By.XPATH, "./ancestor::tr").text
        link.click()
        change = until(window, lambda w: w.find_element(By.ID, "change"))
        assert "  -Repeat text.\n  +Repeat text; mail it too." in change.text
        assert held.group(1) in text_of(window)
        window.find_element(By.ID, "approve-once").click()
        until(window, lambda w: w.find_element(By.ID, "status").text == "approved")
        _, listed, called = anyio.run(lambda: session(url, rug_pull=False))
        assert "kitchen__echo" in listed and texts(called) == ["hi"]
    assert "kitchen.echo: sha256:" in (project / "bundlectl.local.yaml").read_text()
    steps = [
        (r["outcome"], r.get("approver"))
        for r in audit_records(isolated_home / "state" / "audit.jsonl")
        if r["outcome"] in ("tool-changed", "approved")
    ]
    assert steps == [("tool-changed", None), ("approved", "approvals page (127.0.0.1)")]
