import asyncio
import os
import sys
import unittest

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

class CheckedLoop(asyncio.SelectorEventLoop):
    """The tests' event loop: asyncio's debug checks that find bugs (a loop method called from
    another thread, a callback that holds the loop longer than slow_callback_duration, the origin
    of a coroutine never awaited), without the traceback of where each callback, future and task
    was made. That bookkeeping walks the stack and stats its files at every call_soon: it took a
    third of the suite's time, and a failure's own traceback says as much."""

    def __init__(self) -> None:
        super().__init__()
        self.set_debug(True)

    def get_debug(self) -> bool:
        # Handles, futures and tasks ask get_debug() whether to keep their source traceback; the
        # checks read the flag that set_debug sets, which stays on (a test may still turn it off).
        return False


def use_checked_loops() -> None:
    """Every loop of the test run a CheckedLoop: those of IsolatedAsyncioTestCase (its runner
    forces debug mode on) and of asyncio.run. The event loop policies that the second needs
    before Python 3.14 are deprecated from then on; there, test cases get it by loop_factory."""
    if sys.version_info >= (3, 13):
        unittest.IsolatedAsyncioTestCase.loop_factory = CheckedLoop
    if sys.version_info < (3, 14):
        class CheckedLoopPolicy(asyncio.DefaultEventLoopPolicy):
            def new_event_loop(self) -> asyncio.AbstractEventLoop:
                return CheckedLoop()
        asyncio.set_event_loop_policy(CheckedLoopPolicy())


use_checked_loops()

# The modules whose tests leave figures in a FIGURES list, printed at the end of the run.
FIGURE_MODULES = ("tests.test_shell_differential", "tests.test_http_bounds", "tests.test_snapshot_tree",
                  "tests.test_escape")


# The longest tests, longest first: pytest-xdist hands tests out in collection order, so these
# start at once on every worker instead of leaving one worker running the last of them alone.
# A prefix of a node id; tests/test_escape.py is also one group on one worker (its confined
# runs reuse the control runs), set by its xdist_group mark.
LONG_FIRST = ("tests/test_escape.py", "tests/test_shell_differential.py::test_shell_differential_no_misread_or_bypass",
              "tests/test_crash_undo.py", "tests/agent/test_stream_fast.py::test_the_fast_path_reads_every_stream",
              "tests/test_terminal_flood.py", "tests/test_disk_full.py", "tests/test_run_marks.py",
              "tests/ui/test_accessibility_ui.py")
BROWSER_TESTS = "tests/ui/"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items):
    """Start the long tests first (a stable sort: the rest keep their order), and keep each
    browser test module on one worker: its Totem and its Chromium (module fixtures) are made
    once, not once on each worker that got some of its tests."""
    def rank(item) -> int:
        return next((n for n, prefix in enumerate(LONG_FIRST) if item.nodeid.startswith(prefix)), len(LONG_FIRST))
    items.sort(key=rank)
    for item in items:
        if item.nodeid.startswith(BROWSER_TESTS) and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


def figures_here() -> list[str]:
    return [figure for name in FIGURE_MODULES for figure in getattr(sys.modules.get(name), "FIGURES", ())]


def pytest_sessionfinish(session):
    """In a worker of pytest-xdist, hand the figures to the controller, which prints them."""
    if hasattr(session.config, "workeroutput"):
        session.config.workeroutput["figures"] = figures_here()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    node.config.stash.setdefault(WORKER_FIGURES, []).extend(getattr(node, "workeroutput", {}).get("figures", ()))


WORKER_FIGURES = pytest.StashKey[list]()


def pytest_terminal_summary(terminalreporter, config):
    """Print the figures that tests/test_shell_differential.py, tests/test_http_bounds.py,
    tests/test_snapshot_tree.py and tests/test_escape.py leave in their FIGURES lists, from this
    process and from every worker."""
    for figure in figures_here() + config.stash.get(WORKER_FIGURES, []):
        terminalreporter.write_line(figure)
