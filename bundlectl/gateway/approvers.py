"""The approvers' page (SPEC 11): `/approvals` on `serve --transport streamable-http`, and what
`bundlectl approvals ui` serves for a local project.

Plain server-rendered HTML and a little JavaScript, no build step. A person signs in with the
approver token once (`/approvals?token=...`: the gateway's `BUNDLECTL_APPROVER_TOKEN`, or the
one-time token `approvals ui` prints), gets a session cookie (HttpOnly, SameSite=Strict) and
never an agent's token. Every text a server, an agent or an approver wrote is escaped where it
is shown (`html.escape` here, `textContent` in the page's script), so an argument
`<img src=x onerror=...>` is those characters; and every such text first goes through
`output.visible`, so a line separator, a bidi override or a control character is an escape a
person can see, not a reordered or broken line. Decisions are form POSTs that carry the session's
CSRF token, checked with the Host and Origin checks `/mcp` applies. The list and a request's
status are polled once a second, so a decision made elsewhere shows up without a reload.
"""

from __future__ import annotations

import hmac
import html
import json
import secrets
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from bundlectl.calls import userconfig
from bundlectl.calls.approval import (
    SelfApproval,
    decision_text,
    described,
    progress_text,
    settle,
)
from bundlectl.calls.auditfile import lines, log_path, records
from bundlectl.config.settings import seconds
from bundlectl.gateway.activity import counted, rendered
from bundlectl.gateway.signin import SignIn, SignInFailed
from bundlectl.mcpio.requests import JsonObject
from bundlectl.output import span_text, visible
from bundlectl.policy.claims import why_not
from bundlectl.state import Approval, StateError, Store, UnknownApproval

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from bundlectl.config.settings import TokenIssuer
    from bundlectl.gateway.identity import Verifier

COOKIE = "bundlectl_approver"
SIGNING_IN = "bundlectl_signing_in"  # binds a sign-in at the identity provider to one browser
DURATIONS = ("15m", "1h", "8h", "1d")  # "Approve for ..." choices
FOLD = 200  # characters of an argument's value shown before the rest is folded away
SESSIONS = 64  # approver sessions kept; the oldest is dropped beyond that


@dataclass(frozen=True)
class Person:
    """Who decides: a person an identity token named (`sub`, and the name shown), or the
    holder of the approver token (no `sub`)."""

    sub: str | None
    name: str


@dataclass(frozen=True)
class _Session:
    csrf: str
    person: Person | None  # None: signed in with the approver token
    claims: JsonObject | None = None  # a person's: matched again on every request
    until: float | None = None  # a person's: when their ID token expires


@dataclass
class Approvers:
    """Who may use the page: the approver token (`once`: good for one sign-in, as `approvals ui`
    prints it), and the signed-in sessions, each with its CSRF token and the person an
    identity provider signed in."""

    token: str
    once: bool = False
    sessions: dict[str, _Session] = field(default_factory=dict)  # by session id

    def sign_in(self, given: str) -> str | None:
        """A new session for the right token (None: wrong, or a one-time token used)."""
        if not self.token or not hmac.compare_digest(given.encode(), self.token.encode()):
            return None
        if self.once:
            self.token = ""
        return self.opened(None)

    def opened(self, person: Person | None, claims: JsonObject | None = None) -> str:
        """A new session (for `person`, whom their identity provider signed in with `claims`:
        good until their ID token expires)."""
        session = secrets.token_urlsafe(32)
        expires = claims.get("exp") if claims is not None else None
        until = float(expires) if isinstance(expires, int | float) else None
        self.sessions[session] = _Session(secrets.token_urlsafe(32), person, claims, until)
        while len(self.sessions) > SESSIONS:
            del self.sessions[next(iter(self.sessions))]
        return session

    def session(self, request: Request) -> _Session | None:
        """The request's session while it holds (a person's ends when their ID token does)."""
        key = request.cookies.get(COOKIE, "")
        found = self.sessions.get(key)
        if found is not None and found.until is not None and time.time() >= found.until:
            del self.sessions[key]
            return None
        return found

    def csrf(self, request: Request) -> str | None:
        """The CSRF token of the request's session; None: not signed in."""
        found = self.session(request)
        return found.csrf if found is not None else None

    def person(self, request: Request) -> Person | None:
        """The person the request's session was signed in for (None: the approver token's
        holder, or not signed in)."""
        found = self.session(request)
        return found.person if found is not None else None

    def bearer(self, request: Request) -> bool:
        """The request carries the approver token itself (`Authorization: Bearer ...`): a
        program's request (a chat bot, a CI job). Never a one-time token, which signs in once."""
        given = request.headers.get("authorization", "")
        if self.once or not self.token or given[:7].lower() != "bearer ":
            return False
        return hmac.compare_digest(given[7:].strip().encode(), self.token.encode())


