"""Third-party imports untraced by coverage, in the processes the suite measures
(sitecustomize.py says why; the fork server's measured copies call it too)."""

import builtins
import sys
from typing import Any

_OURS = frozenset({"bundlectl", "tests"})


def untraced_third_party_imports() -> None:
    if "coverage" not in sys.modules or sys.gettrace() is None:
        return  # not measured: nothing to do
    imported = builtins.__import__
    modules = sys.modules

    def load(
        name: str, globs: Any = None, locs: Any = None, fromlist: Any = (), level: int = 0
    ) -> Any:
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
