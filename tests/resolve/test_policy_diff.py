"""`bundlectl policy diff` (#59): what a change does to who may do what, against a git revision or
another project — checked against a fresh resolve of each side decided tool by tool."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bundlectl.config.project import load_project
from bundlectl.config.yamlio import parse_yaml
from bundlectl.resolve.diff import compare
from bundlectl.resolve.resolved import Resolution, resolve_project
from tests.conftest import REPO, Run, write

# Generated policies through code other tests cover line by line (see test_policy_properties).
pytestmark = pytest.mark.no_cover

TOOLS = {"files": ["read", "write", "delete"], "gh": ["get_issue", "delete_repo"]}
AGENTS = ["ana", "bot", "ci"]
PATTERNS = ["files.*", "files.read", "files.write", "gh.*", "gh.get_*", "*.delete*", "*"]


def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


@st.composite
def configs(draw: st.DrawFn, conditions: bool = True) -> str:
    """A project: two servers with a drawn catalog, agents with drawn rules (some asked out of
    band, some with argument conditions, some inherited), a default and global denies."""
    servers = []
    for server, names in TOOLS.items():
        kept = draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
        tools = ", ".join(f"{{name: {n}}}" for n in kept)
        servers.append(f"  {server}: {{command: x, tools: [{tools}]}}")
    agents = []
    listed: list[str] = []
    for agent in draw(st.lists(st.sampled_from(AGENTS), unique=True)):
        agents.append(f"  {agent}:")
        agents.append(f"    description: {agent}")
        if listed and draw(st.booleans()):  # inherits from one listed before it
            agents.append(f"    extends: [{draw(st.sampled_from(listed))}]")
        listed.append(agent)
        for effect in ("allow", "ask", "deny"):
            rules = []
            for pattern in draw(st.lists(st.sampled_from(PATTERNS), max_size=2, unique=True)):
                shape = draw(st.sampled_from(["plain", "oob", "two", "condition"]))
                if shape == "oob" and effect == "ask":
                    rules.append(f'{{tool: "{pattern}", approve: out-of-band}}')
                elif shape == "two" and effect == "ask":
                    rules.append(f'{{tool: "{pattern}", approve: out-of-band, approvals: 2}}')
                elif shape == "condition" and conditions and "*" not in pattern.split(".")[0]:
                    rules.append(f'{{tool: "{pattern}", args: {{path: {{path: "docs/**"}}}}}}')
                else:
                    rules.append(f'"{pattern}"')
            if rules:
                agents.append(f"    {effect}: [{', '.join(rules)}]")
    default = draw(st.sampled_from(["allow", "deny"]))
    deny = draw(st.lists(st.sampled_from(PATTERNS[:6]), max_size=1))
    return (
        "version: 1\nservers:\n"
        + "\n".join(servers)
        + ("\nagents:\n" + "\n".join(agents) if agents else "")
        + f"\npolicy:\n  default: {default}\n  deny: {json.dumps(deny)}\n"
        + "  approvals: {ttl: 10m}\n"
    )


def _resolved(folder: Path, text: str) -> Resolution:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "bundlectl.yaml").write_text(text)
    return resolve_project(load_project(folder / "bundlectl.yaml"))


def _reference(side: Resolution, agent: str, server: str, tool: str) -> tuple[str, tuple[str, ...]]:
    """What one side gives, decided on its own: the effect (who approves an ask) and the rules
    with conditions that name the tool."""
    if (server, tool) not in side.catalog.index:
        return "deny", ()  # not there: nobody can call it
    compiled = side.policy.agent(agent)
    decision = compiled.decide(server, tool, interactive=True)
    effect = decision.matched_effect
    rule = decision.rule
    if effect == "ask" and rule is not None and rule.by_approver:
        effect += f" oob {rule.approvals}"
    return effect, tuple(r.label for r in compiled.conditional_matching(server, tool))


def _all_tools(text: str) -> str:
    """The same project whose servers now have every tool (the same rules, a new catalog: a
    new bundle version under existing wildcards)."""
    lines = []
    for line in text.splitlines():
        kept = line
        for server, names in TOOLS.items():
            if line.startswith(f"  {server}: "):
                tools = ", ".join(f"{{name: {n}}}" for n in names)
                kept = f"  {server}: {{command: x, tools: [{tools}]}}"
        lines.append(kept)
    return "\n".join(lines) + "\n"


def _reapproved(text: str) -> str:
    """The same project whose ask rules are approved otherwise: at the terminal where they
    were out of band, out of band (by one person) where they were not — the same tools asked,
    by rules that differ."""
    data = parse_yaml(text, "bundlectl.yaml").data
    for rules in (data.get("agents") or {}).values():
        asked = []
        for rule in rules.get("ask", []):
            if isinstance(rule, str):
                asked.append({"tool": rule, "approve": "out-of-band"})
            elif "args" in rule:
                asked.append(rule)
            elif rule.get("approvals", 1) > 1:
                asked.append({"tool": rule["tool"], "approve": "out-of-band"})
            else:
                asked.append(rule["tool"])
        if asked:
            rules["ask"] = asked
    return json.dumps(data)


@settings(max_examples=100, deadline=None)
@given(configs(), configs(), st.sampled_from(["drawn", "new catalog", "reapproved"]))
def test_the_diff_is_every_cell_where_the_two_sides_decide_differently(
    before_text: str, after_text: str, after_is: str
) -> None:
    if after_is == "new catalog":  # the same rules
        after_text = _all_tools(before_text)
    elif after_is == "reapproved":  # the same tools asked, by other rules
        after_text = _reapproved(before_text)
    with tempfile.TemporaryDirectory() as scratch:
        before = _resolved(Path(scratch) / "before", before_text)
        after = _resolved(Path(scratch) / "after", after_text)
        found = compare(before, after)
        reported = {(c.agent, tool) for c in found.tools for tool in c.tools}
        expected = set()
        tools = {(t.server, t.tool) for t in (*before.catalog.tools, *after.catalog.tools)}
        for agent in sorted(set(before.policy.agents) | set(after.policy.agents)):
            for server, tool in sorted(tools):
                if _reference(before, agent, server, tool) != _reference(
                    after, agent, server, tool
                ):
                    expected.add((agent, f"{server}.{tool}"))
        assert reported == expected
        for change in found.tools:  # widened means more without a person, never less
            rank = {"deny": 0, "absent": 0, "allow": 3, "ask": 2}
            old, new = change.before.effect, change.after.effect
            if (
                old in rank
                and new in rank
                and not (change.before.conditions or change.after.conditions)
            ):
                assert (change.kind == "widened") == (rank[new] > rank[old]), change
        assert compare(after, after).tools == []


@pytest.fixture
def repo(project: Path) -> Path:
    """The example team project, committed: the base of every change below."""
    for name in ("bundlectl.yaml", "bundlectl.lock"):
        shutil.copy(REPO / "examples" / "team" / name, project / name)
    _git(project, "init", "-q", "-b", "main")
    _git(project, "add", "-A")
    _git(project, "commit", "-qm", "base")
    return project


def _edit(project: Path, old: str, new: str) -> None:
    path = project / "bundlectl.yaml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_a_widened_grant_is_shown_with_its_rule_on_both_sides_and_exits_1(
    repo: Path, run: Run
) -> None:
    # Nothing changed: exit 0.
    same = run("policy", "diff")
    assert same.code == 0 and "no change in who may do what" in same.out, same.err
    # A comment and a reordered list change nothing either.
    _edit(
        repo, "deny: [git.git_reset, git.git_commit]", "deny: [git.git_commit, git.git_reset]  # x"
    )
    assert run("policy", "diff", "main").code == 0
    _edit(repo, "deny: [git.git_commit, git.git_reset]", "deny: [git.git_reset]")
    _edit(repo, "    ask: [files.write_file]\n", "    ask: [files.write_file, git.git_commit]\n")
    _edit(repo, "default: deny", "default: deny\n  sandbox: off")  # absent is on
    pin = "sha256:" + "a" * 64  # a reviewed definition of a changed tool (#60)
    _edit(repo, "default: deny", f"default: deny\n  pins: {{git.git_log: '{pin}'}}")
    done = run("policy", "diff", "HEAD")
    assert done.code == 1, done.err
    assert f"+ policy.pins git.git_log: (none) → {pin}" in done.out, done.out
    assert "agent author:\n  + git.git_commit: deny → ask" in done.out
    assert "now:    agents.author.ask: git.git_commit (bundlectl.yaml:13:" in done.out
    assert "before: policy.deny: git.git_commit (HEAD:bundlectl.yaml:16:" in done.out
    assert "+ policy.sandbox: on → off" in done.out
    # The reviewer, who does not ask, gains nothing: deny stays deny without the global deny.
    assert "agent reviewer" not in done.out
    listed = json.loads(run("policy", "diff", "HEAD", "--format", "json").out)
    assert listed["counts"]["widened"] == 1 and listed["changed"] is True
    [change] = listed["tools"]
    assert (change["agent"], change["tools"], change["kind"]) == (
        "author",
        ["git.git_commit"],
        "widened",
    )
    assert change["before"]["where"].startswith("HEAD:bundlectl.yaml:16:")
    sarif = json.loads(run("policy", "diff", "HEAD", "--format", "sarif").out)
    [result] = sarif["runs"][0]["results"]
    region = result["locations"][0]["physicalLocation"]
    assert (
        region["artifactLocation"]["uri"] == "bundlectl.yaml"
        and region["region"]["startLine"] == 13
    )


def test_tools_a_server_brings_under_an_existing_wildcard_and_who_may_act(
    project: Path, run: Run, tmp_path: Path
) -> None:
    base = tmp_path / "base"
    base.mkdir()
    config = """
    version: 1
    servers:
      gh: {command: x, tools: [{name: get_issue}, {name: delete_repo}]}
    agents:
      triage:
        match: {groups: [triagers]}
        allow: ["gh.get_*"]
        ask: [{tool: gh.delete_repo, approve: out-of-band, approvals: 2}]
    gateway:
      auth:
        issuers: [{issuer: "https://id.acme.example", audience: [bundlectl]}]
    policy: {default: deny, approvals: {ttl: 10m}}
    """
    write(base / "bundlectl.yaml", config)
    write(
        project / "bundlectl.yaml",
        config.replace("{name: delete_repo}]", "{name: delete_repo}, {name: get_secret}]")
        .replace("groups: [triagers]", 'groups: ["*"]')
        .replace("approvals: 2}", "approvals: 1}"),
    )
    done = run("policy", "diff", str(base))
    assert done.code == 1, done.err
    assert "+ gh.get_secret: not in the catalog → allow" in done.out
    # One approver where two were needed is a widening, told as it is written.
    assert "+ gh.delete_repo: ask (out of band, 2 people) → ask (out of band)" in done.out
    assert (
        '+ who may act as \'triage\': match: {"groups": ["triagers"]} → match: {"groups": ["*"]}'
        in done.out
    )
    markdown = run("policy", "diff", str(base), "--format", "markdown").out
    golden = Path(__file__).parent / "golden" / "policy-diff.md"
    assert markdown.replace(str(base), "BASE") == golden.read_text()


def test_a_rule_written_to_hide_itself_reads_as_written_in_the_comment(
    project: Path, run: Run, tmp_path: Path
) -> None:
    """The pull request comment (`--format markdown`) is where a reviewer reads what a change
    widens, and its author writes the rules: a condition's value that holds an HTML comment
    (`<!--` hid the rest of the table), an entity (`&#8238;` renders as a right-to-left
    override), a link, a code span or a strikethrough is shown as written. Rendered here by
    CommonMark with GitHub's tables and strikethrough (markdown-it, which rich brings)."""
    from markdown_it import MarkdownIt

    base = tmp_path / "base"
    config = """
    version: 1
    servers:
      fs: {command: x, tools: [{name: read}, {name: write}]}
    agents:
      dev:
        allow: [fs.read]
    policy: {default: deny}
    """
    write(base / "bundlectl.yaml", config)
    hostile = "docs/*.md --> ~~x~~ [ok](https://evil.example) &#8238; `a|b` <!-- "
    write(
        project / "bundlectl.yaml",
        config.replace(
            "allow: [fs.read]",
            f"allow: [fs.read, {{tool: fs.write, args: {{path: {json.dumps(hostile)}}}}}]",
        ),
    )
    markdown = run("policy", "diff", str(base), "--format", "markdown").out
    html = MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(markdown)
    assert "<!--" not in html and "<s>" not in html and "<a " not in html, html
    assert "\u202e" not in html and "&amp;#8238;" in html
    row = next(line for line in html.split("<tr>") if "fs.write" in line)
    assert row.count("<td>") == 6, row  # no cell split off or swallowed
    shown = "docs/*.md --&gt; ~~x~~ [ok](https://evil.example) &amp;#8238; `a|b` &lt;!-- "
    assert f"path &quot;{shown}&quot;" in row


