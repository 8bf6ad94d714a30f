"""A local (stdio) server in a kernel sandbox: Linux namespaces and mounts through bubblewrap
(Debian's `bubblewrap`, `bwrap`), and resource limits the kernel enforces.

With `policy.sandbox: on` (or `required`), a stdio server starts as

    bwrap <profile> -- COMMAND ARGS...

where the profile is drawn from its config (`servers.NAME.sandbox`): the whole system
read-only; the user's home and /tmp replaced by empty private ones, so a key in `~/.ssh` is not
there to read; the project read-only, and writable only where the policy lets the calls of the
agents it serves write (`resolve.sandboxing`: a `{path: docs/**}` condition makes `docs`
writable, a tool that only reads nothing) and where `write:` adds (the project's governed files
— bundlectl's own and the clients' MCP configs — stay read-only even there);
no other process visible (a PID namespace), no network at all (not even loopback) unless
`network: host`, or `network: [hosts...]`: those hosts alone, through an egress proxy bundlectl
runs on the host (`egress.py`), no capabilities, a new session (no terminal to push input
into), ended with us.
Every path is bound resolved, so a symlink inside a writable folder cannot point the server
outside it: the kernel refuses the write (`Read-only file system`). Memory (`RLIMIT_DATA`, 2G
by default) and CPU time (`RLIMIT_CPU`) are limited per process, so a runaway allocation ends
the server, not the machine; and the number of its processes (256 by default) through a pids
cgroup made for each start (`pids_groups`), which it joins before bubblewrap starts — where
the machine lets us make one (cgroup v1, as root; v2 where the pids controller is delegated
to us), else it is not limited and `resolve` says so.

A server started as a container (`docker run ...`, `podman run ...`) keeps its runtime's own
isolation instead of bubblewrap around the container client: its `run` gets the same profile as
the runtime's options — `--network none` (unless `network: host`), `--read-only` with a private
`/tmp` (`--tmpfs /tmp`), `--memory`, and `write:`/`read:` paths mounted at the same place —
each only where the configured arguments do not already say it (they are the declaration).

`policy.sandbox` absent is `on` (`mode_here`): on Linux every local server is sandboxed unless
the project says `off` or `$BUNDLECTL_SANDBOX` (a machine's setting, for a project that says
nothing) does; on macOS and Windows, where there is no bubblewrap, an absent setting is off
without a word. Without a bubblewrap that works here — not installed, or one the machine does
not let make namespaces (a container without privileges, a kernel or AppArmor that forbids
unprivileged user namespaces: asked until it works, then once a boot, `_unusable`) — a server
runs as before, after a one-line warning, unless the policy says `required`: then it is not
started.
`$BUNDLECTL_BWRAP` names another bwrap (an empty value: none). No I/O at import, nothing
imported but the standard library: this runs on `exec`'s way to starting a server.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bundlectl.errors import ServerError, UsageError
from bundlectl.mcpio.pids_groups import pids_base, pids_group
from bundlectl.output import err
from bundlectl.policy.governing import CLIENT_FILES, OTHER_FILES, POLICY_FILES

if TYPE_CHECKING:
    from bundlectl.config.models import ServerSpec
    from bundlectl.mcpio.egress import Egress

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
CONTAINER_RUNTIMES = frozenset({"docker", "podman"})
MODES = ("off", "on", "required")
MACHINE_MODE = "BUNDLECTL_SANDBOX"  # this machine's policy.sandbox, for a project silent on it
# `docker run`'s options that take no value (every other option takes the next word, or `=`).
_RUN_FLAGS = frozenset(
    {
        "--detach",
        "--interactive",
        "--tty",
        "--rm",
        "--init",
        "--privileged",
        "--read-only",
        "--publish-all",
        "--no-healthcheck",
        "--oom-kill-disable",
        "--sig-proxy",
        "--quiet",
        "--disable-content-trust",
        "--help",
    }
)
_RUN_SHORT_FLAGS = frozenset("ditPq")
_WARNED: set[tuple[str, str | None]] = set()  # servers warned about, and why (once each)


@dataclass(frozen=True)
class Profile:
    """What one server may reach in its sandbox (paths as configured; resolved at start)."""

    server: str
    root: str  # the project's root
    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    network: str | tuple[str, ...] = "none"  # none, host, or the hosts it may reach
    memory: str = "2G"
    cpu_seconds: int | None = None
    required: bool = False
    processes: int = 256
    container: bool = False  # `docker run ...`: the runtime's isolation, with these options

    def to_json(self) -> dict[str, Any]:
        return {
            "read": list(self.read),
            "write": list(self.write),
            "network": self.network if isinstance(self.network, str) else list(self.network),
            "memory": self.memory,
            "cpu_seconds": self.cpu_seconds,
            "processes": self.processes,
            "required": self.required,
            **({"container": True} if self.container else {}),
        }

    @classmethod
    def from_json(cls, server: str, data: Any) -> Profile:
        """A kept profile (`to_json` with its `root`; KeyError, TypeError or ValueError when it
        is not one)."""
        network = data["network"]
        cpu = data["cpu_seconds"]
        return cls(
            server,
            str(data["root"]),
            tuple(str(p) for p in data["read"]),
            tuple(str(p) for p in data["write"]),
            str(network) if isinstance(network, str) else tuple(str(h) for h in network),
            str(data["memory"]),
            None if cpu is None else int(cpu),
            required=bool(data["required"]),
            processes=int(data["processes"]),
            container=bool(data.get("container", False)),
        )

    @property
    def hosts(self) -> tuple[str, ...]:
        """The hosts it may reach through its egress proxy (none: no proxy)."""
        return () if isinstance(self.network, str) else self.network

    def described(self) -> str:
        """One line a person reads: what the server may write and reach."""
        writes = ", ".join(self.write) or "nothing"
        network = "the machine's network" if self.network == "host" else "no network"
        if self.hosts:
            network = "the network to " + ", ".join(self.hosts) + " (through its proxy)"
        cpu = f", {self.cpu_seconds} s of CPU" if self.cpu_seconds else ""
        said = f"writes {writes}; {network}; {self.memory} of memory{cpu}"
        if not self.container:
            limited = "" if pids_base() is not None else " (not limited here: no pids cgroup)"
            said += f"; {self.processes} processes{limited}"
        return said + ("; in its container (the runtime's isolation)" if self.container else "")


def profile_for(
    name: str, spec: ServerSpec, root: Path, mode: str, drawn: tuple[str, ...] = ()
) -> Profile | None:
    """The server's sandbox under `policy.sandbox` `mode`, or None: it runs unsandboxed (the
    policy is off, it is not a local process, or its entry says `off` with a reason). It may
    write where the policy lets its calls write (`drawn`: `resolve.sandboxing`) and where its
    entry's `write:` says."""
    from bundlectl.servers import builtin_of  # noqa: PLC0415 - cheap; keeps this module light

    if mode == "off" or spec.transport != "stdio" or builtin_of(spec) is not None:
        return None
    declared = spec.sandbox
    if declared is not None and declared.off:
        return None
    container = runs_container(spec.command or "", spec.args)
    if declared is None:
        return Profile(
            name, str(root), write=drawn, required=mode == "required", container=container
        )
    return Profile(
        name,
        str(root),
        tuple(declared.read),
        tuple(dict.fromkeys((*drawn, *declared.write))),
        declared.network if isinstance(declared.network, str) else tuple(declared.network),
        declared.memory,
        declared.cpu_seconds,
        required=mode == "required",
        processes=declared.processes,
        container=container,
    )