@dataclass
class People:
    """Approvers as people (`policy.approvals.approvers`): their own access tokens, verified as
    the agents' are (`verifier`: gateway.auth.issuers), or the ID token of a sign-in through
    an issuer with a `client_id` (`signing_in`), fitting `match`. `public`: the gateway's
    public URL (from gateway.auth.resource), where the issuer sends a signed-in person back."""

    verifier: Verifier
    match: dict[str, str | list[str]]
    signing_in: list[TokenIssuer] = field(default_factory=list)
    public: str | None = None

    async def who(self, token: str) -> tuple[Person | None, int, str]:
        """The approver a token names; else None, the HTTP status and why."""
        claims, reason = await self.verifier.claims(token)
        if claims is None:
            return None, 401, f"unauthorized: the token is {reason}"
        return self.person(claims)

    def person(self, claims: JsonObject) -> tuple[Person | None, int, str]:
        """The approver verified claims name; else None, the HTTP status and why."""
        lacking = why_not(claims, self.match)
        if lacking is not None:
            wanted = ", ".join(f"{k}: {v}" for k, v in self.match.items())
            return (
                None,
                403,
                (
                    f"forbidden: you are not an approver ({lacking}); policy.approvals.approvers "
                    f"asks for {{{wanted}}}"
                ),
            )
        sub = str(claims.get("sub") or "")
        if not sub:
            return None, 403, "forbidden: the token names no subject (sub)"
        return Person(sub, _display(claims, sub)), 200, ""


def _display(claims: JsonObject, sub: str) -> str:
    """How a person is named: the verified email, else their name, else the subject."""
    email = claims.get("email")
    if isinstance(email, str) and email and claims.get("email_verified") is True:
        return email
    for claim in ("name", "preferred_username"):
        value = claims.get(claim)
        if isinstance(value, str) and value:
            return value
    return sub


