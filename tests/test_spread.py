"""Work spread over forked processes (`bundlectl.spread`): the results of every share come back in
the items' order, and a child that fails in any way costs time, never a result. Each case runs in
a fresh interpreter: the test process has threads (xdist's), beside which nothing forks."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.conftest import REPO

HEAD = """
import os, signal, threading, time
from bundlectl import spread
spread.LEAST_PER_SHARE = 2
spread.cores = lambda: 3  # three shares whatever the machine has
HOME = os.getpid()
"""


def _ran(body: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", HEAD + textwrap.dedent(body)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_each_share_is_worked_in_its_own_process_and_comes_back_in_order() -> None:
    said = _ran(
        """
        found = spread.over_cores(lambda some: [(n * n, os.getpid()) for n in some], range(20))
        assert [v for v, _ in found] == [n * n for n in range(20)], found
        pids = {pid for _, pid in found}
        assert len(pids) == 3 and HOME in pids, pids
        assert all(found[i][1] == found[i % 3][1] for i in range(20))  # interleaved shares
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            print("reaped")
        """
    )
    assert said.strip() == "reaped"


def test_a_child_that_fails_costs_time_not_results() -> None:
    said = _ran(
        """
        def work(some):
            if os.getpid() != HOME and some[0] == 1:
                raise ValueError("only in the child")
            if os.getpid() != HOME and some[0] == 2:
                os.kill(os.getpid(), signal.SIGKILL)  # killed outright
            return [(n + 1, os.getpid()) for n in some]

        found = spread.over_cores(work, list(range(9)))
        assert [v for v, _ in found] == list(range(1, 10)), found
        assert {pid for _, pid in found} == {HOME}  # both failed shares were worked here
        print("ok")
        """
    )
    assert said.strip() == "ok"


def test_an_error_of_the_work_is_raised_here_and_no_child_is_left() -> None:
    said = _ran(
        """
        began = time.monotonic()

        def raised_and_none_left(work):
            try:
                spread.over_cores(work, list(range(9)))
            except KeyError:
                print("raised")
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                print("none left")
            assert time.monotonic() - began < 20

        def fails_here(some):
            if os.getpid() == HOME:
                raise KeyError("here")
            time.sleep(30)  # a child still working is stopped
            return list(some)

        def share_fails(some):  # in its child, then again here; the third share is slow
            if some[0] == 1:
                raise KeyError("share")
            if os.getpid() != HOME and some[0] == 2:
                time.sleep(30)
            return list(some)

        raised_and_none_left(fails_here)
        raised_and_none_left(share_fails)
        """
    )
    assert said.split() == ["raised", "none", "left"] * 2


def test_nothing_forks_beside_a_running_thread_or_for_a_few_items() -> None:
    said = _ran(
        """
        def pids(items):
            return {pid for pid in spread.over_cores(lambda s: [os.getpid() for _ in s], items)}

        assert pids(range(3)) == {HOME}  # fewer than two shares' worth
        assert len(pids(range(6))) == 3
        spread.cores = lambda: 64
        assert len(pids(range(200))) == spread.MOST_SHARES  # however many cores
        stop = threading.Event()
        beside = threading.Thread(target=stop.wait)
        beside.start()
        assert pids(range(60)) == {HOME}
        stop.set()
        beside.join()
        print("ok")
        """
    )
    assert said.strip() == "ok"
