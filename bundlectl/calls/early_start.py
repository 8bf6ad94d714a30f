"""`exec`'s head start: a stdio server started before the project is loaded.

Loading a project (YAML, the pydantic models, the resolver) costs `exec` ~140 ms before it may
start a server. When an earlier `exec` of the same project found the same agent's call of the
same tool allowed outright — by a rule with no argument condition, not `ask`, no quota counting
it — and nothing that decision was made from has changed since, the server is started at once
from the launch kept then, and the project loads while the server starts. "Nothing changed" is
checked as mypy checks its cache, but by content: the digest of every file the project is
loaded from (config, lock, local rules, user-level config; absent ones too) and of every
registry folder's tree, bundlectl's version, and `$BUNDLECTL_SANDBOX` (the machine's say on
the sandbox, for a project silent on it). A sandboxed launch is kept with its profile (drawn
from those same files), and started in its sandbox; one with an egress proxy is not (the proxy
audits what it refuses, which needs the loaded project).

The call itself is judged from the files exactly as without a head start. The early server is
used only when the configured launch equals the kept one and the policy lets the call through;
otherwise it is stopped before anything is sent to it (which a correct cache never needs).

One file per project config in the user cache folder, written atomically, readable by its owner
only. No secret is kept: a launch keeps `${VAR}` references unexpanded, and a server whose
configured command, arguments or env hold what looks like a literal secret is never kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from bundlectl import __version__
from bundlectl.config import paths
from bundlectl.config.bounded_read import read_bounded
from bundlectl.errors import BundlectlError
from bundlectl.mcpio.launch import Launch
from bundlectl.mcpio.sandbox import MACHINE_MODE
from bundlectl.mcpio.stderr import StderrTee

if TYPE_CHECKING:
    from bundlectl.calls.pipeline import Pipeline
    from bundlectl.mcpio.child import Child
    from bundlectl.mcpio.target import Target
    from bundlectl.policy.rules import Decision

FORMAT = 1
MAX_KEPT = 256  # launches per project; the oldest go first
_FOLDER_DEPTH = 3  # a registry is <root>/<bundle>/<version>.yaml


def stamp(path: Path, depth: int = _FOLDER_DEPTH) -> str:
    """What `path` holds, as a digest: a file's bytes, a folder's names and their stamps (down
    to `depth`), or "missing". Anything else (a pipe, a device, a file too large or unreadable)
    gets a stamp that never equals another: it is never read, and never hits."""
    try:
        mode = path.stat().st_mode
        if stat.S_ISDIR(mode):
            digest = hashlib.sha256(b"folder")
            if depth > 0:
                for entry in sorted(os.scandir(path), key=lambda e: e.name):
                    digest.update(f"{entry.name}\0{stamp(Path(entry.path), depth - 1)}\0".encode())
            return digest.hexdigest()
        if stat.S_ISREG(mode):
            return hashlib.sha256(read_bounded(path)).hexdigest()
    except FileNotFoundError:
        return "missing"
    except OSError:
        pass
    return f"unstamped {os.urandom(8).hex()}"


def fixed_inputs(config: Path) -> list[Path]:
    """What a project is loaded from whatever its config says: the project's files, the user's
    registry and the built-in one (the registries its config lists are kept with each entry)."""
    return [*paths.project_files(config), paths.user_registry_dir(), paths.builtin_registry_dir()]


@dataclass
class Early:
    """A server started from a kept launch, not yet judged to be this call's."""

    launch: Launch
    child: Child
    stderr: StderrTee

    def stop(self) -> None:
        self.child.terminate_now()
        self.stderr.close(0)