def mode_here(written: str | None) -> str:
    """`policy.sandbox` as it applies on this machine: as the project writes it; absent (`on`),
    what `$BUNDLECTL_SANDBOX` says, else on where the OS has a sandbox (Linux) and off where it
    has none (macOS, Windows: nothing anyone could install, so nothing to warn about)."""
    if written is not None:
        return written
    chosen = os.environ.get(MACHINE_MODE, "").strip().lower()
    if chosen:
        if chosen not in MODES:
            raise UsageError(
                f"${MACHINE_MODE} is {chosen!r}, which is not a sandbox mode",
                hint="set it to off, on or required, or unset it (on); a project's "
                "policy.sandbox, where it says one, is what counts",
            )
        return chosen
    return "on" if sys.platform.startswith("linux") else "off"


def runs_container(command: str, args: list[str] | tuple[str, ...]) -> bool:
    """Whether a server's command starts a container (`docker run ...`, `podman run ...`)."""
    return Path(command).name in CONTAINER_RUNTIMES and bool(args) and args[0] == "run"


def bwrap() -> str | None:
    """The bubblewrap to use: `$BUNDLECTL_BWRAP`, else `bwrap` on PATH; None: there is none
    (or this is not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    chosen = os.environ.get("BUNDLECTL_BWRAP")
    if chosen is not None:
        return chosen or None
    return shutil.which("bwrap")


def unavailable(tool: str | None) -> str | None:
    """Why no server can be sandboxed here (a phrase), or None: bubblewrap is there and works."""
    if tool is None:
        return "bubblewrap (bwrap) is not available here"
    refused = _unusable(tool)
    if refused is None:
        return None
    return f"bubblewrap cannot make a sandbox here ({refused})"


def _unusable(tool: str) -> str | None:
    """What `tool` says when it cannot make the sandbox's namespaces and mounts on this
    machine (its first line), or None. Some machines forbid them (a container without
    privileges; a kernel or AppArmor that refuses unprivileged user namespaces, as Ubuntu 24.04
    does): there every server would fail to start. Asked at a start (~8 ms) until the answer is
    yes, which is remembered in the cache folder until the machine restarts or that bubblewrap
    changes."""
    key = _machine_key(tool)
    if key is not None:
        from bundlectl.config import paths  # noqa: PLC0415 - cheap; keeps this module light

        kept = paths.cache_dir() / "bwrap-works"
        with contextlib.suppress(OSError, UnicodeDecodeError):
            if kept.read_text() == key:
                return None
    refused = _probe(tool)
    if refused is None and key is not None:
        from bundlectl.config.fsio import atomic_write_bytes  # noqa: PLC0415 - a miss writes

        with contextlib.suppress(OSError):  # a cache: the next start asks again
            atomic_write_bytes(kept, key.encode(), durable=False)
    return refused


def _machine_key(tool: str) -> str | None:
    """This user, this boot of the machine, and this bubblewrap (None: one of them unknown)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        found = os.stat(tool)
    except OSError:
        return None
    return f"{os.getuid()} {boot} {tool} {found.st_ino} {found.st_mtime_ns} {found.st_size}"


