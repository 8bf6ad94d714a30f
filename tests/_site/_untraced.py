"""Coverage started where it measures something, and third-party imports untraced by it, in
the processes the suite starts (sitecustomize.py says why; the fork server's measured copies
call it too)."""

import builtins
import os
import sys
from types import ModuleType

# Every Python process the suite starts imports this module (sitecustomize.py): it imports no
# more than the interpreter has already loaded at start-up (no `pathlib`, no `typing`: ~25 ms a
# process, and most of them — launchers handing over to the fork server, test servers — need
# neither).

_OURS = frozenset({"bundlectl", "tests"})
# The suite's coverage configuration, under a name coverage's own `.pth` file does not read
# (conftest.py moves it there): that file imports coverage in every Python process it sees
# the configuration in (~0.25 s of CPU), the launchers handed over to the fork server and the
# test servers included, which measure nothing.
SUITE_COVERAGE = "BUNDLECTL_SUITE_COVERAGE"
_TESTS = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def measures_bundlectl(argv: list[str]) -> bool:
    """Whether the program `argv` (`sys.orig_argv`) may run bundlectl's code: code given with
    `-c`, bundlectl's modules and console script, any script outside the suite's own folder
    (a code-mode example, a docs example); not the suite's scripts (test servers, the
    conformance client, the scripted browser) nor other packages' modules and console scripts
    (mypy, mkdocs, lint-imports)."""
    arguments = iter(argv[1:])
    for argument in arguments:
        if argument == "-c":
            return True
        if argument == "-m":
            return next(arguments, "").partition(".")[0] == "bundlectl"
        if argument in ("-X", "-W"):
            next(arguments, None)
        elif not argument.startswith("-"):
            script = os.path.realpath(argument)
            folder, name = os.path.split(script)
            if folder == os.path.realpath(os.path.join(sys.prefix, "bin")):  # a console script
                return name == "bundlectl"
            return not (script + os.sep).startswith(_TESTS + os.sep)
    return False


def start_coverage() -> None:
    """Start measuring this process as coverage's `.pth` file would have, when the suite
    measures it."""
    config = os.environ.get(SUITE_COVERAGE)
    if not config:
        return
    os.environ["COVERAGE_PROCESS_CONFIG"] = config
    try:
        import coverage

        measured = coverage.process_startup()
    finally:
        # Coverage put its configuration back for this process's children: they read it from
        # the suite's name, and start it when they measure something.
        os.environ.pop("COVERAGE_PROCESS_CONFIG", None)
    _no_search_for_unexecuted_files(measured)
    untraced_third_party_imports()


def _no_search_for_unexecuted_files(measured: object) -> None:
    """As it saves, coverage walks `source` for the files this process never ran, to list them
    at 0 % (~20 ms of a process's ~40 ms save, hundreds of processes a run). The suite's own
    process does it for the whole run (pytest-cov): the others need not."""
    inorout = getattr(measured, "_inorout", None)
    if inorout is not None and hasattr(inorout, "find_possibly_unexecuted_files"):
        inorout.find_possibly_unexecuted_files = tuple


def untraced_third_party_imports() -> None:
    if "coverage" not in sys.modules or sys.gettrace() is None:
        return  # not measured: nothing to do
    imported = builtins.__import__
    modules = sys.modules

    def load(
        name: str,
        globs: dict[str, object] | None = None,
        locs: dict[str, object] | None = None,
        fromlist: tuple[str, ...] = (),
        level: int = 0,
    ) -> ModuleType:
        if level or name in modules or name.partition(".")[0] in _OURS:
            return imported(name, globs, locs, fromlist, level)
        tracer = sys.gettrace()
        if tracer is None:
            return imported(name, globs, locs, fromlist, level)
        sys.settrace(None)
        try:
            return imported(name, globs, locs, fromlist, level)
        finally:
            sys.settrace(tracer)

    builtins.__import__ = load
