"""How a stdio server is started (`Launch`): its command, arguments, environment and folder as
configured, `${VAR}` references still unexpanded — so a launch can be kept on disk (`exec`'s
head start) without a secret in it — and starting it (`Launch.start`). Nothing here imports
pydantic, an event loop or the MCP SDK: `exec` starts a server before any of them loads.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bundlectl.config.expand import child_environment, expand
from bundlectl.errors import ServerError
from bundlectl.mcpio.child import Child
from bundlectl.mcpio.launchers import resolve_argv
from bundlectl.mcpio.pids_groups import release_group
from bundlectl.mcpio.sandbox import Confined, Profile, wrap
from bundlectl.mcpio.stderr import StderrTee


@dataclass(frozen=True)
class Launch:
    """A stdio server's start, as its config says it (references unexpanded)."""

    server: str
    command: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    cwd: str  # absolute: the project's root joined with the server's `cwd`
    max_message: int  # bytes in one message
    sandbox: Profile | None = None  # its kernel sandbox (`sandbox.py`), when the policy has one
    # told each host its sandbox's egress proxy refuses (the audit log's `egress-denied`)
    egress_refused: Callable[[str], None] | None = field(default=None, compare=False)

    def start(self, stderr: StderrTee, *, with_parent: bool = False) -> Child:
        """Start it now: references expanded from this process's environment (an unset one is
        a usage error naming it), the executable found as `_resolve_command` says."""
        where = f"server {self.server!r}"
        environ = dict(os.environ)
        argv = [expand(self.command, environ, where=where)]
        argv += [expand(a, environ, where=where) for a in self.args]
        env = child_environment(dict(self.env), server=self.server)
        argv = _resolve_command(argv, env)
        confined = Confined(argv, {})
        if self.sandbox is not None:
            confined = wrap(
                self.sandbox, argv, cwd=self.cwd, home=env.get("HOME"), refused=self.egress_refused
            )
        try:
            child = Child.start(
                confined.argv,
                env=env,
                cwd=self.cwd,
                stderr=stderr.file,
                with_parent=with_parent,
                limits=confined.limits,
                group=confined.group,
                egress=confined.egress,
            )
        except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
            release_group(confined.group)
            if confined.egress is not None:
                confined.egress.close()
            raise ServerError(
                f"could not start server {self.server!r}: {self.command!r}: {exc.strerror}",
                hint=f"install {self.command!r} or fix servers.{self.server}.command (and cwd)",
            ) from None
        child.max_message = self.max_message
        return child

    def to_json(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "command": self.command,
            "args": list(self.args),
            "env": dict(self.env),
            "cwd": self.cwd,
            "max_message": self.max_message,
            **(
                {"sandbox": {**self.sandbox.to_json(), "root": self.sandbox.root}}
                if self.sandbox is not None
                else {}
            ),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Launch:
        """A kept launch (KeyError, TypeError or ValueError when it is not one)."""
        env = data["env"]
        launch = cls(
            str(data["server"]),
            str(data["command"]),
            tuple(str(a) for a in data["args"]),
            tuple((str(k), str(v)) for k, v in env.items()),
            str(data["cwd"]),
            int(data["max_message"]),
            Profile.from_json(str(data["server"]), data["sandbox"]) if "sandbox" in data else None,
        )
        if not Path(launch.cwd).is_absolute():
            raise ValueError(launch.cwd)
        return launch


def _resolve_command(argv: list[str], env: dict[str, str]) -> list[str]:
    """A pinned `uvx` release installed here runs from this environment (offline, no uv);
    other executables are found on the child's PATH, then beside our interpreter (pipx, venvs)."""
    argv = resolve_argv(argv)
    found = shutil.which(argv[0], path=env.get("PATH"))
    if found is None and os.sep not in argv[0]:
        local = Path(sys.executable).parent / argv[0]
        found = str(local) if local.exists() else None
    return [found or argv[0], *argv[1:]]
