"""Imported first by the test servers (they run as scripts, so this folder is on sys.path).

The test run measures the Python processes it starts (`[tool.coverage.run] patch` in
pyproject.toml) so that `bundlectl serve` and the console script count. A test server is not
bundlectl, yet tracing it — above all its import of the MCP SDK — costs ~0.4 s of CPU a start,
and the suite starts hundreds: coverage stops here, before those imports.
"""

import sys

if "coverage" in sys.modules:
    import coverage

    _current = coverage.Coverage.current()
    if _current is not None:
        _current.stop()
