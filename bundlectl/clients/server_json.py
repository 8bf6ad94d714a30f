"""The official MCP Registry's `server.json` (schema 2025-10-17 and later) read as a server of
the project: `bundlectl import server-json FILE|URL`.

One way to run the server is chosen: the first package bundlectl can start (npm with `npx`,
PyPI with `uvx`, OCI with `docker run`; stdio transport), else the first remote (streamable
HTTP or SSE). Package and runtime arguments are kept in order, a named one as `--flag value`;
environment variables and headers become `${NAME}` references — a secret never gets a value in
`bundlectl.yaml`, and a default only when the variable is not a secret.
"""

from __future__ import annotations

import json
import re
from typing import Any

from bundlectl.clients.base import Imported
from bundlectl.config.launchcheck import (
    LAUNCHER_OPTIONS,
    docker_run,
    identifier_problem,
    loads_code,
    options_taking_code,
    version_problem,
)
from bundlectl.config.urls import url_problem
from bundlectl.errors import InputFileError, Problem

RUNNERS = {"npm": "npx", "pypi": "uvx", "oci": "docker"}
_NAME = re.compile(r"[^a-z0-9_-]+")
_VARIABLE = re.compile(r"[^A-Z0-9_]+")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


# How the notes of an import begin the way to record a server's tools (`import --record` does).
RECORD_NOTE = "record its tools for lint, export and the policy (or import with --record)"


def read_server_json(text: str, file: str) -> tuple[Imported, list[str]]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        problem = Problem(file, getattr(exc, "lineno", 1), getattr(exc, "colno", 1), str(exc))
        raise InputFileError([problem], hint="a server.json is one JSON object") from None
    if isinstance(data, dict) and isinstance(data.get("server"), dict):
        data = data["server"]  # the registry API's answer wraps it
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        raise InputFileError(
            [Problem(file, 1, 1, "not a server.json: no `name`")],
            hint="give the server.json of the MCP Registry (name, packages, remotes)",
        )
    hostile = _hostile(data)
    if hostile:
        raise InputFileError(
            [Problem(file, 1, 1, said) for said in hostile],
            hint="this server.json would run something other than its package: add the server "
            "by hand under servers: if you trust it",
        )
    imported = Imported(agents={})  # a server for the project; the policy stays the user's
    name = _NAME.sub("-", data["name"].rsplit("/", 1)[-1].lower()).strip("-_") or "server"
    notes: list[str] = []
    packages = [p for p in data.get("packages") or [] if isinstance(p, dict)]
    remotes = [r for r in data.get("remotes") or [] if isinstance(r, dict)]
    usable = [
        p
        for p in packages
        if p.get("registryType") in RUNNERS
        and (p.get("transport") or {}).get("type", "stdio") == "stdio"
    ]
    if usable:
        spec, needs = _package(usable[0])
        chosen = f"the {usable[0]['registryType']} package {usable[0].get('identifier')}"
    elif remotes:
        spec, needs = _remote(remotes[0], name)
        chosen = f"the remote {remotes[0].get('url')}"
    else:
        kinds = sorted({str(p.get("registryType")) for p in packages}) or ["none"]
        said = f"no package bundlectl can run (registry types: {', '.join(kinds)}), no remote"
        raise InputFileError(
            [Problem(file, 1, 1, said)],
            hint="add the server by hand under servers: (command, args, env)",
        )
    description = data.get("description")
    if isinstance(description, str) and description:
        spec["description"] = description[:200]
    imported.servers[name] = spec
    others = len(usable) + len(remotes) - 1
    notes.append(
        f"server {name!r} runs {chosen}"
        + (f"; {others} other way(s) to run it left out" if others else "")
    )
    if needs:
        notes.append(f"set before it starts: {', '.join(sorted(needs))}")
    notes.append(f"{RECORD_NOTE}: bundlectl tools --live --record --server {name}")
    return imported, notes


def _hostile(data: dict[str, Any]) -> list[str]:
    """What in a server.json would make its launch run something else, or send what it asks for
    elsewhere (#52 items 4 and 6): a remote URL outside the URL rule (plain http to another
    host, a user name in it), an identifier or a version outside its registry type's grammar
    (a launcher would read `--call=...` as its own option), a launcher option among the
    runtime arguments, a default for a variable that loads code, a container option that
    widens access."""
    found: list[str] = []
    remotes = data.get("remotes") or []
    for number, remote in enumerate(remotes if isinstance(remotes, list) else []):
        url = str(remote.get("url", "")) if isinstance(remote, dict) else ""
        why = url_problem(_PLACEHOLDER.sub("x", url)) if url else None
        if why is not None:  # the headers it asks for (a token) would go where it says
            found.append(f"remotes[{number}].url {url!r} {why}")
    packages = data.get("packages") or []
    for number, package in enumerate(packages if isinstance(packages, list) else []):
        if not isinstance(package, dict):
            continue
        where = f"packages[{number}]"
        kind = str(package.get("registryType", ""))
        why = identifier_problem(kind, str(package.get("identifier", "")))
        if why is not None:
            found.append(f"{where}.identifier {package.get('identifier')!r} {why}")
        version = package.get("version")
        if version is not None and (why := version_problem(str(version))) is not None:
            found.append(f"{where}.version {version!r} {why}")
        found += _runtime_problems(package, kind, where)
        for index, variable in enumerate(package.get("environmentVariables") or []):
            name = str(variable.get("name", "")) if isinstance(variable, dict) else ""
            default = variable.get("default") if isinstance(variable, dict) else None
            if default and loads_code(name, str(default)):
                found.append(
                    f"{where}.environmentVariables[{index}]: a default for {name}, which loads "
                    "code into the server"
                )
    return found


