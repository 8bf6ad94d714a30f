"""The resolver against a fake index that is data (tests/data/fake-index.yaml)."""

from pathlib import Path

import pytest
from packaging.version import Version

from bundlectl.config.registry import Registry, Source
from bundlectl.errors import ResolutionError
from bundlectl.resolve.versions import constraint, resolve
from tests.conftest import load_yaml, make_registry

INDEX = load_yaml(Path(__file__).parents[1] / "data" / "fake-index.yaml")


@pytest.fixture
def repo(tmp_path: Path) -> Registry:
    return Registry([Source("fake", make_registry(tmp_path / "fake", INDEX))])


def pins(result: dict[str, Version]) -> dict[str, str]:
    return {name: str(version) for name, version in result.items()}


def solve(repo: Registry, *reqs: str, **kwargs: object) -> dict[str, str]:
    return pins(resolve([constraint(r, "bundlectl.yaml") for r in reqs], repo, **kwargs))  # type: ignore[arg-type]


def test_newest_satisfying_versions(repo: Registry) -> None:
    assert solve(repo, "alpha") == {"alpha": "2.0.0"}
    assert solve(repo, "alpha<2") == {"alpha": "1.1.0"}
    assert solve(repo, "beta") == {"beta": "2.0.0", "alpha": "2.0.0"}


def test_backtracks_when_a_dependency_conflicts(repo: Registry) -> None:
    # gamma 1.5 needs beta 2 → alpha >= 2, which conflicts with alpha<2: back to gamma 1.0.
    assert solve(repo, "alpha<2", "gamma") == {"alpha": "1.1.0", "gamma": "1.0.0", "beta": "1.0.0"}
    # delta pins alpha<1.1 after alpha was chosen: the solver backtracks alpha as well.
    assert solve(repo, "alpha", "delta") == {"alpha": "1.0.0", "delta": "1.0.0"}


def test_conflict_lists_every_constraint_and_who_imposed_it(repo: Registry) -> None:
    with pytest.raises(ResolutionError) as info:
        solve(repo, "alpha>=2", "delta")
    assert info.value.message.splitlines() == [
        "no version of 'alpha' satisfies every constraint:",
        "  alpha>=2 (required by bundlectl.yaml)",
        "  alpha<1.1 (required by delta@1.0.0)",
        "  available: 2.0.0",
    ]
    assert info.value.exit_code == 1


def test_unknown_names_with_suggestions(repo: Registry) -> None:
    with pytest.raises(ResolutionError) as info:
        solve(repo, "alpah")
    assert (
        info.value.message == "no bundle named 'alpah' in any registry (required by bundlectl.yaml)"
    )
    assert info.value.hint == "did you mean alpha?"
    with pytest.raises(ResolutionError) as info:
        solve(repo, "epsilon")
    assert (
        info.value.message
        == "no bundle named 'missing-bundle' in any registry (required by epsilon@1.0.0)"
    )


def test_prefers_pins_unless_upgrading(repo: Registry) -> None:
    locked = {"alpha": Version("1.0.0"), "beta": Version("1.0.0")}
    assert solve(repo, "beta", prefer=locked) == {"beta": "1.0.0", "alpha": "1.0.0"}
    assert solve(repo, "beta", prefer=locked, upgrade={"alpha"}) == {
        "beta": "1.0.0",
        "alpha": "1.1.0",
    }
    assert solve(repo, "beta", prefer=locked, upgrade=set()) == {"beta": "2.0.0", "alpha": "2.0.0"}
    # A pin that no longer satisfies the constraints is dropped.
    assert solve(repo, "alpha>=1.1", prefer=locked) == {"alpha": "2.0.0"}


def test_prereleases_only_when_asked(repo: Registry) -> None:
    assert solve(repo, "pre") == {"pre": "1.0.0"}
    assert solve(repo, "pre>=2.0.0rc1") == {"pre": "2.0.0rc1"}


def test_deterministic(repo: Registry) -> None:
    first = solve(repo, "gamma", "alpha<2", "delta")
    assert all(solve(repo, "gamma", "alpha<2", "delta") == first for _ in range(5))
