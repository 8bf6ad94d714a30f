"""A configured server to talk to (`Target`), and starting a stdio one (`start_child`) — without
an event loop or the MCP SDK, so that `exec` starts the server as soon as the policy lets the
call through and imports the rest while it starts. Connecting is `connect`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bundlectl import servers
from bundlectl.config.models import ServerSpec
from bundlectl.mcpio.child import Child
from bundlectl.mcpio.launch import Launch
from bundlectl.mcpio.sandbox import profile_for
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
    sandbox_mode: str = "off"  # policy.sandbox: off, on or required (`mcpio.sandbox`)
    # in a sandbox, where the policy lets its calls write (`resolve.sandboxing`)
    sandbox_writes: tuple[str, ...] = ()
    # told each host its sandbox's egress proxy refuses (`sandbox.network`: a list of hosts)
    egress_refused: Callable[[str], None] | None = field(default=None, repr=False)
    # the token of the person the calls are made for (`auth.exchange`, `serve` over HTTP)
    bearer: str | None = field(default=None, repr=False)
    # whose sign-in the calls use (`auth.per_person`, `serve` over HTTP): their key (a digest
    # of issuer and subject); None: the sign-in kept for this machine (`auth login`)
    person: str | None = None

    def new_stderr(self) -> StderrTee:
        """A tee for the stderr of a stdio child about to start. Each start gets its own: the
        session of an earlier start (the gateway restarting a crashed server) may still be
        ending, and closes only its own (`close`)."""
        self.stderr = StderrTee(log_file=self.log_file, name=self.name)
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

    def launch(self) -> Launch:
        """How this stdio server is started, as configured."""
        spec = self.spec
        return Launch(
            self.name,
            spec.command or "",
            tuple(spec.args),
            tuple(spec.env.items()),
            str(self.root / (spec.cwd or ".")),
            spec.max_message_mb * 1024 * 1024,
            profile_for(self.name, spec, self.root, self.sandbox_mode, self.sandbox_writes),
            self.egress_refused,
        )

    def adopt(self, child: Child, stderr: StderrTee) -> Child:
        """A server started for this target before it existed (`exec`'s head start)."""
        self.child, self.stderr = child, stderr
        return child


def start_child(target: Target) -> Child:
    """Start a stdio server now (before the SDK is imported, so the two overlap)."""
    target.child = target.launch().start(target.new_stderr(), with_parent=target.with_parent)
    return target.child
