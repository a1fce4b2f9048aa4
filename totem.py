#!/usr/bin/env python3
"""Totem launcher: `python totem.py [--config PATH]` serves; `python totem.py run ...` is the
headless client (totem/cli.py)."""
import sys

from totem.app import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