@dataclass
class ApprovalsPage:
    """The page's routes. `store`: the state store now (a reload may change it); `project`: the
    project root whose requests are shown (None: every project's); `trusted`: the Host and
    Origin checks."""

    approvers: Approvers
    store: Callable[[], Store]
    project: Callable[[], str | None]
    trusted: Callable[[Request], bool]
    log: Callable[[], Path] = field(default=lambda: log_path(userconfig.load().audit.path))
    people: Callable[[], People | None] = field(default=lambda: None)  # approvers as people
    signin: SignIn = field(default_factory=SignIn)
    # The gateway's reload (an edited config or lock applies from this request on, here too)
    refresh: Callable[[], Awaitable[None]] | None = None

    def routes(self) -> list[Route]:
        from starlette.routing import Route

        return [
            Route("/approvals", self.listing),
            Route("/approvals/sign-in", self.signing_in),
            Route("/approvals/callback", self.signed_in),
            Route("/approvals/requests.json", self.listed_json),
            Route("/approvals/{approval}.json", self.one_json),
            Route("/approvals/{approval}.json", self.decide_json, methods=["POST"]),
            Route("/approvals/{approval}/status.json", self.status_json),
            Route("/approvals/{approval}", self.one),
            Route("/approvals/{approval}", self.decide, methods=["POST"]),
            Route("/activity", self.activity),
        ]

    async def activity(self, request: Request) -> Response:
        """Calls, denials, errors and held approvals per agent and day, from the audit log."""
        if (no := await self.refused(request)) is not None:
            return no
        root = self.project()
        try:
            found = [
                record
                for _, record in records(lines(self.log()), pending=False)
                if record is not None and (root is None or record.get("project") in (None, root))
            ]
        except OSError:
            found = []
        body = '<p><a href="/approvals">← approvals</a></p>' + rendered(counted(found))
        return _html(_page("Activity", body))

    async def approver(self, request: Request) -> tuple[Person | None, int, str]:
        """Who a request with a bearer token comes from: the approver token's holder, or a
        person whose own access token fits the approvers' match; else None, status, why."""
        given = request.headers.get("authorization", "")
        host = request.client.host if request.client is not None else "?"
        if self.approvers.bearer(request):
            return Person(None, f"approvers API ({host})"), 200, ""
        people = self.people()
        token = given[7:].strip() if given[:7].lower() == "bearer " else ""
        if people is not None and token.count(".") == 2:
            return await people.who(token)
        return None, 401, "send Authorization: Bearer <the approver token, or your own token>"

    async def refused(self, request: Request) -> Response | None:
        if self.refresh is not None:
            await self.refresh()
        if not self.trusted(request):
            return _html(_page("Not allowed", "<p>Host or Origin not allowed.</p>"), 421)
        session = self.approvers.session(request)
        if session is not None and session.claims is not None:
            # A person's sign-in holds only while they fit the approvers' match (a reload
            # that takes them out of it ends what they may decide).
            people = self.people()
            person = people.person(session.claims)[0] if people is not None else None
            if person is None:
                body = "<p>You are no longer an approver here; sign in again.</p>"
                return _html(_page("Not an approver", body), 403)
            return None
        if session is not None or self.approvers.bearer(request):
            return None
        if request.headers.get("authorization") and self.people() is not None:
            person, status, why = await self.approver(request)
            if person is None:
                from starlette.responses import JSONResponse

                return JSONResponse({"error": why}, status)
            return None
        people = self.people()
        offered = "".join(
            f'<p><a id="sign-in-{n}" href="/approvals/sign-in?issuer={n}">Sign in with '
            f"{_shown(issuer.issuer)}</a></p>"
            for n, issuer in enumerate(people.signing_in if people is not None else [])
        )
        body = offered + (
            "<p>Sign in with the approver token: open the link <code>bundlectl approvals "
            "ui</code> printed, or <code>/approvals?token=...</code> with the gateway's "
            "<code>BUNDLECTL_APPROVER_TOKEN</code>.</p>"
        )
        return _html(_page("Sign in", body), 401)

    async def signing_in(self, request: Request) -> Response:
        """To the identity provider: `?issuer=N` of those with a client_id (default the
        first), the way back bound to this browser by a cookie."""
        from starlette.responses import RedirectResponse

        if not self.trusted(request):
            return _html(_page("Not allowed", "<p>Host or Origin not allowed.</p>"), 421)
        people = self.people()
        offered = people.signing_in if people is not None else []
        try:
            issuer = offered[int(request.query_params.get("issuer", "0"))]
        except (ValueError, IndexError):
            body = (
                "<p>No identity provider to sign in with: give one of gateway.auth.issuers a "
                "<code>client_id</code>, and policy.approvals.approvers a match.</p>"
            )
            return _html(_page("Sign in", body), 404)
        assert people is not None
        try:
            where, state = await self.signin.start(issuer, _back(request, people))
        except SignInFailed as exc:
            return _html(_page("Sign in", f"<p>{_shown(exc.message)}</p>"), 502)
        answer = RedirectResponse(where, status_code=303)
        # Lax: the identity provider's redirect back is a navigation from another site.
        answer.set_cookie(
            SIGNING_IN,
            state,
            max_age=600,
            httponly=True,
            samesite="lax",
            path="/approvals/callback",
            secure=request.url.scheme == "https",
        )
        return answer

    async def signed_in(self, request: Request) -> Response:
        """Back from the identity provider: the person its ID token names, signed in when they
        fit the approvers' match (a page that says why not, otherwise)."""
        if not self.trusted(request):
            return _html(_page("Not allowed", "<p>Host or Origin not allowed.</p>"), 421)
        again = '<p><a href="/approvals">Start again</a></p>'
        query = request.query_params
        if "error" in query:
            said = query["error"] + (
                f" ({query['error_description']})" if "error_description" in query else ""
            )
            return _html(
                _page("Sign in", f"<p>The identity provider said: {_shown(said)}</p>{again}"), 401
            )
        state, code = query.get("state", ""), query.get("code", "")
        bound = request.cookies.get(SIGNING_IN, "")
        people = self.people()
        if not state or not code or not hmac.compare_digest(state.encode(), bound.encode()):
            body = f"<p>This sign-in was not started in this browser, or it has expired.</p>{again}"
            return _html(_page("Sign in", body), 400)
        if people is None:
            return _html(_page("Sign in", "<p>Approvers are not people here.</p>"), 404)
        try:
            claims = await self.signin.redeemed(state, code, people.verifier)
        except SignInFailed as exc:
            return _html(_page("Sign in", f"<p>{_shown(exc.message)}</p>{again}"), 401)
        person, status, why = people.person(claims)
        if person is None:
            return _html(_page("Not an approver", f"<p>{_shown(why)}</p>"), status)
        # A page, not a redirect: the session cookie (SameSite=Strict) is sent with the next
        # request only when that request starts on this site.
        body = (
            f"<p>Signed in as {_shown(person.name)}. "
            '<a id=continue href="/approvals">Continue to the approvals</a></p>'
        )
        page, nonce = _page("Signed in", body, "location.replace('/approvals');")
        answer = _html((page, nonce))
        session = self.approvers.opened(person, claims)
        secure = request.url.scheme == "https"
        answer.set_cookie(
            COOKIE, session, httponly=True, samesite="strict", path="/", secure=secure
        )
        answer.delete_cookie(SIGNING_IN, path="/approvals/callback")
        return answer

    def mine(self, approval: Approval) -> bool:
        root = self.project()
        return root is None or approval.binding.project == root

    def found(self, request: Request) -> Approval | None:
        approval = self.store().get(request.path_params["approval"])
        return approval if approval is not None and self.mine(approval) else None

    async def listing(self, request: Request) -> Response:
        from starlette.responses import RedirectResponse

        given = request.query_params.get("token")
        if given is not None and self.trusted(request):
            session = self.approvers.sign_in(given)
            if session is None:
                return _html(_page("Sign in", "<p>That token is not good (any more).</p>"), 401)
            # The token leaves the address bar (and the history) at once.
            answer = RedirectResponse("/approvals", status_code=303)
            answer.set_cookie(COOKIE, session, httponly=True, samesite="strict", path="/")
            return answer
        if (no := await self.refused(request)) is not None:
            return no
        return _html(_list_page(self.approvers.person(request)))

    async def listed_json(self, request: Request) -> Response:
        from starlette.responses import JSONResponse

        if (no := await self.refused(request)) is not None:
            return no
        now = time.time()
        try:
            rows = [_row(a, now) for a in self.store().listed(everything=True) if self.mine(a)]
        except StateError as exc:
            return JSONResponse({"error": str(exc)}, 503)
        recent = [r for r in rows if r["status"] == "pending" or now - r["at"] < 3600]
        return JSONResponse({"approvals": recent[::-1]}, headers=_HEADERS)

    async def one(self, request: Request) -> Response:
        if (no := await self.refused(request)) is not None:
            return no
        approval = self.found(request)
        if approval is None:
            return _html(_page("Not found", "<p>No such approval request.</p>"), 404)
        csrf = self.approvers.csrf(request) or ""
        return _html(_detail_page(approval, csrf))

    async def one_json(self, request: Request) -> Response:
        from starlette.responses import JSONResponse

        if (no := await self.refused(request)) is not None:
            return no
        approval = self.found(request)
        if approval is None:
            return JSONResponse({"error": "no such approval request"}, 404)
        return JSONResponse(described(approval, time.time()), headers=_HEADERS)

    async def status_json(self, request: Request) -> Response:
        """A request's row as the page shows it (its texts through `visible`): what the
        detail page polls."""
        from starlette.responses import JSONResponse

        if (no := await self.refused(request)) is not None:
            return no
        approval = self.found(request)
        if approval is None:
            return JSONResponse({"error": "no such approval request"}, 404)
        return JSONResponse(_row(approval, time.time()), headers=_HEADERS)

    def _settle(
        self,
        request: Request,
        approval: Approval,
        action: str,
        *,
        span: str,
        reason: str,
        door: str,
        person: Person | None = None,
    ) -> None:
        """An approver's decision (`span`: once, or a duration of DURATIONS), recorded as made
        by `person` when a token named them, else at `door` from the request's address
        (UnknownApproval: no longer pending; SelfApproval: they made the call)."""
        until = time.time() + seconds(span) if action == "approve" and span != "once" else None
        host = request.client.host if request.client is not None else "?"
        named = person is not None and person.sub is not None
        settle(
            self.store(),
            approval.id,
            approve=action == "approve",
            by=person.name if person is not None and named else f"{door} ({host})",
            reason=(reason or None) if action == "deny" else None,
            until=until,
            sub=person.sub if person is not None else None,
        )

    async def decide_json(self, request: Request) -> Response:
        """The approvers' API: `{"decision": "approve"|"deny", "for": "once"|"15m"|...,
        "reason": "..."}` with the approver token as a bearer token (never a page session's
        cookie, which a form of another site could send)."""
        from starlette.responses import JSONResponse

        if not self.trusted(request):
            return JSONResponse({"error": "Host or Origin not allowed"}, 421)
        if self.refresh is not None:
            await self.refresh()
        person, status, why = await self.approver(request)
        if person is None:
            return JSONResponse({"error": why}, status)
        try:
            asked = await request.json()
        except ValueError:
            asked = None
        if not isinstance(asked, dict):
            return JSONResponse({"error": 'send a JSON object: {"decision": ...}'}, 400)
        action, span = asked.get("decision"), asked.get("for", "once")
        reason = asked.get("reason")
        if action not in ("approve", "deny") or (span != "once" and span not in DURATIONS):
            choices = ", ".join(("once", *DURATIONS))
            return JSONResponse({"error": f"decision: approve or deny; for: one of {choices}"}, 400)
        if reason is not None and not isinstance(reason, str):
            return JSONResponse({"error": "reason: a string"}, 400)
        approval = self.found(request)
        if approval is None:
            return JSONResponse({"error": "no such approval request"}, 404)
        try:
            self._settle(
                request,
                approval,
                action,
                span=span,
                reason=(reason or "").strip(),
                door="approvers API",
                person=person,
            )
        except SelfApproval as exc:
            return JSONResponse({"error": f"forbidden: {exc.message}"}, 403)
        except UnknownApproval as exc:
            return JSONResponse({"error": str(exc)}, 409)
        except StateError as exc:
            return JSONResponse({"error": str(exc)}, 503)
        settled = self.store().get(approval.id) or approval
        return JSONResponse(described(settled, time.time()), headers=_HEADERS)

    async def decide(self, request: Request) -> Response:
        from starlette.responses import RedirectResponse

        if (no := await self.refused(request)) is not None:
            return no
        form = await request.form()
        csrf = self.approvers.csrf(request) or ""
        if not hmac.compare_digest(str(form.get("csrf", "")).encode(), csrf.encode()):
            return _html(_page("Refused", "<p>The form is stale: reload the page.</p>"), 403)
        approval = self.found(request)
        if approval is None:
            return _html(_page("Not found", "<p>No such approval request.</p>"), 404)
        action = str(form.get("action", ""))
        span = str(form.get("for", "once"))
        reason = str(form.get("reason", "")).strip()
        if action not in ("approve", "deny") or (span != "once" and span not in DURATIONS):
            return _html(_page("Refused", "<p>Unknown decision.</p>"), 400)
        person = self.approvers.person(request)
        try:
            self._settle(
                request,
                approval,
                action,
                span=span,
                reason=reason,
                door="approvals page",
                person=person,
            )
        except SelfApproval as exc:
            back = f'<p><a href="/approvals/{html.escape(approval.id)}">← the request</a></p>'
            return _html(_page("Refused", f"<p>{_shown(exc.message)}</p>{back}"), 403)
        except UnknownApproval:
            pass  # decided, withdrawn or expired meanwhile: the page shows what it became
        except StateError as exc:
            return _html(_page("Store unavailable", f"<p>{html.escape(str(exc))}</p>"), 503)
        return RedirectResponse(f"/approvals/{approval.id}", status_code=303)


