"""What the tools tell the model (#60): the description rules on a labelled corpus written for
this project (precision and recall reported, and held at 0.9), and lint's `--strict`."""

from __future__ import annotations

from pathlib import Path

from ruamel.yaml import YAML

from bundlectl.policy.descriptions import scan_tool
from tests.conftest import REPO, Run

CORPUS = REPO / "tests" / "examples" / "descriptions" / "corpus.yaml"
OTHERS = ["mail.send_email", "send_email", "repos.delete_repository", "delete_repository"]


def _flagged(text: str) -> bool:
    """Flagged as a reviewer would be told: a warning or an error (links alone are info)."""
    return any(hit.rule != "BCL605" for hit in scan_tool("tool", text, None, OTHERS))


def test_the_corpus_is_told_apart_with_precision_and_recall_of_at_least_0_9() -> None:
    corpus = YAML(typ="safe", pure=True).load(CORPUS.read_text(encoding="utf-8"))
    hostile, benign = corpus["hostile"], corpus["benign"]
    assert len(hostile) + len(benign) >= 60 and len(hostile) >= 30
    caught = sum(_flagged(text) for text in hostile)
    false_alarms = [text for text in benign if _flagged(text)]
    precision = caught / (caught + len(false_alarms))
    recall = caught / len(hostile)
    print(f"descriptions corpus: precision {precision:.2f}, recall {recall:.2f}")
    assert precision >= 0.9 and recall >= 0.9, (precision, recall, false_alarms)


def test_strict_makes_every_warning_an_error(project: Path, run: Run) -> None:
    example = REPO / "tests" / "examples" / "bcl601-602-603-604-605-606-descriptions"
    (project / "bundlectl.yaml").write_text(
        (example / "bundlectl.yaml").read_text(encoding="utf-8"), encoding="utf-8"
    )
    warned = run("lint", "--select", "BCL603,BCL604,BCL606")
    assert warned.code == 0 and " warning " in warned.out
    strict = run("lint", "--select", "BCL603,BCL604,BCL606", "--strict")
    assert strict.code == 1 and " warning " not in strict.out
    assert "0 warnings" in strict.out and "BCL603 error" in strict.out
