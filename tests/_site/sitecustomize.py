"""Put on PYTHONPATH for the processes the suite starts (conftest.py), only while it measures them.

The suite measures the Python processes it starts (`[tool.coverage.run] patch` in
pyproject.toml): `bundlectl serve`, the console script. On Python 3.11 coverage traces every line
of every module, and tracing the third-party packages such a process imports — the MCP SDK's
above all — took half a second of CPU a start (`import mcp`: 0.8 s untraced, 1.2-1.4 s traced).
Only bundlectl is measured (`source`), so those imports run untraced: the same lines of bundlectl
are counted, and a start costs what it costs without coverage. Python runs this after the `.pth`
file that started coverage.
"""

import builtins
import sys
from typing import Any

_OURS = frozenset({"bundlectl", "tests"})


def _untraced_third_party_imports() -> None:
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


_untraced_third_party_imports()