# No caching, no framing by another site.
_HEADERS = {
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",  # no-referrer would make a form's Origin `null`
}


def _html(page: tuple[str, str], status: int = 200) -> Response:
    """A page with its script's nonce: no other script runs in it, whatever a value holds."""
    from starlette.responses import HTMLResponse

    text, nonce = page
    policy = (
        f"default-src 'self'; script-src 'nonce-{nonce}'; style-src 'unsafe-inline'; "
        "img-src 'none'; frame-ancestors 'none'; form-action 'self'"
    )
    return HTMLResponse(text, status, headers={**_HEADERS, "Content-Security-Policy": policy})


def _row(approval: Approval, now: float) -> JsonObject:
    """A request as the page's script shows it: every text as `visible` makes it."""
    b = approval.binding
    state = approval.state(now)
    return {
        "id": approval.id,
        "status": state,
        "agent": visible(b.agent),
        "tool": visible(b.qualified),
        "rule": visible(approval.rule),
        "age": span_text(now - approval.created),
        "expires": span_text(approval.expires - now) if state == "pending" else "",
        "decided_by": visible(approval.decided_by or ""),
        "reason": visible(approval.reason or "", FOLD),
        "decision": visible(decision_text(approval), FOLD),
        "progress": visible(progress_text(approval), FOLD),
        "at": approval.created,
    }


