"""The approvers' page as HTML (`approvers.py` serves it): the list and a request's detail,
each with its small script, every text an agent, a server or a person wrote passed through
`output.visible` and escaped (`html.escape` here, `textContent` in the scripts). Pages carry a
nonce for their one script and no-store, no-framing headers."""

from __future__ import annotations

import html
import json
import secrets
import time
from typing import TYPE_CHECKING

from bundlectl.calls.approval import argument_summary, decision_text, progress_text
from bundlectl.calls.toolchange import change_lines
from bundlectl.mcpio.requests import JsonObject
from bundlectl.output import span_text, visible

if TYPE_CHECKING:
    from starlette.responses import Response

    from bundlectl.state import Approval

DURATIONS = ("15m", "1h", "8h", "1d")  # "Approve for ..." choices
FOLD = 200  # characters of an argument's value shown before the rest is folded away


# No caching, no framing by another site.
HEADERS = {
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",  # no-referrer would make a form's Origin `null`
}


def html_response(page: tuple[str, str], status: int = 200) -> Response:
    """A page with its script's nonce: no other script runs in it, whatever a value holds."""
    from starlette.responses import HTMLResponse

    text, nonce = page
    policy = (
        f"default-src 'self'; script-src 'nonce-{nonce}'; style-src 'unsafe-inline'; "
        "img-src 'none'; frame-ancestors 'none'; form-action 'self'"
    )
    return HTMLResponse(text, status, headers={**HEADERS, "Content-Security-Policy": policy})


