"""`make bench`: run every benchmark module in bench/ and print their figures in one table.

Each module in BENCHMARKS exposes `main()`, which returns rows of
`(name, value, unit, target_text, met)`: `met` is True or False when the row has a target, None
when the figure is only informative. Targets are reported, never asserted: the exit status is 0
when every module ran, even if targets were missed, and 1 only when a module itself failed (a
broken bench, not a slow server). Only the standard library is used, so the runtime venv is
enough.

Usage: `python bench/run.py [module ...]` (all of BENCHMARKS when none is named).
To add a benchmark, write `bench/<name>.py` with a `main()` as above and add its name here.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import time
import traceback

# Run in this order; each is a module of bench/ with `main() -> list[Row]`.
BENCHMARKS = ("startup", "agent", "relay", "flush", "snapshots", "long_session", "messages", "mcp_tools", "grep",
              "sandbox", "memory", "terminal_flood", "long_prompt", "markdown")

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
STATUS_TEXT = {True: "met", False: "NOT MET", None: ""}
HEADERS = ("benchmark", "value", "unit", "target", "status")


def format_value(value) -> str:
    """A figure as the table shows it: floats with 3 decimals below 1, 2 below 100, none above."""
    if isinstance(value, float):
        if value >= 100:
            return f"{value:,.0f}"
        if value >= 1:
            return f"{value:.2f}"
        return f"{value:.3f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def print_table(rows: list[tuple]) -> None:
    """Print rows of (name, value, unit, target_text, met) as aligned columns."""
    cells = [HEADERS] + [(name, format_value(value), unit, target or "", STATUS_TEXT[met])
                         for name, value, unit, target, met in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(HEADERS))]
    for index, row in enumerate(cells):
        name, value, unit, target, status = row
        print(f"{name:<{widths[0]}}  {value:>{widths[1]}}  {unit:<{widths[2]}}  "
              f"{target:<{widths[3]}}  {status}".rstrip())
        if index == 0:
            print("  ".join("-" * width for width in widths))


def describe_host() -> str:
    """CPUs and load average: timings mean little when other work shares the machine."""
    text = f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}"
    try:
        with open("/proc/loadavg", encoding="ascii") as handle:
            text += f", load average {' '.join(handle.read().split()[:3])} at the start"
    except OSError:
        pass
    return text


def run_benchmark(name: str) -> list[tuple]:
    """Import bench/<name>.py and return its rows. Raises whatever the module raises."""
    module = importlib.import_module(name)
    rows = list(module.main())
    for row in rows:
        if len(row) != 5:
            raise ValueError(f"{name}.main() returned a row of {len(row)} fields, not 5: {row!r}")
    return rows


def exit_on_sigterm(signum, frame) -> None:
    """Unwind like Ctrl-C does, so that every benchmark stops its servers and removes its folders."""
    raise SystemExit(128 + signum)


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, exit_on_sigterm)
    names = argv or list(BENCHMARKS)
    unknown = [name for name in names if name not in BENCHMARKS]
    if unknown:
        print(f"bench: unknown benchmark {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}",
              file=sys.stderr)
        return 2
    if BENCH_DIR not in sys.path:
        sys.path.insert(0, BENCH_DIR)
    host = describe_host()
    started = time.perf_counter()
    rows: list[tuple] = []
    failed = []
    for name in names:
        print(f"bench: running {name} ...", file=sys.stderr, flush=True)
        try:
            rows.extend(run_benchmark(name))
        except KeyboardInterrupt:
            raise
        except Exception:
            traceback.print_exc()
            failed.append(name)
    print()
    print(host)
    print()
    print_table(rows)
    missed = sum(1 for row in rows if row[4] is False)
    print()
    print(f"{len(rows)} figures, {missed} target(s) not met, "
          f"{time.perf_counter() - started:.1f} s in all")
    if failed:
        print(f"bench: {', '.join(failed)} failed (traceback above)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        print("bench: interrupted", file=sys.stderr)
        sys.exit(130)
