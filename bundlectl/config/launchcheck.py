"""What a server's launch may not carry: a package name or version a launcher reads as one of its
own options, a launcher option that runs a command, a variable that loads code into the server,
and container options that widen what a container may reach (#52 item 4).

The same checks judge a `server.json` before `import server-json` writes anything (a hostile
one is refused) and every server of a project (`lint`: BCL404-BCL406). No I/O.
"""

from __future__ import annotations

import posixpath
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
# shell, node's options) or take packages, an index or settings from elsewhere.
LAUNCHER_OPTIONS: dict[str, frozenset[str]] = {
    "npx": frozenset(
        {
            "-c",
            "--call",
            "--shell",
            "--script-shell",
            "--node-options",
            "-p",
            "--package",
            "--registry",
            "--prefix",
            "--userconfig",
            "--globalconfig",
        }
    ),
    "uvx": frozenset(
        {
            "-w",
            "--with",
            "--with-editable",
            "--with-requirements",
            "--from",
            "-i",
            "--index-url",
            "--index",
            "--default-index",
            "--extra-index-url",
            "-f",
            "--find-links",
            "--constraints",
            "--overrides",
            "--build-constraints",
            "-p",
            "--python",
            "--env-file",
            "--config-file",
            "--directory",
            "--project",
        }
    ),
}


# Their options that take no value: a word after any other option may be its value, and the
# package is the first word after one of these (or after an option given as `--name=value`).
_LAUNCHER_FLAGS: dict[str, frozenset[str]] = {
    "npx": frozenset(
        {"-y", "--yes", "--no", "-q", "--quiet", "-s", "--silent", "-d"}
        | {"--ignore-existing", "--no-install", "--prefer-offline", "--prefer-online"}
        | {"--offline", "--verbose", "--foreground-scripts", "--ignore-scripts"}
    ),
    "uvx": frozenset(
        {"-q", "--quiet", "-v", "--verbose", "-n", "--no-cache", "--offline", "--isolated"}
        | {"--no-index", "--no-config", "--no-env-file", "--no-sources", "--refresh"}
        | {"-U", "--upgrade", "--reinstall", "--no-build", "--native-tls", "--no-progress"}
    ),
}


def launcher_option(launcher: str, arg: str) -> str | None:
    """The option of `launcher` in `arg` that runs a command or takes code from elsewhere, if
    any: `--call=...` by its name, `-yc` by each of its letters (npm and uv read a cluster of
    one-letter options as each of them)."""
    options = LAUNCHER_OPTIONS.get(launcher, frozenset())
    name = arg.partition("=")[0]
    if name in options:
        return name
    if arg.startswith("-") and not arg.startswith("--"):
        for letter in arg[1:]:
            if f"-{letter}" in options:
                return f"-{letter}"
            if not letter.isalpha():
                break  # the rest is a value
    return None


def options_taking_code(
    launcher: str, args: list[str], *, package: bool = True
) -> list[tuple[int, str]]:
    """Where `args` (what follows `launcher` on its command line) hold an option that runs a
    command or takes code from elsewhere, and which: (index, option). With `package`, reading
    stops at the package (its own arguments follow); a word after an option not known to take
    no value may be that option's value (`npx --loglevel silent --call ...`), so reading goes
    on past it."""
    found: list[tuple[int, str]] = []
    flags = _LAUNCHER_FLAGS.get(launcher, frozenset())
    valued = False  # the word before was an option that may take this one as its value
    for index, arg in enumerate(args):
        if arg == "--" and package:
            break
        if not arg.startswith("-") or arg == "-":
            if package and not valued:
                break  # the package: what follows is its own
            valued = False
            continue
        option = launcher_option(launcher, arg)
        if option is not None:
            found.append((index, option))
        valued = "=" not in arg and arg not in flags
    return found