class HeadStart:
    """One `exec` call's use of the kept launches: `start` before the project loads, `settle`
    once the call is let through, `keep` what this call's decision allows next time. As a
    context manager: an early server that was not settled (the call was refused, or failed
    before it was let through) is stopped on the way out."""

    def __init__(self, config: Path | None, agent: str, server: str, tool: str) -> None:
        try:
            found = paths.find_config(Path.cwd(), config)
            self.config = found.resolve() if found is not None and found.is_file() else None
        except (OSError, ValueError):  # no working folder, a NUL in --config: loading says so
            self.config = None
        self.key = "\x1f".join((agent, server, tool))
        self.server = server
        # Stamped before the project is read: a file edited in between can only make the
        # stamps kept below older than the decision, so the next call misses; never the reverse.
        self.stamps = (
            {str(path): stamp(path) for path in fixed_inputs(self.config)} if self.config else {}
        )
        if self.config is not None:  # the machine's say on the sandbox decides the launch too
            self.stamps[f"${MACHINE_MODE}"] = os.environ.get(MACHINE_MODE, "")
        self.early: Early | None = None
        self._kept: dict[str, Any] | None = None

    @property
    def file(self) -> Path:
        assert self.config is not None
        name = hashlib.sha256(str(self.config).encode()).hexdigest()[:32]
        return paths.cache_dir() / "exec" / f"{name}.json"

    def __enter__(self) -> HeadStart:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.early is not None:
            self.early.stop()
            self.early = None

    def _load(self) -> dict[str, Any] | None:
        """The kept file when it was kept from the project's files as they are now."""
        try:
            kept = json.loads(self.file.read_bytes())
        except (OSError, ValueError):
            return None
        if (
            isinstance(kept, dict)
            and kept.get("format") == FORMAT
            and kept.get("bundlectl") == __version__
            and kept.get("config") == str(self.config)
            and kept.get("inputs") == self.stamps
            and isinstance(kept.get("registries"), dict)
            and isinstance(kept.get("calls"), dict)
        ):
            return kept
        return None

    def _read(self) -> dict[str, Any] | None:
        """The kept file when every input, its project's registries too, is as it was kept."""
        if self._kept is None and self.config is not None:
            kept = self._load()
            if kept is not None and all(
                stamp(Path(path)) == kept_stamp for path, kept_stamp in kept["registries"].items()
            ):
                self._kept = kept
        return self._kept

    def start(self, *, quiet: bool) -> Child | None:
        """Start the server from this call's kept launch, when there is one and nothing it was
        kept from has changed. A launch that fails (its command gone, a variable unset, its log
        unwritable) is left to the call, which says what is wrong once the policy has let it
        through."""
        kept = self._read()
        entry = kept["calls"].get(self.key) if kept is not None else None
        if not isinstance(entry, dict):
            return None
        try:
            launch = Launch.from_json(entry)
        except (KeyError, TypeError, ValueError, AttributeError):
            return None
        try:
            log = paths.server_log(self.server) if quiet else None
            tee = StderrTee(log_file=log, name=self.server)
        except BundlectlError:  # its log cannot be written: the call's own start says so
            return None
        try:
            child = launch.start(tee)
        except (BundlectlError, OSError):
            tee.close(0)
            return None
        self.early = Early(launch, child, tee)
        return child

    def settle(self, target: Target) -> Child:
        """The call was let through: its server, the early one when it was started as the
        config says, else started now."""
        from bundlectl.mcpio.target import start_child  # noqa: PLC0415 - loaded by the caller

        early, self.early = self.early, None
        if early is not None and early.launch == target.launch():
            return target.adopt(early.child, early.stderr)
        if early is not None:
            early.stop()
        return start_child(target)

    def keep(self, pipeline: Pipeline, decision: Decision, target: Target) -> None:
        """Keep this call's launch for the next call, when the call was let through by the policy
        alone (not `ask`, no condition, no quota) from local files, and the launch holds nothing
        that looks like a secret."""
        if self.config is None:
            return
        if not (
            decision.effect == decision.matched_effect == "allow"
            and not decision.conditional
            and target.spec.transport == "stdio"
            and target.builtin is None
            and not pipeline.limited(decision.agent, decision.server, decision.tool)
        ):
            return
        launch = target.launch()
        if launch.sandbox is not None and launch.sandbox.hosts:
            return  # its egress proxy audits what it refuses: set up with the loaded project
        registries = pipeline.resolution.project.local_registries()
        if self._kept is not None and self._kept["calls"].get(self.key) == launch.to_json():
            return  # kept already (this call started from it)
        if registries is None or _holds_secret(launch):
            return
        stamps = {str(path): stamp(path) for path in registries}
        kept = self._load()
        calls = dict(kept["calls"]) if kept is not None and kept["registries"] == stamps else {}
        calls.pop(self.key, None)
        calls = dict(list(calls.items())[-(MAX_KEPT - 1) :])
        calls[self.key] = launch.to_json()
        data = {
            "format": FORMAT,
            "bundlectl": __version__,
            "config": str(self.config),
            "inputs": self.stamps,
            "registries": stamps,
            "calls": calls,
        }
        from bundlectl.config.fsio import atomic_write_bytes  # noqa: PLC0415 - a miss writes

        with contextlib.suppress(OSError):  # a cache: the call goes on without it
            atomic_write_bytes(self.file, json.dumps(data, indent=1).encode(), durable=False)


def _holds_secret(launch: Launch) -> bool:
    from bundlectl.config.secretscan import secret_kind  # noqa: PLC0415 - only when keeping

    pairs = [("command", launch.command), *(("argument", a) for a in launch.args), *launch.env]
    return any(secret_kind(key, value) for key, value in pairs)