STYLE = """
body{font:15px/1.45 system-ui,sans-serif;margin:2rem auto;max-width:64rem;padding:0 1rem;
  color:#1d2430}
h1{font-size:1.4rem}table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:.4rem .6rem;border-bottom:1px solid #dde2ea;vertical-align:top}
th{font-weight:600;color:#5a6472}code,pre{font:13px/1.4 ui-monospace,monospace}
pre{background:#f4f6f9;padding:.6rem;border-radius:4px;white-space:pre-wrap;word-break:break-all}
.pending{color:#8a5a00;font-weight:600}.approved{color:#1a7f37}.denied{color:#b42318}
.muted{color:#6b7480}form{display:inline-block;margin:.4rem .8rem .4rem 0}
button{font:inherit;padding:.35rem .9rem;border-radius:4px;border:1px solid #9aa4b2;cursor:pointer}
button.ok{background:#1a7f37;color:#fff;border-color:#1a7f37}
button.no{background:#b42318;color:#fff;border-color:#b42318}
"""


def _page(title: str, body: str, script: str = "") -> tuple[str, str]:
    nonce = secrets.token_urlsafe(16)
    text = (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{_shown(title)} · bundlectl approvals</title>"
        f"<style>{STYLE}</style></head><body>{body}"
        + (f"<script nonce={nonce}>{script}</script>" if script else "")
        + "</body></html>"
    )
    return text, nonce