def _probe(tool: str) -> str | None:
    probe = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    probe += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net"]
    probe += ["--new-session", "--die-with-parent", "--cap-drop", "ALL", "--", "true"]
    try:
        done = subprocess.run(
            [tool, *probe], stdin=subprocess.DEVNULL, capture_output=True, timeout=10, check=False
        )
    except subprocess.TimeoutExpired:
        return "it did not answer in 10 s"
    except OSError as exc:
        return exc.strerror or str(exc)
    if done.returncode == 0:
        return None
    said = done.stderr.decode(errors="replace").strip().splitlines()
    return said[0] if said else f"it exited with {done.returncode}"


@dataclass(frozen=True)
class Confined:
    """How a sandboxed server starts: its argv, the resource limits its process sets, and the
    pids cgroup it joins (its `cgroup.procs`), before it runs `argv`."""

    argv: list[str]
    limits: dict[int, int]
    group: Path | None = None
    egress: Egress | None = None  # its egress proxy, closed when it ends


def wrap(
    profile: Profile,
    argv: list[str],
    *,
    cwd: str,
    home: str | None,
    refused: Callable[[str], None] | None = None,
) -> Confined:
    """`argv` to run inside the sandbox, with its limits; the argv unchanged (after a warning)
    when there is no bubblewrap and the policy allows that; a container's `run` with the
    profile as the runtime's options. With hosts to reach, an egress proxy is started for it
    (`refused(host)`: told of each host it refuses)."""
    if profile.container and runs_container(argv[0], argv[1:]):
        if profile.hosts:
            raise ServerError(
                f"server {profile.server!r} was not started: a container reaches no network or "
                "the runtime's (`network: none` or `host`); a list of hosts is for servers "
                "bubblewrap runs",
                hint=f"set servers.{profile.server}.sandbox.network to none or host, or give "
                "the container a network of your own in its `run` arguments",
            )
        return Confined(contained(profile, argv), {})
    tool = bwrap()
    missing = unavailable(tool)
    if tool is None or missing is not None:
        if profile.required:
            raise ServerError(
                f"server {profile.server!r} was not started: policy.sandbox is required and "
                f"{missing}",
                hint="install bubblewrap (Debian, Ubuntu: apt install bubblewrap) and let it make "
                "user namespaces, or set policy.sandbox: on to run servers unsandboxed where "
                "it cannot",
            )
        if (profile.server, missing) not in _WARNED:
            _WARNED.add((profile.server, missing))
            err(
                f"warning: server {profile.server!r} runs unsandboxed: {missing} (install "
                "it, or say so: policy.sandbox: off, or required to refuse)"
            )
        return Confined(argv, {})
    egress = None
    try:
        arguments = _arguments(profile, argv, cwd=cwd, home=home)
        if profile.hosts:
            from bundlectl.mcpio import egress as proxy  # noqa: PLC0415 - only with hosts

            egress = proxy.Egress(profile.server, profile.hosts, refused)
            arguments += ["--bind", egress.path, proxy.INSIDE]
            for name, value in egress.environment().items():
                arguments += ["--setenv", name, value]
            # the bridge runs on this Python, its standard library alone (-I -S)
            bridge = str(Path(sys.executable).resolve())
            for folder in _installations(bridge, _hidden(home)):
                arguments += ["--ro-bind", str(folder), str(folder)]
            inside = [proxy.INSIDE, str(proxy.PORT), "--"]
            argv = [bridge, "-I", "-S", "-c", proxy.BRIDGE, *inside, *argv]
    except OSError as exc:  # a write path that cannot be made (a file stands where it goes)
        if egress is not None:
            egress.close()
        raise ServerError(
            f"server {profile.server!r} was not started: its sandbox cannot be set up: "
            f"{exc.strerror or exc}: {exc.filename}",
            hint=f"check servers.{profile.server}.sandbox (read: and write: paths)",
        ) from None
    return Confined(
        [tool, *arguments, "--", *argv],
        _limits(profile),
        pids_group(profile.server, profile.processes),
        egress,
    )


