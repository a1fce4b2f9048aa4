import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The modules whose tests leave figures in a FIGURES list, printed at the end of the run.
FIGURE_MODULES = ("tests.test_shell_differential", "tests.test_http_bounds", "tests.test_snapshot_tree",
                  "tests.test_escape")


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