def _back(request: Request, people: People) -> str:
    """Where the identity provider sends a signed-in person back: the gateway's public URL
    (gateway.auth.resource) when set, else this request's own (its Host was checked)."""
    if people.public:
        parts = urllib.parse.urlsplit(people.public)
        return f"{parts.scheme}://{parts.netloc}/approvals/callback"
    return f"{request.url.scheme}://{request.url.netloc}/approvals/callback"


def _list_page(person: Person | None) -> tuple[str, str]:
    who = f"Signed in as <strong id=me>{_shown(person.name)}</strong> · " if person else ""
    body = (
        f'<p class=muted>{who}<a href="/activity">Activity →</a></p>'
        "<h1>Calls waiting for approval</h1>"
        "<p class=muted id=note>Loading…</p>"
        "<table><thead><tr><th>Agent</th><th>Tool</th><th>Asked by</th><th>Age</th>"
        "<th>Status</th></tr></thead><tbody id=rows></tbody></table>"
    )
    return _page("Calls waiting", body, _LIST_SCRIPT)


# The list, refreshed every second: every value set as text, never as markup.
_LIST_SCRIPT = """
const rows = document.getElementById('rows'), note = document.getElementById('note');
const shown = new Map();  // request id -> its row, kept: a refresh updates it in place
function set(td, text, cls) {
  if (td.textContent !== text) td.textContent = text;
  if (cls !== undefined && td.className !== cls) td.className = cls;
}
function row(a) {
  let tr = shown.get(a.id);
  if (!tr) {
    tr = document.createElement('tr'); tr.dataset.id = a.id;
    for (let i = 0; i < 5; i++) tr.appendChild(document.createElement('td'));
    const link = document.createElement('a');
    link.href = '/approvals/' + encodeURIComponent(a.id);
    tr.children[1].appendChild(link);
    shown.set(a.id, tr);
  }
  const cells = tr.children;
  set(cells[0], a.agent); set(cells[1].firstChild, a.tool);
  set(cells[2], a.rule, 'muted'); set(cells[3], a.age);
  let status = a.status;
  if (a.status === 'pending') {
    status += ' (expires in ' + a.expires + ')' + (a.progress ? ', ' + a.progress : '');
  }
  else if (a.decision && !a.decision.startsWith(a.status)) status += ': ' + a.decision;
  else if (a.decision) status = a.decision;
  set(cells[4], status, a.status);
  return tr;
}
async function refresh() {
  try {
    const got = await fetch('/approvals/requests.json', {cache: 'no-store'});
    if (!got.ok) { note.textContent = 'Signed out or unavailable: ' + got.status; return; }
    const data = await got.json(), now = data.approvals.map(row);
    const ids = new Set(data.approvals.map(a => a.id));
    for (const id of [...shown.keys()]) {
      if (!ids.has(id)) { shown.get(id).remove(); shown.delete(id); }
    }
    // Rows are moved only when the order changed: a row a person is about to click stays.
    if (now.some((tr, i) => rows.children[i] !== tr)) rows.replaceChildren(...now);
    const waiting = data.approvals.filter(a => a.status === 'pending').length;
    note.textContent = waiting ? waiting + ' call(s) waiting' : 'No calls are waiting.';
  } catch (e) { note.textContent = 'Cannot reach the gateway: ' + e; }
}
refresh(); setInterval(refresh, 1000);
"""


