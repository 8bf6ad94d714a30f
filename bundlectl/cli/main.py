"""Command-line entry point: parse, dispatch to `bundlectl.cli.commands.*`, map errors to exits.

The commands are declared by area (`project_commands`, `policy_commands`, `client_commands`,
`call_commands`) on the app of `bundlectl.cli.app`; importing them here registers them.
"""

from __future__ import annotations

import functools
import gc
import os
import sys
from typing import TYPE_CHECKING

import typer

from bundlectl.cli import (  # noqa: F401 - they register the commands
    call_commands,
    client_commands,
    completion,
    policy_commands,
    project_commands,
)
from bundlectl.cli.app import Invocation, app
from bundlectl.cli.process_exit import leave
from bundlectl.output import err

if TYPE_CHECKING:
    from typer._click import Command


def main(argv: list[str] | None = None, *, fast_exit: bool = False) -> int:
    """Run the CLI and return its exit code; every expected failure ends in a message."""
    # pydantic scans every installed distribution for plugins on first use (~20 ms); bundlectl
    # uses none. Users can still opt in by setting the variable themselves.
    if os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__") == "__all__":
        _no_pydantic_plugins()
    from bundlectl.errors import BundlectlError

    invocation = Invocation(fast_exit=fast_exit)
    args = _root_flags_first(sys.argv[1:] if argv is None else argv)
    if fast_exit and _command_name(args) not in _LONG_RUNNING:
        # The cyclic garbage collector finds next to nothing to free in a command that reads
        # files and prints, yet on 3,000 agents it took a quarter of the time (collections
        # triggered by millions of new objects); the process ends right after the command.
        gc.disable()
    try:
        _text_only(args)
        run = _built(_known_name(args))
        result = run.main(args=args, prog_name="bundlectl", standalone_mode=False, obj=invocation)
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        return 130
    except typer.TyperException as exc:  # usage errors from parsing: exit 2, no traceback
        show = getattr(exc, "show", None)
        if callable(show):
            show()
        else:
            err(f"error: {exc.format_message()}")
        return exc.exit_code
    except BundlectlError as exc:
        from bundlectl.cli import error_handler

        return error_handler.failure(exc, debug=_debug(invocation))
    except KeyboardInterrupt:
        err("interrupted")
        return 130
    except Exception as exc:
        from bundlectl.cli import error_handler

        return error_handler.crash(exc, debug=_debug(invocation))
    return result if isinstance(result, int) else 0


def _text_only(args: list[str]) -> None:
    """Every argument is UTF-8 text: the OS hands bytes that are not as lone surrogates
    (`\\udcff`), which no name, path, argument or audit record can hold — bad input (exit 2),
    before anything is read or started, whatever the command (#52 item 7)."""
    from bundlectl.errors import UsageError

    for position, arg in enumerate(args, 1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            raise UsageError(
                f"argument {position} ({arg!r}) holds bytes that are not UTF-8 text",
                hint="names, paths and arguments are UTF-8 text; check the terminal's encoding",
            ) from None


_ROOT_VALUES = ("-c", "--config")  # root options that take a value


_ROOT_FLAGS = ("--no-user-config",)  # root flags also accepted after the command


def _root_flags_first(args: list[str]) -> list[str]:
    """`bundlectl lint --no-user-config` as `bundlectl --no-user-config lint`: a CI line reads
    naturally either way (before any `--`, after which everything is an argument)."""
    end = args.index("--") if "--" in args else len(args)
    flags = [a for a in args[:end] if a in _ROOT_FLAGS]
    if not flags:
        return args
    rest = [a for a in args[:end] if a not in _ROOT_FLAGS]
    return [*dict.fromkeys(flags), *rest, *args[end:]]


def _with_epilogs() -> None:
    """Each command's `--help` ends with examples and its exit codes (`helptext.HELP`)."""
    from typer.main import get_command_name

    from bundlectl.cli import helptext

    groups = [(app, "")] + [(g.typer_instance, f"{g.name} ") for g in app.registered_groups]
    for group, prefix in groups:
        if group is None:
            continue
        for info in group.registered_commands:
            name = info.name or get_command_name(info.callback.__name__ if info.callback else "")
            info.epilog = helptext.epilog(prefix + name)


_with_epilogs()


def _known_name(args: list[str]) -> str | None:
    """The command word of `args` when the app has such a command or group, else None."""
    from typer.main import get_command_name

    name = _command_name(args)
    if name is None:
        return None
    known = [info.name for info in app.registered_groups] + [
        info.name or get_command_name(info.callback.__name__ if info.callback else "")
        for info in app.registered_commands
    ]
    return name if name in known else None


@functools.cache
def _built(name: str | None) -> Command:
    """The click command that runs `name`, built once per process: the app with only that
    command (typer builds — and evaluates the annotations of — every command's parameters it
    is given: ~80 ms for all of them, 4-10 ms for one), or the whole app when no known command
    is named (root `--help`, a typo), so help and suggestions list all. Click's commands hold
    no state of a run (each run has its own context): a process that runs `main()` again — a
    test, a batch — reuses them."""
    import copy

    from typer.main import get_command, get_command_name

    if name is None:
        return get_command(app)
    narrow = copy.copy(app)
    narrow.registered_commands = [
        info
        for info in app.registered_commands
        if (info.name or get_command_name(info.callback.__name__ if info.callback else "")) == name
    ]
    narrow.registered_groups = [info for info in app.registered_groups if info.name == name]
    return get_command(narrow)


def _no_pydantic_plugins() -> None:
    """With plugins disabled, pydantic's plugin loader answers "none", but importing it imports
    `importlib.metadata` first (~10 ms, a tenth of a command's start-up). A module with the same
    answer stands in for it (tests/cli/test_cli.py checks that pydantic still asks it)."""
    name = "pydantic.plugin._loader"
    if name not in sys.modules:
        import types

        loader = types.ModuleType(name, "pydantic plugins: disabled by bundlectl")
        loader.get_plugins = tuple  # type: ignore[attr-defined]
        sys.modules[name] = loader


def _command_name(args: list[str]) -> str | None:
    """The command word of a command line (after the root options), if there is one."""
    position = 0
    while position < len(args) and args[position].startswith("-"):
        position += 2 if args[position] in _ROOT_VALUES else 1
    return args[position] if position < len(args) else None


# Commands that may run for hours (a gateway, a built-in server, a batch of calls): the
# collector stays on.
_LONG_RUNNING = frozenset({"serve", "server", "exec"})


def _debug(invocation: Invocation) -> bool:
    # --debug, or $BUNDLECTL_DEBUG when the command line failed before it was read.
    return invocation.debug or os.environ.get("BUNDLECTL_DEBUG", "") not in ("", "0")


def entry() -> None:
    """The `bundlectl` console script: `main()`, then a fast exit.

    Tearing down the interpreter — every module, the pydantic models (the MCP SDK alone has
    ~1,500) — takes 40-100 ms for a command that reads a manifest and about 0.3 s after
    talking to a server, and achieves nothing for a finished command. Everything bundlectl
    writes is closed or unbuffered by then (files are written atomically and closed, the audit
    log with `os.write`, a server's stderr copy is closed by the call), so once stdout and
    stderr are flushed we leave at once.
    """
    leave(main(fast_exit=True))