def _hidden(home: str | None) -> list[Path]:
    """What the sandbox replaces with empty folders: /tmp, and the user's home."""
    home_dir = Path(home).resolve() if home and Path(home).is_dir() else None
    hidden = [Path("/tmp")]
    if home_dir is not None and home_dir != Path("/"):
        hidden.append(home_dir)
    return hidden


def _under(path: Path, places: list[Path]) -> bool:
    return any(path == place or place in path.parents for place in places)


def _installations(command: str, hidden: list[Path]) -> list[Path]:
    """The installations (…/bin/x: …) of a program and its interpreter that a hidden folder
    would hide: bound back read-only so that it starts."""
    return [p.parent.parent for p in _programs(command) if _under(p, hidden)]


def _arguments(profile: Profile, argv: list[str], *, cwd: str, home: str | None) -> list[str]:
    root = Path(profile.root).resolve()
    home_dir = Path(home).resolve() if home and Path(home).is_dir() else None
    hidden = _hidden(home)
    args = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for place in hidden:
        args += ["--tmpfs", str(place)]
    for path in _shown(profile, argv, root, home_dir, hidden):
        args += ["--ro-bind", str(path), str(path)]
    for entry in profile.write:
        path = _resolved(entry, root, home_dir)
        if not path.exists() and root in path.parents:
            path.mkdir(parents=True, exist_ok=True)  # a folder it may write in, made for it
        if path.exists():
            args += ["--bind", str(path), str(path)]
            args += _governed_in(path, root)
    args += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if profile.network != "host":
        args.append("--unshare-net")
    args += ["--new-session", "--die-with-parent", "--cap-drop", "ALL", "--chdir", cwd]
    return args


def _shown(
    profile: Profile, argv: list[str], root: Path, home: Path | None, hidden: list[Path]
) -> list[Path]:
    """What is bound read-only back into the hidden home and /tmp: the project, the program's
    installation, a file the command line names (a script) with its folder, and `read:`."""

    shown: list[Path] = [root] if _under(root, hidden) else []
    for program in _programs(argv[0]):
        if _under(program, hidden) and root not in program.parents:
            shown.append(program.parent.parent)  # its installation (…/bin/x: …)
    for argument in argv[1:]:
        named = Path(argument)
        if named.is_absolute() and named.exists() and _under(named.resolve(), hidden):
            folder = named.resolve() if named.is_dir() else named.resolve().parent
            if root not in (folder, *folder.parents):
                shown.append(folder)
    shown += [p for p in (_resolved(e, root, home) for e in profile.read) if p.exists()]
    return shown


