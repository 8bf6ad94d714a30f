"""Coverage's data from the processes the suite starts, combined while the tests run.

Every measured process writes a data file of its own when it ends (several hundred a run:
`bundlectl` commands, their warm copies in the fork server). pytest-cov combines them all once
the last test has run: ~8 s of one core while the other waits, at the very end of the run. The
controller — which runs no test under xdist — combines the files of processes that have ended
as it goes (into one file that the final combine reads like any other), so that only the last
few are left for the end. The data is the same: a file is read only once its process is gone
(it is written when the process ends), and removed only after the combined file holding it
is written.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import threading

_PID = re.compile(r"\.pid(\d+)\.")
_OURS = "suite-combined"
EVERY = 10.0  # seconds between two rounds


def _ended(path: str) -> bool:
    """Whether the process that writes `path` has ended (its pid is in coverage's suffix)."""
    found = _PID.search(os.path.basename(path))
    if found is None:
        return False  # not a file named as coverage names a process's data: left alone
    try:
        os.kill(int(found.group(1)), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False  # alive (or its pid taken again: left for the final combine)


class Precombiner:
    """A thread that folds the data files of ended processes into one, every `EVERY` s."""

    def __init__(self, data_file: str) -> None:
        self.base = os.path.abspath(data_file)
        self.stopping = threading.Event()
        self.rounds = 0
        self.combined: str | None = None  # the file holding what is folded so far
        self.thread = threading.Thread(target=self._run, name="precombine", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """Wait for a round under way to end, then stop (before pytest-cov combines)."""
        self.stopping.set()
        self.thread.join()

    def _run(self) -> None:
        while not self.stopping.wait(EVERY):
            try:
                self.fold()
            except Exception:  # never lose data: what is not folded is combined at the end
                return

    def fold(self) -> None:
        from coverage import CoverageData

        pattern = glob.escape(self.base) + ".*"
        ended = [p for p in sorted(glob.glob(pattern)) if _OURS not in p and _ended(p)]
        if not ended:
            return
        self.rounds += 1
        target = CoverageData(basename=self.base, suffix=f"{_OURS}.{os.getpid()}.{self.rounds}")
        inputs = [self.combined, *ended] if self.combined else ended
        for path in inputs:
            data = CoverageData(path, read_only=True)
            data.read()
            target.update(data)
        target.write()
        for path in inputs:
            with contextlib.suppress(OSError):
                os.remove(path)
        self.combined = target.data_filename()
