"""Close-name suggestions over many names."""

from __future__ import annotations

import difflib

from bundlectl.suggest import Suggester

VERBS = ["get", "list", "create", "update", "delete", "search", "run", "read", "write", "sync"]
NOUNS = ["issue", "file", "page", "user", "repo", "job", "metric", "secret", "branch", "team"]
NAMES = [f"{v}_{n}{i}" for v in VERBS for n in NOUNS for i in range(5)]  # 500 names


def test_typos_find_the_name_difflib_would() -> None:
    index = Suggester(NAMES)
    for typo in ["get_isue3", "craete_file0", "serch_team4", "delete_secrt1", "updte_job2"]:
        assert index.closest(typo) == difflib.get_close_matches(typo, NAMES, n=1), typo
    # Five names tie; the first in name order is shown (difflib shows the last).
    assert index.closest("list_repo") == ["list_repo0"]
    assert index.closest("list_repo", n=5) == [f"list_repo{i}" for i in range(5)]


def test_nothing_close_means_no_suggestion() -> None:
    assert Suggester(NAMES).closest("zzzzzz") == []
    assert Suggester([]).closest("anything") == []


def test_few_names_are_compared_directly() -> None:
    assert Suggester(["read_file", "write_file"]).closest("reed_file") == ["read_file"]


def test_the_trigram_shortlist_keeps_the_best_of_thousands() -> None:
    """Over more names than are scored one by one, the answer is still the best of all of them."""
    import random

    from rapidfuzz import fuzz

    many = [f"{n}_{v}_{i}" for v in VERBS for n in NOUNS for i in range(30)]  # 3,000 names
    index = Suggester(many)
    chooser = random.Random(5)
    for _ in range(200):
        name = chooser.choice(many)
        cut = chooser.randrange(len(name))
        typo = name[:cut] + name[cut + 1 :]
        best = max(fuzz.ratio(typo, other) for other in many)
        found = index.closest(typo)
        assert found and fuzz.ratio(typo, found[0]) == best, (typo, found)