def _programs(command: str) -> list[Path]:
    """The executable (as named and resolved) and, for a script, the interpreter its `#!` line
    names (found on PATH for `/usr/bin/env NAME`): what must be there for it to start."""
    if not os.path.isabs(command):
        return []
    # as named (a venv's bin/python) and as resolved (the interpreter it links to)
    found = [Path(os.path.abspath(command)), Path(command).resolve()]
    try:
        with open(command, "rb") as file:
            first = file.readline(256)
    except OSError:
        return found
    if first.startswith(b"#!"):
        words = first[2:].decode("utf-8", "replace").split()
        if words and words[0].endswith("/env") and len(words) > 1:
            words = [shutil.which(words[1]) or words[1]]
        if words and os.path.isabs(words[0]):
            found.append(Path(words[0]).resolve())
    return found


def _resolved(entry: str, root: Path, home: Path | None) -> Path:
    """A configured path, resolved (links followed): ~/... in the home, else below the root."""
    if entry == "~" or entry.startswith("~/"):
        base = home if home is not None else Path.home()
        return (base / entry[2:]).resolve()
    return (root / entry).resolve()


def _governed_in(folder: Path, root: Path) -> list[str]:
    """Read-only binds over the governed files inside a writable folder that exist now (one
    made later cannot replace them: the folder's own governed files are what is bound)."""
    found: list[str] = []
    names = [*POLICY_FILES, *CLIENT_FILES.values(), *OTHER_FILES]
    for name in names:
        path = root / name
        if path.exists() and (folder == root or folder in path.parents):
            found += ["--ro-bind", str(path), str(path)]
    return found


def contained(profile: Profile, argv: list[str]) -> list[str]:
    """`docker run ...` with the profile's options added after `run`, each one only where the
    configured options before the image do not already name it."""
    named = _run_options(argv[2:])
    root = Path(profile.root).resolve()
    added: list[str] = []
    if profile.network != "host" and not named & {"--network", "--net"}:
        added += ["--network", "none"]
    if "--read-only" not in named:
        added += ["--read-only"]
        if "--tmpfs" not in named:
            added += ["--tmpfs", "/tmp"]
    if not named & {"--memory", "-m"}:
        added += ["--memory", profile.memory.lower()]
    for entry, suffix in [*((e, "") for e in profile.write), *((e, ":ro") for e in profile.read)]:
        path = _resolved(entry, root, None)
        if path.exists():
            added += ["--volume", f"{path}:{path}{suffix}"]
    return [argv[0], argv[1], *added, *argv[2:]]


def _run_options(words: list[str]) -> set[str]:
    """The options given to `run` before the image (the first word that is no option or an
    option's value), by name (`--network`, `-m`)."""
    named: set[str] = set()
    index = 0
    while index < len(words) and words[index].startswith("-") and words[index] != "--":
        word = words[index]
        if word.startswith("--"):
            name = word.split("=", 1)[0]
            named.add(name)
            takes_value = "=" not in word and name not in _RUN_FLAGS
        else:  # -it, -m 512m, -m512m, -itv a:b
            takes_value = False
            for at, letter in enumerate(word[1:]):
                named.add(f"-{letter}")
                if letter not in _RUN_SHORT_FLAGS:  # it takes a value: the rest, or the next
                    takes_value = at == len(word) - 2
                    break
        index += 2 if takes_value else 1
    return named


def _limits(profile: Profile) -> dict[int, int]:
    """The resource limits (`resource.RLIMIT_*`) its processes start with."""
    import resource  # noqa: PLC0415 - POSIX only, and only for a sandboxed start

    amount = int(profile.memory[:-1]) * UNITS[profile.memory[-1]]
    limits = {resource.RLIMIT_DATA: amount, resource.RLIMIT_CORE: 0}
    if profile.cpu_seconds:
        limits[resource.RLIMIT_CPU] = profile.cpu_seconds
    return limits
