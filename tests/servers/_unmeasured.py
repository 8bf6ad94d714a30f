"""Imported first by the test servers (they run as scripts, so this folder is on sys.path).

The test run measures the Python processes it starts (`[tool.coverage.run] patch` in
pyproject.toml) so that `bundlectl serve` and the console script count. A test server is not
bundlectl, yet tracing it — above all its import of the MCP SDK — costs ~0.4 s of CPU a start,
and the suite starts hundreds: coverage stops here, before those imports. Only in a process
whose main script is a test server: a test that imports one (test_pinning) stays measured.

Such a process then hands itself over to the fork server when one runs (`_forkserver.py`): the
server runs in a warm copy that already imported the SDK, on this process's pipes.
"""

import os
import sys

_main = getattr(sys.modules.get("__main__"), "__file__", None) or ""
# (os.path, not pathlib: a launcher handing over to the fork server imports nothing it need not)
_ours = os.path.dirname(os.path.realpath(_main)) == os.path.dirname(os.path.realpath(__file__))
if "coverage" in sys.modules and _ours:
    import coverage

    _current = coverage.Coverage.current()
    if _current is not None:
        _current.stop()

if _ours:
    from _forkserver import SERVERS, hand_over

    if os.path.basename(_main) in SERVERS:  # a server started as a script: run it forked, warm
        hand_over()
