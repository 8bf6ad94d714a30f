"""What a server's launch may not carry: a package name or version a launcher reads as one of its
own options, a launcher option that runs a command, a variable that loads code into the server,
and container options that widen what a container may reach (#52 item 4).

The same checks judge a `server.json` before `import server-json` writes anything (a hostile
one is refused) and every server of a project (`lint`: BCL404-BCL406). No I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bundlectl.config.urls import url_problem

# Each registry type's package identifier, by its own grammar.
IDENTIFIERS: dict[str, re.Pattern[str]] = {
    # npm's validate-npm-package-name: lower case, an optional @scope/, no leading . or _
    "npm": re.compile(r"^(@[a-z0-9~-][a-z0-9._~-]*/)?[a-z0-9~-][a-z0-9._~-]*$"),
    # PEP 508 / PEP 503 distribution names
    "pypi": re.compile(r"^([A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9])$"),
    # OCI references: [registry[:port]/]path[:tag][@digest]
    "oci": re.compile(
        r"^([a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]+)?/)?"
        r"[a-z0-9]+([._-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)*"
        r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[0-9a-f]{64})?$"
    ),
    # NuGet package ids
    "nuget": re.compile(r"^[A-Za-z0-9_]+([.-][A-Za-z0-9_]+)*$"),
}
# A version as the registries write them (semver, PEP 440, tags): never an option.
_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+_~!-]*$")

# Launcher options that run a command or a script of their own choosing (npx's `--call`, a
# shell, node's options) or take packages from elsewhere.
LAUNCHER_OPTIONS: dict[str, frozenset[str]] = {
    "npx": frozenset(
        {"-c", "--call", "--shell", "--script-shell", "--node-options", "--userconfig"}
    ),
    "uvx": frozenset({"--with", "--with-requirements", "--from", "--index-url", "--python"}),
}

# Environment variables that make a program load code it was not given: the dynamic linker's,
# the interpreters' start-up hooks and option variables.
CODE_LOADING = frozenset(
    {
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "LD_AUDIT",
        "NODE_OPTIONS",
        "NODE_PATH",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "PYTHONHOME",
        "PYTHONUSERBASE",
        "BASH_ENV",
        "ENV",
        "ZDOTDIR",
        "PERL5OPT",
        "PERL5LIB",
        "PERLLIB",
        "RUBYOPT",
        "RUBYLIB",
        "JAVA_TOOL_OPTIONS",
        "_JAVA_OPTIONS",
        "JDK_JAVA_OPTIONS",
        "CLASSPATH",
        "GIT_SSH_COMMAND",
        "GIT_EXEC_PATH",
        "PROMPT_COMMAND",
    }
)
_CODE_LOADING_PREFIXES = ("DYLD_", "NPM_CONFIG_", "UV_", "PIP_")


def loads_code(variable: str) -> bool:
    """Whether setting `variable` can make a program load or run other code."""
    upper = variable.upper()
    return upper in CODE_LOADING or upper.startswith(_CODE_LOADING_PREFIXES)


def identifier_problem(kind: str, identifier: str) -> str | None:
    """Why a package identifier of registry type `kind` is refused (None: it is fine)."""
    if not identifier:
        return "is empty"
    if identifier.startswith("-"):
        return "starts with '-': a launcher would read it as one of its options"
    if kind == "mcpb":
        why = url_problem(identifier)
        if why is None and not identifier.startswith("https://"):
            why = "is not an https:// URL"
        return why
    grammar = IDENTIFIERS.get(kind)
    if grammar is not None and (len(identifier) > 214 or not grammar.match(identifier)):
        return f"is not a package name of {kind}"
    return None


def version_problem(version: str) -> str | None:
    """Why a package version is refused (None: it is fine)."""
    if version.startswith("-"):
        return "starts with '-': a launcher would read it as one of its options"
    if not _VERSION.match(version):
        return "is not a version"
    return None


@dataclass(frozen=True)
class Widening:
    """A `docker run` option that widens what the container reaches."""

    index: int  # of the option in the arguments
    why: str


# `docker run`'s options that take no value; every other option takes one (its arity).
_DOCKER_FLAGS = frozenset(
    {
        "--rm",
        "--init",
        "--privileged",
        "--read-only",
        "--interactive",
        "--tty",
        "--detach",
        "--publish-all",
        "--no-healthcheck",
        "--oom-kill-disable",
        "--disable-content-trust",
        "--help",
        "--quiet",
        "--use-api-socket",
    }
)
_DOCKER_SHORT_FLAGS = frozenset("itdPq")
_HOST_NAMESPACES = {"--pid", "--network", "--net", "--ipc", "--uts", "--userns", "--cgroupns"}
_HOME = re.compile(r"^(~|\$HOME|\$\{HOME\}|/home(/[^/]+)?|/root|/Users(/[^/]+)?)/?$")


def docker_run(args: list[str]) -> tuple[int | None, list[Widening]]:
    """`docker run [OPTIONS] IMAGE ...` read by each option's arity: the index of the image
    (None: no `run`, or no image), and the options that widen access — `--privileged`,
    `--cap-add`, `--device`, a host namespace (`--pid host`, `--network host`, ...), an
    unconfined security profile, a bind of `/`, of the home folder or of docker's socket."""
    try:
        index = args.index("run") + 1
    except ValueError:
        return None, []
    found: list[Widening] = []
    while index < len(args):
        arg = args[index]
        if arg == "--":
            index += 1
            break
        if not arg.startswith("-") or arg == "-":
            return index, found
        if arg.startswith("--"):
            name, eq, attached = arg.partition("=")
            takes = not eq and name not in _DOCKER_FLAGS
        else:  # -it, -e VALUE, -eVALUE, -e=VALUE, -itv VALUE
            letters = arg[1:]
            k = 0
            while k < len(letters) and letters[k] in _DOCKER_SHORT_FLAGS:
                k += 1
            if k == len(letters):
                name, attached, takes = arg, "", False
            else:
                rest = letters[k + 1 :]
                name, attached, takes = "-" + letters[k], rest.removeprefix("="), not rest
        value = args[index + 1] if takes and index + 1 < len(args) else attached
        why = _widens(name, value)
        if why is not None:
            found.append(Widening(index, why))
        index += 2 if takes else 1
    return (index if index < len(args) else None), found


def _widens(option: str, value: str) -> str | None:
    if option == "--privileged":
        return "--privileged gives the container every capability and device of the host"
    if option == "--cap-add":
        return f"--cap-add {value} gives the container a capability of the host"
    if option == "--device":
        return f"--device {value} gives the container a device of the host"
    if option in _HOST_NAMESPACES and value.split(":", 1)[0] == "host":
        return f"{option} host shares the host's {option.strip('-')} namespace"
    if option == "--security-opt" and value.replace(":", "=").split("=", 1)[-1] in (
        "unconfined",
        "disable",
    ):
        return f"--security-opt {value} turns a protection of the container off"
    if option in ("-v", "--volume"):
        source = value.split(":", 1)[0]
        return _bound(source)
    if option == "--mount":
        fields = {key: text for key, _, text in (part.partition("=") for part in value.split(","))}
        source = fields.get("source") or fields.get("src") or ""
        if fields.get("type", "volume") == "bind":
            return _bound(source)
    return None


def _bound(source: str) -> str | None:
    if source.rstrip("/") in ("", "/") and source.startswith("/"):
        return "binds the host's whole file system (/) into the container"
    if _HOME.match(source):
        return f"binds the home folder ({source}) into the container"
    if source.endswith("docker.sock"):
        return "binds docker's socket: the container could start any container on the host"
    return None
