"""Refresh the test assets under tests/assets/ from the npm registry: files the browser tests use
and Totem never serves (axe-core, which checks each screen's accessibility; the CommonMark
specification's examples, which tests/ui/test_markdown_ui.py renders).

Pinned and checked as scripts/vendor.py does (version and the registry's sha512 integrity), and
written with the package's licence and a VERSION file. Of `commonmark-spec`, its spec.txt is
written as spec.json: one object per example ({number, section, markdown, html}), as the
package's own index.js extracts them. Usage: `make test-assets` (or `python
scripts/test_assets.py`).
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
import tarfile

from vendor import ROOT, check, fetch, tarball_url, unpack

ASSETS = os.path.join(ROOT, "tests", "assets")

# (folder, package, version, sha512 integrity, files of the tarball to copy)
PACKAGES = (
    ("axe-core", "axe-core", "4.14.1",
     "sha512-FHfa+lmNjQZfJz1q8wKqIDwC6DExcHt/pkjNQb09a3NPjCKg2rhu5qb2S4r76ASyFNNtuFooJpZe37OgudVGtQ==",
     ("axe.min.js", "LICENSE")),
    ("commonmark", "commonmark-spec", "0.31.2",
     "sha512-vXKxmclzJPymhOJYD26G0oBjVmIcKC8p5m2DvHIq1A1btr1m0r0dT/PzRA5/nwxUbCAPedMNPEoiQE+zvuOcOw==",
     ("LICENSE",)),
)
# Packages whose file is written in another form: package -> that file of its tarball (spec.txt
# of commonmark-spec becomes spec.json).
CONVERTED = {"commonmark-spec": "spec.txt"}

# The package's index.js: an example is a fence of 32 backticks and `example`, its Markdown, a
# line with a dot, its HTML; a heading names the section of the examples after it.
EXAMPLE = re.compile(r"^`{32} example\n([\s\S]*?)^\.\n([\s\S]*?)^`{32}$|^#{1,6} *(.*)$", re.MULTILINE)


def spec_examples(spec: str) -> list[dict]:
    """The examples of the CommonMark specification's text, numbered from 1."""
    spec = re.sub(r"^<!-- END TESTS -->[\s\S]*", "", spec.replace("\r\n", "\n").replace("\r", "\n"),
                  flags=re.MULTILINE)
    found: list[dict] = []
    section = ""
    for match in EXAMPLE.finditer(spec):
        if match.group(3) is not None:
            section = match.group(3)
            continue
        found.append({"number": len(found) + 1, "section": section,
                      # The specification writes a tab as → so that it can be seen.
                      "markdown": match.group(1).replace("→", "\t"), "html": match.group(2).replace("→", "\t")})
    return found


def write_spec(data: bytes, target: str) -> None:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        stream = archive.extractfile(archive.getmember(f"package/{CONVERTED['commonmark-spec']}"))
        if stream is None:
            raise SystemExit("spec.txt is not a file in the tarball")
        examples = spec_examples(stream.read().decode("utf-8"))
    if not examples:
        raise SystemExit("no example found in spec.txt")
    with open(os.path.join(target, "spec.json"), "w", encoding="utf-8") as out:
        json.dump(examples, out, ensure_ascii=False, indent=0)
        out.write("\n")


def main() -> int:
    for folder, package, version, integrity, wanted in PACKAGES:
        data = fetch(tarball_url(package, version))
        check(data, integrity, f"{package}@{version}")
        target = os.path.join(ASSETS, folder)
        unpack(data, target, wanted)
        if package in CONVERTED:
            write_spec(data, target)
        with open(os.path.join(target, "VERSION"), "w") as out:
            out.write(f"{package}@{version} {integrity}\n{tarball_url(package, version)}\n")
        print(f"fetched {package}@{version} into tests/assets/{folder}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
