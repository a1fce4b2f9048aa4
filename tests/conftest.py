import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def pytest_terminal_summary(terminalreporter):
    """Print the figures that tests/test_shell_differential.py, tests/test_http_bounds.py,
    tests/test_snapshot_tree.py and tests/test_escape.py leave in their FIGURES lists."""
    for name in ("tests.test_shell_differential", "tests.test_http_bounds", "tests.test_snapshot_tree",
                 "tests.test_escape"):
        for figure in getattr(sys.modules.get(name), "FIGURES", ()):
            terminalreporter.write_line(figure)
