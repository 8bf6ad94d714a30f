"""Close-name suggestions over many names."""

from __future__ import annotations

import difflib

from bundlectl.suggest import Suggester

VERBS = ["get", "list", "create", "update", "delete", "search", "run", "read", "write", "sync"]
NOUNS = ["issue", "file", "page", "user", "repo", "job", "metric", "secret", "branch", "team"]
NAMES = [f"{v}_{n}{i}" for v in VERBS for n in NOUNS for i in range(5)]  # 500 names


def test_typos_find_the_name_difflib_would() -> None:
    index = Suggester(NAMES)
    for typo in ["get_isue3", "craete_file0", "list_repo", "serch_team4", "delete_secrt1"]:
        assert index.closest(typo) == difflib.get_close_matches(typo, NAMES, n=1), typo


def test_nothing_close_means_no_suggestion() -> None:
    assert Suggester(NAMES).closest("zzzzzz") == []
    assert Suggester([]).closest("anything") == []


def test_few_names_are_compared_directly() -> None:
    assert Suggester(["read_file", "write_file"]).closest("reed_file") == ["read_file"]
