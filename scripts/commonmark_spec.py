"""Refresh the CommonMark specification's examples, a test asset under tests/assets/commonmark/.

The npm package `commonmark-spec` is pinned (version and the registry's sha512 integrity); its
tarball is downloaded, checked, and its spec.txt read into spec.json, one object per example
({number, section, markdown, html}, as the package's own index.js extracts them), with the
package's licence and a VERSION file. tests/ui/test_markdown_ui.py renders every example in the
browser; Totem never serves these files. Usage: `make commonmark` (or `python
scripts/commonmark_spec.py`).
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
import tarfile

from vendor import check, fetch, tarball_url

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.path.join(ROOT, "tests", "assets", "commonmark")
PACKAGE = "commonmark-spec"
VERSION = "0.31.2"
INTEGRITY = "sha512-vXKxmclzJPymhOJYD26G0oBjVmIcKC8p5m2DvHIq1A1btr1m0r0dT/PzRA5/nwxUbCAPedMNPEoiQE+zvuOcOw=="

# The package's index.js: an example is a fence of 32 backticks and `example`, its Markdown, a
# line with a dot, its HTML; a heading names the section of the examples after it.
EXAMPLE = re.compile(r"^`{32} example\n([\s\S]*?)^\.\n([\s\S]*?)^`{32}$|^#{1,6} *(.*)$", re.MULTILINE)


def examples(spec: str) -> list[dict]:
    spec = re.sub(r"^<!-- END TESTS -->[\s\S]*", "", spec.replace("\r\n", "\n").replace("\r", "\n"), flags=re.MULTILINE)
    found: list[dict] = []
    section = ""
    for match in EXAMPLE.finditer(spec):
        if match.group(3) is not None:
            section = match.group(3)
            continue
        found.append({"number": len(found) + 1, "section": section,
                      # The spec writes a tab as → so that it can be seen.
                      "markdown": match.group(1).replace("→", "\t"), "html": match.group(2).replace("→", "\t")})
    return found


def read(archive: tarfile.TarFile, name: str) -> bytes:
    stream = archive.extractfile(archive.getmember(f"package/{name}"))
    if stream is None:
        raise SystemExit(f"{name} is not a file in the tarball")
    return stream.read()


def main() -> int:
    url = tarball_url(PACKAGE, VERSION)
    data = fetch(url)
    check(data, INTEGRITY, f"{PACKAGE}@{VERSION}")
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        spec = read(archive, "spec.txt").decode("utf-8")
        licence = read(archive, "LICENSE")
    found = examples(spec)
    if not found:
        raise SystemExit("no example found in spec.txt")
    os.makedirs(TARGET, exist_ok=True)
    with open(os.path.join(TARGET, "spec.json"), "w", encoding="utf-8") as out:
        json.dump(found, out, ensure_ascii=False, indent=0)
        out.write("\n")
    with open(os.path.join(TARGET, "LICENSE"), "wb") as out:
        out.write(licence)
    with open(os.path.join(TARGET, "VERSION"), "w", encoding="ascii") as out:
        out.write(f"{PACKAGE}@{VERSION} {INTEGRITY}\n{url}\n")
    print(f"wrote {len(found)} examples of {PACKAGE}@{VERSION} into tests/assets/commonmark/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