# Environment variables that make a program load or run code it was not given, by the program
# that reads them. Matched by name, upper-cased (Windows' names ignore case; npm reads
# `npm_config_*` in either case).
CODE_LOADING = frozenset(
    {
        # which program runs at all
        "PATH",
        # the C library (glibc's character-set modules)
        "GCONV_PATH",
        # Python: module paths, start-up hooks, a bytecode cache elsewhere
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "PYTHONHOME",
        "PYTHONUSERBASE",
        "PYTHONPLATLIBDIR",
        "PYTHONPYCACHEPREFIX",
        "PYTHONBREAKPOINT",
        # Node.js and Electron
        "NODE_OPTIONS",
        "_FORCE_NODE_OPTIONS",
        "NODE_PATH",
        "NODE_REPL_EXTERNAL_MODULE",
        "ELECTRON_RUN_AS_NODE",
        # shells: start-up files, options that run a prompt's commands
        "BASH_ENV",
        "ENV",
        "ZDOTDIR",
        "PROMPT_COMMAND",
        "SHELLOPTS",
        "BASHOPTS",
        "PS4",
        # Perl, Ruby, Lua, PHP
        "PERL5OPT",
        "PERL5LIB",
        "PERLLIB",
        "PERL5DB",
        "RUBYOPT",
        "RUBYLIB",
        "LUA_PATH",
        "LUA_CPATH",
        "PHPRC",
        "PHP_INI_SCAN_DIR",
        # the JVM and .NET (NuGet packages run on it): agents, start-up hooks, profilers
        "JAVA_TOOL_OPTIONS",
        "_JAVA_OPTIONS",
        "JDK_JAVA_OPTIONS",
        "CLASSPATH",
        "DOTNET_STARTUP_HOOKS",
        "DOTNET_ADDITIONAL_DEPS",
        # OpenSSL's configuration loads engines and providers
        "OPENSSL_CONF",
        "OPENSSL_ENGINES",
        "OPENSSL_MODULES",
        # git (the git servers): commands it runs, hooks it copies
        "GIT_SSH",
        "GIT_SSH_COMMAND",
        "GIT_EXEC_PATH",
        "GIT_ASKPASS",
        "SSH_ASKPASS",
        "GIT_EXTERNAL_DIFF",
        "GIT_PAGER",
        "GIT_EDITOR",
        "GIT_SEQUENCE_EDITOR",
        "GIT_PROXY_COMMAND",
        "GIT_TEMPLATE_DIR",
        # commands programs run on their own: an editor, a pager, a browser for a sign-in
        "EDITOR",
        "VISUAL",
        "PAGER",
        "BROWSER",
    }
)
_CODE_LOADING_PREFIXES = (
    "LD_",  # the dynamic linker: LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT, ...
    "DYLD_",  # macOS's
    "BASH_FUNC_",  # functions a bash script would run in place of a command
    "LUA_INIT",  # LUA_INIT, LUA_INIT_5_4: Lua code run at start
    "GIT_CONFIG",  # any git setting (core.fsmonitor, core.sshCommand run commands)
    "CORECLR_",  # .NET's profiler, loaded into the process
    "COR_PROFILER",
    "NPM_CONFIG_",  # npx's settings: its shell, its node options, the registry it installs from
    "UV_",  # uvx's: the index it installs from
    "PIP_",
)


def loads_code(variable: str, value: str | None = None) -> bool:
    """Whether setting `variable` (to `value`, when given) can make a program load or run other
    code. `PYTHONWARNINGS` does only with a warning category in a module (`ignore::pkg.Warning`
    imports `pkg` at start); the plain filters (`ignore`, `default::DeprecationWarning`) do not.
    """
    upper = variable.upper()
    if upper == "PYTHONWARNINGS":
        if value is None:
            return True  # its filters unknown: any may name a module
        categories = ((part.split(":") + [""] * 3)[2] for part in value.split(","))
        return any("." in category for category in categories)
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
    if option in ("-e", "--env"):  # `NAME=VALUE`, or `NAME` for the host's value
        variable, eq, setting = value.partition("=")
        if loads_code(variable, setting if eq else None):
            return f"{option} {variable} makes the container's server load other code"
    if option in ("-v", "--volume"):
        source = value.split(":", 1)[0]
        return _bound(source)
    if option == "--mount":
        fields = {key: text for key, _, text in (part.partition("=") for part in value.split(","))}
        source = fields.get("source") or fields.get("src") or ""
        if fields.get("type", "volume") == "bind":
            return _bound(source)
    return None


_RUNTIME_SOCKETS = ("docker.sock", "containerd.sock", "podman.sock", "crio.sock")


def _bound(source: str) -> str | None:
    # `/./`, `//` and `/srv/..` are `/`; `/home/x/../alice` is a home folder
    path = posixpath.normpath(source).rstrip("/") if source.startswith("/") else source
    if path == "" and source.startswith("/"):
        return "binds the host's whole file system (/) into the container"
    if _HOME.match(path):
        return f"binds the home folder ({source}) into the container"
    if path.endswith(_RUNTIME_SOCKETS):
        return "binds a container runtime's socket: the container could start any container"
    return None
