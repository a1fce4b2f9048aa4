"""Refresh the test assets under tests/assets/ from the npm registry: files the browser tests use
and Totem never serves (axe-core, which checks each screen's accessibility).

Pinned and checked as scripts/vendor.py does (version and the registry's sha512 integrity), and
written with the package's licence and a VERSION file. Usage: `make test-assets` (or
`python scripts/test_assets.py`).
"""

from __future__ import annotations

import os
import sys

from vendor import ROOT, check, fetch, tarball_url, unpack

ASSETS = os.path.join(ROOT, "tests", "assets")

# (folder, package, version, sha512 integrity, files of the tarball to copy)
PACKAGES = (
    ("axe-core", "axe-core", "4.14.1",
     "sha512-FHfa+lmNjQZfJz1q8wKqIDwC6DExcHt/pkjNQb09a3NPjCKg2rhu5qb2S4r76ASyFNNtuFooJpZe37OgudVGtQ==",
     ("axe.min.js", "LICENSE")),
)


def main() -> int:
    for folder, package, version, integrity, wanted in PACKAGES:
        data = fetch(tarball_url(package, version))
        check(data, integrity, f"{package}@{version}")
        target = os.path.join(ASSETS, folder)
        unpack(data, target, wanted)
        with open(os.path.join(target, "VERSION"), "w") as out:
            out.write(f"{package}@{version} {integrity}\n{tarball_url(package, version)}\n")
        print(f"fetched {package}@{version} into tests/assets/{folder}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