def _runtime_problems(package: dict[str, Any], kind: str, where: str) -> list[str]:
    runtime = package.get("runtimeArguments") or []
    needs: set[str] = set()
    words = [w for a in runtime if isinstance(a, dict) for w in _argument(a, needs)]
    found: list[str] = []
    launcher = RUNNERS.get(kind)
    if launcher in LAUNCHER_OPTIONS:
        for _, option in options_taking_code(launcher, words, package=False):
            found.append(
                f"{where}.runtimeArguments: {option} makes {launcher} run a command or "
                "take code from elsewhere"
            )
    if kind == "oci":
        _, widening = docker_run(["run", *words, "image"])
        found += [f"{where}.runtimeArguments: {w.why}" for w in widening]
    return found


def _argument(arg: dict[str, Any], needs: set[str]) -> list[str]:
    """One runtime or package argument as command-line words; a placeholder `{name}` in its
    value becomes a `${NAME}` reference."""
    value = arg.get("value", arg.get("default", arg.get("valueHint", "")))
    value = _PLACEHOLDER.sub(lambda m: _ref(m.group(1), needs), str(value)) if value else ""
    if arg.get("type") == "named":
        flag = str(arg.get("name", ""))
        return [flag, value] if value else [flag]
    return [value] if value else []


def _ref(name: str, needs: set[str]) -> str:
    variable = _VARIABLE.sub("_", name.upper()).strip("_") or "VALUE"
    if variable[0].isdigit():
        variable = "_" + variable
    needs.add(variable)
    return "${" + variable + "}"


def _package(package: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
    needs: set[str] = set()
    kind, identifier = package["registryType"], str(package.get("identifier", ""))
    version = package.get("version")
    runtime = [w for a in package.get("runtimeArguments") or [] for w in _argument(a, needs)]
    args = [w for a in package.get("packageArguments") or [] for w in _argument(a, needs)]
    env: dict[str, str] = {}
    for variable in package.get("environmentVariables") or []:
        var = str(variable.get("name", ""))
        if not var:
            continue
        default = variable.get("default")
        secret = bool(variable.get("isSecret"))
        env[var] = "${" + var + (f":-{default}" if default and not secret else "") + "}"
        if variable.get("isRequired") or secret:
            needs.add(var)
    if kind == "npm":
        pinned = f"{identifier}@{version}" if version else identifier
        argv = ["-y", *runtime, pinned, *args]
    elif kind == "pypi":
        pinned = f"{identifier}=={version}" if version else identifier
        argv = [*runtime, pinned, *args]
    else:  # oci: the variables are passed into the container by name
        image = identifier if ":" in identifier or not version else f"{identifier}:{version}"
        passed = [w for var in env for w in ("-e", var)]
        argv = ["run", "-i", "--rm", *passed, *runtime, image, *args]
    spec: dict[str, Any] = {"command": RUNNERS[kind], "args": argv}
    if env:
        spec["env"] = env
    return spec, needs


def _remote(remote: dict[str, Any], name: str) -> tuple[dict[str, Any], set[str]]:
    needs: set[str] = set()
    kind = str(remote.get("type", "streamable-http"))
    spec: dict[str, Any] = {
        "transport": "sse" if kind == "sse" else "streamable-http",
        "url": _PLACEHOLDER.sub(lambda m: _ref(m.group(1), needs), str(remote.get("url", ""))),
    }
    headers: dict[str, str] = {}
    for header in remote.get("headers") or []:
        key = str(header.get("name", ""))
        if not key:
            continue
        value = str(header.get("value") or "")
        if value and (_PLACEHOLDER.search(value) or not header.get("isSecret")):
            # a template (`Bearer {api_key}`): its placeholders come from the environment
            headers[key] = _PLACEHOLDER.sub(lambda m: _ref(m.group(1), needs), value)
        else:  # a secret without a template: never written as a value
            headers[key] = _ref(f"{name}_{key}", needs)
    if headers:
        spec["headers"] = headers
    return spec, needs
