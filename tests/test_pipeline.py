"""The call pipeline's policy side, through its interfaces (a confirmer, an audit sink)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bundlectl.errors import PolicyDenied, UsageError
from bundlectl.executor.pipeline import Pipeline, always_yes, default_agent
from bundlectl.policy import Decision
from bundlectl.project import load_project
from bundlectl.resolution import resolve_project
from tests.conftest import write


class Recorded:
    """An audit sink that keeps what it is given (the protocol's second implementation)."""

    def __init__(self) -> None:
        self.records: list[tuple[str, str, str]] = []

    def record(self, decision: Decision, outcome: str, duration_ms: float, arguments: Any) -> None:
        self.records.append((decision.agent, decision.qualified, outcome))


@pytest.fixture
def resolution(project: Path) -> Any:
    write(
        project / "bundlectl.yaml",
        """
        version: 1
        bundles: [basic]
        servers:
          off: {command: x, disabled: true}
        agents:
          writer: {allow: [files.read_file], ask: [files.write_file]}
        policy: {default: deny}
        """,
    )
    return resolve_project(load_project())


def test_denials_are_audited_and_raised(resolution: Any) -> None:
    sink = Recorded()
    pipeline = Pipeline(resolution, sink, confirm=None)
    assert pipeline.decide("writer", "files", "read_file").effect == "allow"
    with pytest.raises(PolicyDenied):
        pipeline.decide("stranger", "files", "read_file")
    with pytest.raises(PolicyDenied, match="no one can confirm"):
        pipeline.decide("writer", "files", "write_file")  # ask, and no one to ask
    assert sink.records == [
        ("stranger", "files.read_file", "denied"),
        ("writer", "files.write_file", "denied"),
    ]


@pytest.mark.parametrize(("answer", "outcome"), [(True, None), (False, "denied-by-user")])
def test_ask_goes_to_the_confirmer(resolution: Any, answer: bool, outcome: str | None) -> None:
    sink = Recorded()
    asked: list[str] = []

    def confirm(decision: Decision) -> bool:
        asked.append(decision.qualified)
        return answer

    pipeline = Pipeline(resolution, sink, confirm)
    if answer:
        assert pipeline.decide("writer", "files", "write_file").effect == "ask"
    else:
        with pytest.raises(PolicyDenied, match="was not confirmed"):
            pipeline.decide("writer", "files", "write_file")
    assert asked == ["files.write_file"]
    assert sink.records == ([] if outcome is None else [("writer", "files.write_file", outcome)])
    assert Pipeline(resolution, sink, always_yes).decide("writer", "files", "write_file")


def test_targets(resolution: Any) -> None:
    pipeline = Pipeline(resolution, Recorded(), None)
    assert pipeline.target("files").builtin == "files"
    with pytest.raises(UsageError, match="disabled"):
        pipeline.target("off")
    with pytest.raises(UsageError, match="no server 'nope'"):
        pipeline.target("nope")
    assert (default_agent("given"), default_agent(None)) == ("given", "default")
