"""Who denied what, as the activity page, `audit summary --html` and `/metrics` say it (#56,
silent wrong answer 3): a listed agent's denial names its rule, or that no rule of the agent
grants the tool — `policy.default` only for an agent that is not listed, as `policy explain`
says; requests that failed authentication are their own kind, not a policy denial."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bundlectl.calls import auditfile
from bundlectl.calls.activity import UNAUTHENTICATED, counted, rendered
from bundlectl.calls.audit import AuditLog
from bundlectl.calls.pipeline import Pipeline
from bundlectl.config.project import load_project
from bundlectl.errors import PolicyDenied
from bundlectl.resolve.resolved import resolve_project
from tests.conftest import admitted, write


def test_each_denial_is_credited_to_what_decided_it(project: Path) -> None:
    write(
        project / "bundlectl.yaml",
        """
        version: 1
        bundles: [basic]
        agents:
          reader:
            allow: [files.read_file]
            deny: [files.write_file]
        policy: {default: deny}
        """,
    )
    resolution = resolve_project(load_project())
    audit = AuditLog(resolution, via="serve")
    pipeline = Pipeline(resolution, audit, None)
    for agent, tool in (
        ("reader", "write_file"),  # its deny rule
        ("reader", "list_directory"),  # no rule of it grants the tool
        ("stranger", "read_file"),  # not listed: policy.default
    ):
        with pytest.raises(PolicyDenied):
            admitted(pipeline, agent, "files", tool)
    audit.unauthorized("127.0.0.1")
    records = [json.loads(line) for line in auditfile.log_path().read_text().splitlines()]
    assert records[-1]["outcome"] == "unauthorized" and "unlisted" not in records[0]
    assert records[2]["unlisted"] is True  # the stranger's record says so
    activity = counted(records)
    assert dict(activity.denied) == {
        ("files.write_file", "files.write_file"): 1,
        ("files.list_directory", "no rule of agent 'reader' grants it"): 1,
        ("files.read_file", "policy.default"): 1,
    }
    (counts,) = activity.days[UNAUTHENTICATED].values()
    assert counts == {"unauthenticated": 1}
    assert "-" not in activity.days  # no agent named "-"
    page = rendered(activity)
    assert "no rule of agent &#x27;reader&#x27; grants it" in page
    assert "1 unauthenticated" in page