def _value(value: object) -> str:
    """One argument's value as formatted JSON, a long one folded after `FOLD` characters."""
    raw = json.dumps(value, ensure_ascii=False, indent=2)
    # JSON breaks lines only between members (it escapes a value's own line breaks).
    text = "\n".join(visible(line) for line in raw.split("\n"))
    if len(text) <= FOLD:
        return f"<pre>{html.escape(text)}</pre>"
    return (
        f"<details><summary><code>{_shown(text, FOLD, size=len(raw))}</code></summary>"
        f"<pre>{html.escape(text)}</pre></details>"
    )


def _shown(text: str, fold: int | None = None, *, size: int | None = None) -> str:
    """Text an agent, a server or a person wrote, as HTML: `visible`, then escaped."""
    return html.escape(visible(text, fold, size=size))


def _detail_page(approval: Approval, csrf: str) -> tuple[str, str]:
    now = time.time()
    b = approval.binding
    state = approval.state(now)
    try:
        arguments = json.loads(approval.shown)
    except ValueError:
        arguments = approval.shown
    if isinstance(arguments, dict) and arguments:
        shown = "".join(
            f"<tr><th><code>{_shown(str(k))}</code></th><td>{_value(v)}</td></tr>"
            for k, v in arguments.items()
        )
        args = f"<table>{shown}</table>"
    else:
        args = _value(arguments)
    e = _shown
    token = f'<input type=hidden name=csrf value="{e(csrf)}">'
    options = "".join(f"<option value={d}>{d}</option>" for d in DURATIONS)
    forms = (
        f"<div id=decide {'' if state == 'pending' else 'hidden'}>"
        f"<form method=post>{token}<input type=hidden name=action value=approve>"
        "<button class=ok id=approve-once>Approve once</button></form>"
        f"<form method=post>{token}<input type=hidden name=action value=approve>"
        f'<select name=for aria-label="for how long">{options}</select> '
        "<button id=approve-for>Approve for…</button></form>"
        f"<form method=post>{token}<input type=hidden name=action value=deny>"
        '<input name=reason placeholder="reason (shown to the caller)" size=32> '
        "<button class=no id=deny>Deny</button></form></div>"
    )
    decided = decision_text(approval) or progress_text(approval)
    body = (
        '<p><a href="/approvals">← all requests</a></p>'
        f"<h1>Agent <code>{e(b.agent)}</code> wants to call <code>{e(b.qualified)}</code></h1>"
        f'<p>Status: <strong id=status class="{e(state)}">{e(state)}</strong> '
        f"<span id=decided class=muted>{e(decided)}</span></p>"
        f"<table><tr><th>Request</th><td><code>{e(approval.id)}</code></td></tr>"
        f"<tr><th>Asked by</th><td>{e(approval.rule)}</td></tr>"
        f"<tr><th>Requested</th><td>{e(span_text(now - approval.created))} ago</td></tr>"
        f"<tr><th>Arguments</th><td class=muted>{e(b.digest[:23])}…; secrets shown as "
        "<code>${NAME}</code></td></tr></table>"
        f"<h2>Arguments</h2>{args}{forms}"
    )
    script = _DETAIL_SCRIPT.replace("ID", json.dumps(approval.id))
    return _page(f"{b.qualified} for {b.agent}", body, script)


# A request's status, refreshed every second: a decision made elsewhere shows up.
_DETAIL_SCRIPT = """
const id = ID;
async function refresh() {
  const got = await fetch('/approvals/' + encodeURIComponent(id) + '/status.json',
                          {cache: 'no-store'});
  if (!got.ok) return;
  const a = await got.json(), status = document.getElementById('status');
  status.textContent = a.status; status.className = a.status;
  document.getElementById('decided').textContent = a.decision || a.progress;
  document.getElementById('decide').hidden = a.status !== 'pending';
}
setInterval(refresh, 1000);
"""
