"""A configured server to talk to (`Target`), and starting a stdio one (`start_child`) — without
an event loop or the MCP SDK, so that `exec` starts the server as soon as the policy lets the
call through and imports the rest while it starts. Connecting is `connect`'s.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bundlectl import servers
from bundlectl.config.expand import child_environment, expand
from bundlectl.config.models import ServerSpec
from bundlectl.errors import ServerError
from bundlectl.mcpio.child import Child
from bundlectl.mcpio.launchers import resolve_argv
from bundlectl.mcpio.stderr import StderrTee
from bundlectl.servers import builtin_of

if TYPE_CHECKING:
    from bundlectl.mcpio.stdio import Tap


@dataclass
class Target:
    """A server to talk to, and where its relative paths start."""

    name: str
    spec: ServerSpec
    root: Path
    log_file: Path | None = None  # --quiet: the server's stderr goes here
    stderr: StderrTee | None = None  # the copy of the current child's stderr
    child: Child | None = None  # a started stdio server
    tap: Tap | None = None  # requests past the SDK session on a stdio server's pipes (serve)
    refused: int | None = None  # an HTTP server's 401 or 403: it wants credentials we lack
    auth: Any = None  # the OAuth to use instead of a kept sign-in (`auth login`'s flow)
    with_parent: bool = False  # a stdio child ends when we do, even by SIGKILL (serve)
    sign_in: bool = False  # a person here may sign in again when the server asks (exec)

    def new_stderr(self) -> StderrTee:
        """A tee for the stderr of a stdio child about to start. Each start gets its own: the
        session of an earlier start (the gateway restarting a crashed server) may still be
        ending, and closes only its own (`close`)."""
        self.stderr = StderrTee(log_file=self.log_file)
        return self.stderr

    def close(self, *, wait: float = 1.0, tee: StderrTee | None = None) -> None:
        """Stop copying the server's stderr (`wait` 0: the server may still be exiting):
        `tee`, the copy of one start, or the current one."""
        tee = tee or self.stderr
        if tee is not None:
            tee.close(wait)
        if self.stderr is tee:
            self.stderr = None

    @property
    def builtin(self) -> str | None:
        """The built-in server this entry runs (`bundlectl server NAME`), if any."""
        return builtin_of(self.spec)

    def builtin_unprotected(self) -> list[str]:
        """The paths the files server's command line unprotects (`--unprotect PATH`)."""
        args = self.spec.args
        return [args[i + 1] for i, arg in enumerate(args[:-1]) if arg == "--unprotect"]

    def builtin_root(self) -> Path:
        return servers.root_of(self.spec, self.root)


def start_child(target: Target) -> Child:
    """Start a stdio server now (before the SDK is imported, so the two overlap)."""
    spec = target.spec
    where = f"server {target.name!r}"
    environ = dict(os.environ)
    argv = [
        expand(spec.command or "", environ, where=where),
        *(expand(a, environ, where=where) for a in spec.args),
    ]
    env = child_environment(spec.env, server=target.name)
    stderr = target.new_stderr()
    try:
        target.child = Child.start(
            _resolve_command(argv, env),
            env=env,
            cwd=str(target.root / (spec.cwd or ".")),
            stderr=stderr.file,
            with_parent=target.with_parent,
        )
        target.child.max_message = spec.max_message_mb * 1024 * 1024
        return target.child
    except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
        raise ServerError(
            f"could not start server {target.name!r}: {spec.command!r}: {exc.strerror}",
            hint=f"install {spec.command!r} or fix servers.{target.name}.command (and cwd)",
        ) from None


def _resolve_command(argv: list[str], env: dict[str, str]) -> list[str]:
    """A pinned `uvx` release installed here runs from this environment (offline, no uv);
    other executables are found on the child's PATH, then beside our interpreter (pipx, venvs)."""

    argv = resolve_argv(argv)
    found = shutil.which(argv[0], path=env.get("PATH"))
    if found is None and os.sep not in argv[0]:
        local = Path(sys.executable).parent / argv[0]
        found = str(local) if local.exists() else None
    return [found or argv[0], *argv[1:]]
