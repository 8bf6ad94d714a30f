"""Put on PYTHONPATH for the processes the suite starts (conftest.py).

The suite measures the Python processes it starts (`[tool.coverage.run] patch` in
pyproject.toml): `bundlectl serve`, the console script. On Python 3.11 coverage traces every line
of every module, and tracing the third-party packages such a process imports — the MCP SDK's
above all — took half a second of CPU a start (`import mcp`: 0.8 s untraced, 1.2-1.4 s traced).
Only bundlectl is measured (`source`), so those imports run untraced (`_untraced.py`): the same
lines of bundlectl are counted, and a start costs what it costs without coverage. Coverage
itself is started here, not by its `.pth` file (importing it costs ~0.25 s of CPU): only in a
process that runs bundlectl's code and is not handed over (`_untraced.py`).

Then a bundlectl command that talks to servers (`WARM`), started as `python -m bundlectl ...` or
as the console script with no interpreter options, is handed over to the suite's fork server
(tests/servers/_forkserver.py): it runs in a copy that has the SDK and the other third-party
packages imported already, on this process's pipes, arguments, folder and environment, with
bundlectl imported and measured in the copy. Each such start spent ~1.5 s of CPU on imports,
~100 of them a run.
"""

import os
import sys

from _untraced import measures_bundlectl, start_coverage

# The commands that import the MCP SDK or an HTTP server: `approvals` for its page, `server` for
# the built-in servers (the others start in ~0.2 s and some tests read which modules they
# import: they start as they are).
WARM = frozenset({"serve", "exec", "auth", "tools", "approvals", "server"})


def _warm_start() -> None:
    argv = sys.orig_argv
    if argv[1:3] == ["-m", "bundlectl"]:
        command, run, path0 = argv[3:4], {"module": "bundlectl"}, None
    elif len(argv) > 1 and os.path.basename(argv[1]) == "bundlectl":
        command, run, path0 = argv[2:3], {"script": argv[1]}, None
    else:
        return
    if not command or command[0] not in WARM:
        return
    path0 = os.getcwd() if "module" in run else os.path.dirname(os.path.realpath(argv[1]))
    servers = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(__file__))), "servers")
    sys.path.insert(0, servers)
    try:
        from _forkserver import hand_over
    finally:
        sys.path.remove(servers)
    hand_over({**run, "measure": "1"}, path0=path0)


_warm_start()  # returns only when the program runs here
if measures_bundlectl(sys.orig_argv):
    start_coverage()
