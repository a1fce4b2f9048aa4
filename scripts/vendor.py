"""Refresh the browser libraries vendored under static/vendor/ from the npm registry.

Each package is pinned (version and the registry's sha512 integrity); its published tarball is
downloaded, checked, and the files the page loads are copied out as published, with the
package's licence and a VERSION file. Nothing is fetched at run time: the server only serves
what this wrote. Usage: `make vendor` (or `python scripts/vendor.py`).
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import sys
import tarfile
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENDOR = os.path.join(ROOT, "static", "vendor")
REGISTRY = "https://registry.npmjs.org"

# (folder, package, version, sha512 integrity, files of the tarball to copy)
PACKAGES = (
    ("xterm", "@xterm/xterm", "5.5.0",
     "sha512-hqJHYaQb5OptNunnyAnkHyM8aCjZ1MEIDTQu1iIbbTD/xops91NB5yq1ZK/dC2JDbVWtF23zUtl9JE2NqwT87A==",
     ("lib/xterm.js", "css/xterm.css", "LICENSE")),
    ("xterm-addon-fit", "@xterm/addon-fit", "0.10.0",
     "sha512-UFYkDm4HUahf2lnEyHvio51TNGiLK66mqP2JoATy7hRZeXaGMRDr00JiSF7m63vR5WKATF605yEggJKsw0JpMQ==",
     ("lib/addon-fit.js", "LICENSE")),
    # highlight.js's browser build with its common languages: a classic script that defines `hljs`.
    ("highlight", "@highlightjs/cdn-assets", "11.12.0",
     "sha512-KvOKXODaiFmId9xaq3xc5xCL66wVLUuOngDbO9B/kewbFTqdGbn2nJxNhN3H5R1cgDTVj6R8vH0zgiNDEGjpDw==",
     ("highlight.min.js", "LICENSE")),
    # markdown-it's browser build as an ES module (its dependencies bundled): static/markdown.js
    # imports it and builds the DOM from its tokens.
    ("markdown-it", "markdown-it", "15.0.3",
     "sha512-+Az7Ojz3iRGu8KYMvJ6xVhvrxP3eE+vEtJX75Ow88XBpcQNV/0lGX5ZynIIBftREo4DC2jsveAMDaeltmm8QvQ==",
     ("dist/browser/markdown-it.esm.min.mjs", "LICENSE")),
)


def tarball_url(package: str, version: str) -> str:
    name = package.rsplit("/", 1)[-1]
    return f"{REGISTRY}/{package}/-/{name}-{version}.tgz"


def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as answer:
        return answer.read()


def check(data: bytes, integrity: str, what: str) -> None:
    algorithm, _, expected = integrity.partition("-")
    actual = base64.b64encode(hashlib.new(algorithm, data).digest()).decode()
    if actual != expected:
        raise SystemExit(f"{what}: the tarball's {algorithm} is {actual}, not the pinned {expected}")


def unpack(data: bytes, folder: str, wanted: tuple[str, ...]) -> None:
    os.makedirs(folder, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        for name in wanted:
            member = archive.getmember(f"package/{name}")
            stream = archive.extractfile(member)
            if stream is None:
                raise SystemExit(f"{name} is not a file in the tarball")
            with open(os.path.join(folder, os.path.basename(name)), "wb") as out:
                out.write(stream.read())


def main() -> int:
    for folder, package, version, integrity, wanted in PACKAGES:
        data = fetch(tarball_url(package, version))
        check(data, integrity, f"{package}@{version}")
        target = os.path.join(VENDOR, folder)
        unpack(data, target, wanted)
        with open(os.path.join(target, "VERSION"), "w") as out:
            out.write(f"{package}@{version} {integrity}\n{tarball_url(package, version)}\n")
        print(f"vendored {package}@{version} into static/vendor/{folder}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
