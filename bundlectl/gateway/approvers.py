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
import secrets
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bundlectl.calls.activity import counted, rendered
from bundlectl.calls.approval import (
    SelfApproval,
    described,
    settle,
    undeclared,
)
from bundlectl.calls.auditfile import lines, log_path, records
from bundlectl.config import userconfig
from bundlectl.config.settings import seconds
from bundlectl.gateway.approvals_html import (
    DURATIONS,
    HEADERS,
    detail_page,
    html_response,
    list_page,
    page,
    row,
    shown,
)
from bundlectl.gateway.signin import SignIn, SignInFailed
from bundlectl.mcpio.requests import JsonObject
from bundlectl.policy.claims import why_not
from bundlectl.state import Approval, Binding, StateError, Store, UnknownApproval

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from bundlectl.config.settings import TokenIssuer
    from bundlectl.gateway.identity import Verifier

COOKIE = "bundlectl_approver"
SIGNING_IN = "bundlectl_signing_in"  # binds a sign-in at the identity provider to one browser
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
    # The declared input schema of a request's tool (None: unknown), to mark the arguments the
    # tool does not declare
    schema: Callable[[Binding], Mapping[str, Any] | None] = field(default=lambda binding: None)

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
        if (signed := self.token_sign_in(request, "/activity")) is not None:
            return signed
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
        return html_response(page("Activity", body))

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
            return html_response(page("Not allowed", "<p>Host or Origin not allowed.</p>"), 421)
        session = self.approvers.session(request)
        if session is not None and session.claims is not None:
            # A person's sign-in holds only while they fit the approvers' match (a reload
            # that takes them out of it ends what they may decide).
            people = self.people()
            person = people.person(session.claims)[0] if people is not None else None
            if person is None:
                body = "<p>You are no longer an approver here; sign in again.</p>"
                return html_response(page("Not an approver", body), 403)
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
            f"{shown(issuer.issuer)}</a></p>"
            for n, issuer in enumerate(people.signing_in if people is not None else [])
        )
        body = offered + (
            "<p>Sign in with the approver token: open the link <code>bundlectl approvals "
            "ui</code> printed, or <code>/approvals?token=...</code> with the gateway's "
            "<code>BUNDLECTL_APPROVER_TOKEN</code>.</p>"
        )
        return html_response(page("Sign in", body), 401)

    async def signing_in(self, request: Request) -> Response:
        """To the identity provider: `?issuer=N` of those with a client_id (default the
        first), the way back bound to this browser by a cookie."""
        from starlette.responses import RedirectResponse

        if not self.trusted(request):
            return html_response(page("Not allowed", "<p>Host or Origin not allowed.</p>"), 421)
        people = self.people()
        offered = people.signing_in if people is not None else []
        try:
            issuer = offered[int(request.query_params.get("issuer", "0"))]
        except (ValueError, IndexError):
            body = (
                "<p>No identity provider to sign in with: give one of gateway.auth.issuers a "
                "<code>client_id</code>, and policy.approvals.approvers a match.</p>"
            )
            return html_response(page("Sign in", body), 404)
        assert people is not None
        try:
            where, state = await self.signin.start(issuer, _back(request, people))
        except SignInFailed as exc:
            return html_response(page("Sign in", f"<p>{shown(exc.message)}</p>"), 502)
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
            return html_response(page("Not allowed", "<p>Host or Origin not allowed.</p>"), 421)
        again = '<p><a href="/approvals">Start again</a></p>'
        query = request.query_params
        if "error" in query:
            said = query["error"] + (
                f" ({query['error_description']})" if "error_description" in query else ""
            )
            return html_response(
                page("Sign in", f"<p>The identity provider said: {shown(said)}</p>{again}"), 401
            )
        state, code = query.get("state", ""), query.get("code", "")
        bound = request.cookies.get(SIGNING_IN, "")
        people = self.people()
        if not state or not code or not hmac.compare_digest(state.encode(), bound.encode()):
            body = f"<p>This sign-in was not started in this browser, or it has expired.</p>{again}"
            return html_response(page("Sign in", body), 400)
        if people is None:
            return html_response(page("Sign in", "<p>Approvers are not people here.</p>"), 404)
        try:
            claims = await self.signin.redeemed(state, code, people.verifier)
        except SignInFailed as exc:
            return html_response(page("Sign in", f"<p>{shown(exc.message)}</p>{again}"), 401)
        person, status, why = people.person(claims)
        if person is None:
            return html_response(page("Not an approver", f"<p>{shown(why)}</p>"), status)
        # A page, not a redirect: the session cookie (SameSite=Strict) is sent with the next
        # request only when that request starts on this site.
        body = (
            f"<p>Signed in as {shown(person.name)}. "
            '<a id=continue href="/approvals">Continue to the approvals</a></p>'
        )
        answer = html_response(page("Signed in", body, "location.replace('/approvals');"))
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

        if (signed := self.token_sign_in(request, "/approvals")) is not None:
            return signed
        if (no := await self.refused(request)) is not None:
            return no
        person = self.approvers.person(request)
        return html_response(list_page(person.name if person is not None else None))

    def token_sign_in(self, request: Request, to: str) -> Response | None:
        """A `?token=` link (`approvals ui`, the approver token): a session cookie, and on to
        `to` without the token in the address bar (or the history); None: no token given."""
        from starlette.responses import RedirectResponse

        given = request.query_params.get("token")
        if given is None or not self.trusted(request):
            return None
        session = self.approvers.sign_in(given)
        if session is None:
            return html_response(page("Sign in", "<p>That token is not good (any more).</p>"), 401)
        answer = RedirectResponse(to, status_code=303)
        answer.set_cookie(COOKIE, session, httponly=True, samesite="strict", path="/")
        return answer

    async def listed_json(self, request: Request) -> Response:
        from starlette.responses import JSONResponse

        if (no := await self.refused(request)) is not None:
            return no
        now = time.time()
        try:
            rows = [row(a, now) for a in self.store().listed(everything=True) if self.mine(a)]
        except StateError as exc:
            return JSONResponse({"error": str(exc)}, 503)
        recent = [r for r in rows if r["status"] == "pending" or now - r["at"] < 3600]
        return JSONResponse({"approvals": recent[::-1]}, headers=HEADERS)

    async def one(self, request: Request) -> Response:
        if (no := await self.refused(request)) is not None:
            return no
        approval = self.found(request)
        if approval is None:
            return html_response(page("Not found", "<p>No such approval request.</p>"), 404)
        csrf = self.approvers.csrf(request) or ""
        marked = undeclared(approval, self.schema(approval.binding))
        return html_response(detail_page(approval, csrf, marked))

    async def one_json(self, request: Request) -> Response:
        from starlette.responses import JSONResponse

        if (no := await self.refused(request)) is not None:
            return no
        approval = self.found(request)
        if approval is None:
            return JSONResponse({"error": "no such approval request"}, 404)
        return JSONResponse(described(approval, time.time()), headers=HEADERS)

    async def status_json(self, request: Request) -> Response:
        """A request's row as the page shows it (its texts through `visible`): what the
        detail page polls."""
        from starlette.responses import JSONResponse

        if (no := await self.refused(request)) is not None:
            return no
        approval = self.found(request)
        if approval is None:
            return JSONResponse({"error": "no such approval request"}, 404)
        return JSONResponse(row(approval, time.time()), headers=HEADERS)

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
        return JSONResponse(described(settled, time.time()), headers=HEADERS)

    async def decide(self, request: Request) -> Response:
        from starlette.responses import RedirectResponse

        if (no := await self.refused(request)) is not None:
            return no
        form = await request.form()
        csrf = self.approvers.csrf(request) or ""
        if not hmac.compare_digest(str(form.get("csrf", "")).encode(), csrf.encode()):
            return html_response(page("Refused", "<p>The form is stale: reload the page.</p>"), 403)
        approval = self.found(request)
        if approval is None:
            return html_response(page("Not found", "<p>No such approval request.</p>"), 404)
        action = str(form.get("action", ""))
        span = str(form.get("for", "once"))
        reason = str(form.get("reason", "")).strip()
        if action not in ("approve", "deny") or (span != "once" and span not in DURATIONS):
            return html_response(page("Refused", "<p>Unknown decision.</p>"), 400)
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
            return html_response(page("Refused", f"<p>{shown(exc.message)}</p>{back}"), 403)
        except UnknownApproval:
            pass  # decided, withdrawn or expired meanwhile: the page shows what it became
        except StateError as exc:
            return html_response(page("Store unavailable", f"<p>{html.escape(str(exc))}</p>"), 503)
        return RedirectResponse(f"/approvals/{approval.id}", status_code=303)


def _back(request: Request, people: People) -> str:
    """Where the identity provider sends a signed-in person back: the gateway's public URL
    (gateway.auth.resource) when set, else this request's own (its Host was checked)."""
    if people.public:
        parts = urllib.parse.urlsplit(people.public)
        return f"{parts.scheme}://{parts.netloc}/approvals/callback"
    return f"{request.url.scheme}://{request.url.netloc}/approvals/callback"