def row(approval: Approval, now: float) -> JsonObject:
    """A request as the page's script shows it: every text as `visible` makes it."""
    b = approval.binding
    state = approval.state(now)
    return {
        "id": approval.id,
        "status": state,
        "agent": visible(b.agent or "-"),
        "tool": visible(b.qualified),
        "arguments": visible(argument_summary(approval)),
        "requester": visible(approval.requester or ""),
        "waiting": state == "pending" and approval.waited_on(now),
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
td.args{font:13px/1.4 ui-monospace,monospace;max-width:22rem;overflow-wrap:anywhere}
.undeclared{color:#b42318;font-weight:400;font-size:13px;display:block}
"""


def page(title: str, body: str, script: str = "") -> tuple[str, str]:
    nonce = secrets.token_urlsafe(16)
    text = (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{shown(title)} · bundlectl approvals</title>"
        f"<style>{STYLE}</style></head><body>{body}"
        + (f"<script nonce={nonce}>{script}</script>" if script else "")
        + "</body></html>"
    )
    return text, nonce


def list_page(signed_in: str | None) -> tuple[str, str]:
    """The list of held calls; `signed_in`: the name of the person signed in (None: the
    holder of the approver token)."""
    who = f"Signed in as <strong id=me>{shown(signed_in)}</strong> · " if signed_in else ""
    body = (
        f'<p class=muted>{who}<a href="/activity">Activity →</a></p>'
        "<h1>Calls waiting for approval</h1>"
        "<p class=muted id=note>Loading…</p>"
        "<table><thead><tr><th>Agent</th><th>Tool</th><th>Arguments</th><th>Requested by</th>"
        "<th>Asked by</th><th>Age</th><th>Status</th></tr></thead><tbody id=rows></tbody></table>"
    )
    return page("Calls waiting", body, _LIST_SCRIPT)


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
    for (let i = 0; i < 7; i++) tr.appendChild(document.createElement('td'));
    const link = document.createElement('a');
    link.href = '/approvals/' + encodeURIComponent(a.id);
    tr.children[1].appendChild(link);
    shown.set(a.id, tr);
  }
  const cells = tr.children;
  set(cells[0], a.agent); set(cells[1].firstChild, a.tool);
  set(cells[2], a.arguments, 'args'); set(cells[3], a.requester || '-', 'muted');
  set(cells[4], a.rule, 'muted'); set(cells[5], a.age);
  let status = a.status;
  if (a.status === 'pending') {
    status += ' (expires in ' + a.expires + ')' + (a.progress ? ', ' + a.progress : '');
    if (a.waiting) status += ' · a caller is waiting';
  }
  else if (a.decision && !a.decision.startsWith(a.status)) status += ': ' + a.decision;
  else if (a.decision) status = a.decision;
  set(cells[6], status, a.status);
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


def value_html(value: object) -> str:
    """One argument's value as formatted JSON, a long one folded after `FOLD` characters."""
    raw = json.dumps(value, ensure_ascii=False, indent=2)
    # JSON breaks lines only between members (it escapes a value's own line breaks).
    text = "\n".join(visible(line) for line in raw.split("\n"))
    if len(text) <= FOLD:
        return f"<pre>{html.escape(text)}</pre>"
    return (
        f"<details><summary><code>{shown(text, FOLD, size=len(raw))}</code></summary>"
        f"<pre>{html.escape(text)}</pre></details>"
    )


def shown(text: str, fold: int | None = None, *, size: int | None = None) -> str:
    """Text an agent, a server or a person wrote, as HTML: `visible`, then escaped."""
    return html.escape(visible(text, fold, size=size))


def detail_page(approval: Approval, csrf: str, undeclared: list[str]) -> tuple[str, str]:
    """A request, its arguments (those the tool declares first; `undeclared` marked), and the
    decision's forms."""
    if approval.binding.tool_change:
        return _change_page(approval, csrf)
    now = time.time()
    b = approval.binding
    state = approval.state(now)
    try:
        arguments = json.loads(approval.shown)
    except ValueError:
        arguments = approval.shown
    if isinstance(arguments, dict) and arguments:
        mark = "<span class=undeclared>not declared by the tool</span>"
        order = [k for k in arguments if k not in undeclared] + [
            k for k in arguments if k in undeclared
        ]
        listed = "".join(
            f"<tr><th><code>{shown(str(k))}</code>{mark if k in undeclared else ''}</th>"
            f"<td>{value_html(arguments[k])}</td></tr>"
            for k in order
        )
        args = f"<table>{listed}</table>"
    else:
        args = value_html(arguments)
    e = shown
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
    return page(f"{b.qualified} for {b.agent}", body, script)


def _change_page(approval: Approval, csrf: str) -> tuple[str, str]:
    """A "tool changed" request: the difference as a person reads it (each line `visible`),
    and approve (pins the new definition) or deny."""
    now = time.time()
    b = approval.binding
    state = approval.state(now)
    e = shown
    diff = "".join(
        f'<span class="{_LINE_CLASS.get(line.lstrip()[:1], "")}">{e(line)}</span>\n'
        for line in change_lines(approval)
    )
    token = f'<input type=hidden name=csrf value="{e(csrf)}">'
    forms = (
        f"<div id=decide {'' if state == 'pending' else 'hidden'}>"
        f"<form method=post>{token}<input type=hidden name=action value=approve>"
        "<button class=ok id=approve-once>Approve the new definition</button></form>"
        f"<form method=post>{token}<input type=hidden name=action value=deny>"
        '<input name=reason placeholder="reason" size=32> '
        "<button class=no id=deny>Deny</button></form></div>"
    )
    decided = decision_text(approval)
    body = (
        '<p><a href="/approvals">← all requests</a></p>'
        f"<h1>Tool <code>{e(b.qualified)}</code> is not what was reviewed</h1>"
        f'<p>Status: <strong id=status class="{e(state)}">{e(state)}</strong> '
        f"<span id=decided class=muted>{e(decided)}</span></p>"
        f"<table><tr><th>Request</th><td><code>{e(approval.id)}</code></td></tr>"
        f"<tr><th>Why</th><td>{e(approval.rule)}</td></tr>"
        f"<tr><th>Seen</th><td>{e(span_text(now - approval.created))} ago</td></tr></table>"
        "<h2>What changed</h2><p class=muted>- as reviewed, + as the server gives it now. "
        "Approving pins the new definition on the gateway's machine (bundlectl.local.yaml); "
        "<code>bundlectl pins update</code> records it for review.</p>"
        f"<pre id=change>{diff}</pre>{forms}"
    )
    script = _DETAIL_SCRIPT.replace("ID", json.dumps(approval.id))
    return page(f"{b.qualified} changed", body, script)


_LINE_CLASS = {"-": "denied", "+": "approved"}


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


def document(body: str, title: str) -> str:
    """A page on its own (`audit summary --html`): the approvers' page's style, no script."""
    return (
        f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{html.escape(title)}"
        f"</title><style>{STYLE}</style></head><body>{body}</body></html>"
    )
