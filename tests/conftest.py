import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def pytest_terminal_summary(terminalreporter):
    """Print the figures that tests/test_shell_differential.py leaves in its FIGURES list."""
    module = sys.modules.get("tests.test_shell_differential")
    for figure in getattr(module, "FIGURES", ()):
        terminalreporter.write_line(figure)