def test_a_base_that_is_neither_a_path_nor_a_revision_is_a_usage_error(
    repo: Path, run: Run
) -> None:
    done = run("policy", "diff", "no-such-branch")
    assert done.code == 2
    assert "BASE 'no-such-branch' is neither a path nor a git revision" in done.err
    # A revision before the project existed: everything it has is new.
    (repo / "sub").mkdir()
    shutil.copy(repo / "bundlectl.yaml", repo / "sub" / "bundlectl.yaml")
    fresh = run("policy", "diff", "main", "--config", str(repo / "sub" / "bundlectl.yaml"))
    assert fresh.code == 1 and "+ review.view_diff: not in the catalog → allow" in fresh.out, (
        fresh.err
    )


def test_a_diff_spread_over_forked_processes_is_the_diff_made_in_one(tmp_path: Path) -> None:
    """The command line compares a large project's agents in several processes (`spread`):
    the same changes, in the same order, as one process finds. Run in a fresh interpreter (the
    test process has xdist's threads, beside which nothing forks), with three shares."""
    agents = []
    for i in range(30):
        parent = f"    extends: [a{i - 3}]\n" if i >= 3 and i % 2 else ""
        grants = ", ".join(f'"{p}"' for p in PATTERNS[i % 4 : i % 4 + 2])
        agents.append(f"  a{i}:\n{parent}    allow: [{grants}]\n    ask: [{PATTERNS[i % 7]!r}]\n")
    servers = "".join(
        f"  {s}: {{command: x, tools: [{', '.join(f'{{name: {n}}}' for n in names)}]}}\n"
        for s, names in TOOLS.items()
    )
    text = f"version: 1\nservers:\n{servers}agents:\n{''.join(agents)}policy:\n  deny: [DENY]\n"
    (tmp_path / "before").mkdir()
    (tmp_path / "after").mkdir()
    (tmp_path / "before" / "bundlectl.yaml").write_text(text.replace("DENY", '"*.delete*"'))
    edited = text.replace("ask: ['gh.*']", "deny: ['files.write']")
    edited = edited.replace("DENY", '"*.delete*", "gh.get_*"')
    (tmp_path / "after" / "bundlectl.yaml").write_text(edited)
    script = f"""
import os
from pathlib import Path
from bundlectl import spread
from bundlectl.config.project import load_project
from bundlectl.config.yamlio import parse_yaml
from bundlectl.resolve.diff import compare
from bundlectl.resolve.resolved import resolve_project

spread.LEAST_PER_SHARE = 1
spread.cores = lambda: 3
before, after = (
    resolve_project(load_project(Path({str(tmp_path)!r}) / side / "bundlectl.yaml"))
    for side in ("before", "after")
)
forks = []
real_fork = os.fork
def counted():
    forks.append(1)
    return real_fork()
os.fork = counted
spread_found = compare(before, after, spread=spread.over_cores)
os.fork = real_fork
alone = compare(before, after)
assert len(forks) == 2, forks
assert spread_found.tools == alone.tools and spread_found.other == alone.other
assert spread_found.agents_compared == alone.agents_compared == 30
print(len(alone.tools), len({{c.agent for c in alone.tools}}))
"""
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    changes, agents_changed = map(int, done.stdout.split())
    assert changes >= agents_changed >= 20  # most agents lose gh.get_issue
