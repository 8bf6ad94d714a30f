"""The lock is written by hand: it must parse back to exactly the same model."""

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from bundlectl.config.lockfile import dump_lock, read_lock
from bundlectl.config.models import LockedBundle, LockedServer, LockFile
from tests.conftest import Run

names = st.text(min_size=1, max_size=12).filter(lambda s: s.strip() == s and "\x00" not in s)
awkward = st.one_of(
    names,
    st.sampled_from(
        [
            "yes",
            "no",
            "on",
            "null",
            "1.10",
            "a.b/c",
            "x: y",
            '"q"',
            "#c",
            "-dash",
            "ünï",
            "true",
            "~",
        ]
    ),
)


@settings(max_examples=60, deadline=None)
@given(
    tools=st.dictionaries(awkward, awkward, max_size=5),
    requires=st.lists(awkward, max_size=3),
    version=awkward,
)
def test_lock_round_trips(
    tmp_path_factory: object, tools: dict[str, str], requires: list[str], version: str
) -> None:
    lock = LockFile(
        format_version=1,
        inputs_digest="sha256:" + "0" * 64,
        bundles={
            "b": LockedBundle(version=version, source="./reg", digest="sha256:1", requires=requires)
        },
        servers={"s": LockedServer(bundle=None, transport="stdio", digest="sha256:2", tools=tools)},
    )
    folder = Path(tmp_path_factory.mktemp("lock"))  # type: ignore[attr-defined]
    path = folder / "bundlectl.lock"
    path.write_text(dump_lock(lock), encoding="utf-8")
    assert read_lock(path, "bundlectl.lock") == lock


def _policy_digest(project_dir: Path, text: str) -> tuple[str | None, dict[str, str]]:
    from bundlectl.config.project import project_from_text
    from bundlectl.resolve.resolved import resolve_project

    lock = resolve_project(project_from_text(project_dir / "bundlectl.yaml", text)).lock
    return lock.policy_digest, lock.agents


BASE = """\
version: 1
bundles: [basic]
agents:
  reader: {allow: [files.read_file, files.list_directory]}
  writer: {extends: [reader], ask: [files.write_file]}
policy: {default: deny, deny: ["*.delete_*"]}
"""


def test_policy_digest_ignores_form_and_follows_meaning(project: Path) -> None:
    digest, agents = _policy_digest(project, BASE)
    same = """\
# a comment
version: 1
policy: {deny: ["*.delete_*"], default: deny}
bundles: [basic]
agents:
  writer:
    ask: [files.write_file]   # moved, reformatted
    extends: [reader]
  reader:
    allow: [files.list_directory, files.read_file, files.read_file]
"""
    assert _policy_digest(project, same) == (digest, agents)
    wider, wider_agents = _policy_digest(project, BASE.replace("files.list_directory", "files.*"))
    assert wider != digest
    # The change reaches the agent that extends reader, and nobody else.
    assert {a for a in agents if agents[a] != wider_agents[a]} == {"reader", "writer"}
    stricter, stricter_agents = _policy_digest(
        project, BASE.replace("default: deny", "default: allow")
    )
    assert stricter != digest and stricter_agents == agents


def test_concurrency_and_watch_are_not_part_of_the_lock(project: Path, run: Run) -> None:
    """How many calls `serve` runs at once, and when it restarts a server, are scheduling, not
    what resolved: setting them keeps the lock fresh (and a lock written before the settings
    existed stays fresh)."""
    config = project / "bundlectl.yaml"
    config.write_text("version: 1\nservers:\n  s: {command: srv}\n")
    assert run("lock").code == 0
    config.write_text("version: 1\nservers:\n  s: {command: srv, concurrency: 4, watch: [src]}\n")
    assert run("lock", "--check").code == 0
    config.write_text("version: 1\nservers:\n  s: {command: other}\n")
    assert run("lock", "--check").code == 1


IDENTITY_CONFIG = """version: 1
bundles: [basic]
agents:
  deployer:
    match: {groups: [deployers], email: "*@acme.example"}
    allow: [files.read_file]
  ci-bot:
    token: "${CI_TOKEN}"
    allow: [files.read_file]
gateway:
  auth:
    issuers: [{issuer: "https://id.acme.example", audience: [bundlectl]}]
policy: {default: deny}
"""


def test_who_may_act_as_an_agent_is_part_of_the_policy(project: Path, run: Run) -> None:
    """#54 item 3: a PR that made every SSO user a deployer (`groups: ["*"]`), or changed
    gateway.auth or a token's reference, left lint clean, the lock "up to date" and the policy
    digest the same."""
    config = project / "bundlectl.yaml"
    config.write_text(IDENTITY_CONFIG)
    assert run("lock").code == 0
    lock = (project / "bundlectl.lock").read_text()
    assert "identities:" in lock and "CI_TOKEN" not in lock  # digests, never a reference
    for old, new, said in [
        ("groups: [deployers]", 'groups: ["*"]', "who may act as deployer changed"),
        ("${CI_TOKEN}", "${OTHER_TOKEN}", "who may act as ci-bot changed"),
        ("audience: [bundlectl]", "audience: [bundlectl, other]", "gateway.auth changed"),
    ]:
        config.write_text(IDENTITY_CONFIG.replace(old, new))
        stale = run("lock", "--check")
        assert stale.code == 1 and said in stale.out + stale.err, (old, stale.out + stale.err)
    config.write_text(IDENTITY_CONFIG)
    assert run("lock", "--check").code == 0
    assert (project / "bundlectl.lock").read_text() == lock
    # A project without identities keeps the lock it always had: no `identities:` key.
    config.write_text("version: 1\nbundles: [basic]\nagents: {r: {allow: [files.read_file]}}\n")
    assert run("lock").code == 0 and "identities" not in (project / "bundlectl.lock").read_text()
