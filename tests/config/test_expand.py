"""`${VAR}` references: expansion when a server starts, and malformed references."""

from __future__ import annotations

import pytest

from bundlectl.config.expand import child_environment, expand, malformed_reference
from bundlectl.errors import UsageError


def test_a_tilde_in_a_default_is_the_home_folder() -> None:
    environ = {"HOME": "/home/ada"}
    assert expand("${KUBECONFIG:-~/.kube/config}", environ, where="x") == "/home/ada/.kube/config"
    assert expand("${K:-~}", environ, where="x") == "/home/ada"
    assert expand("${K:-a~/b}", environ, where="x") == "a~/b"
    set_value = {**environ, "KUBECONFIG": "~/mine"}  # a value that is set is passed as it is
    assert expand("${KUBECONFIG:-~/.kube/config}", set_value, where="x") == "~/mine"


def test_an_unset_variable_without_default_names_itself() -> None:
    with pytest.raises(UsageError) as caught:
        expand("--token=${TOKEN}", {}, where="server 'api'")
    assert caught.value.message == (
        "server 'api' needs the environment variable TOKEN, which is not set"
    )


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("${HOME} and ${X:-y} and $PATH and $", None),
        ("--token=${UNTERMINATED", "'${UNTERMINATED' has no closing '}'"),
        ("${}", "'${}' is not a well-formed reference"),
        ("a ${1X} b", "'${1X}' is not a well-formed reference"),
        ("${OK} ${bad name}", "'${bad name}' is not a well-formed reference"),
    ],
)
def test_malformed_references(text: str, problem: str | None) -> None:
    assert malformed_reference(text) == problem


def test_child_environment_is_the_basics_plus_the_configured_env() -> None:
    environ = {"PATH": "/bin", "HOME": "/h", "SECRET": "s", "TOKEN": "t"}
    env = child_environment({"API_TOKEN": "${TOKEN}"}, environ, server="api")
    assert env == {"PATH": "/bin", "HOME": "/h", "API_TOKEN": "t"}
