"""Benchmark of painting a streaming answer: static/markdown.js in headless Chromium.

An answer of ANSWER_KB KB (headings, paragraphs with links and code spans, reference links
defined after their use, lists, tables and more than 64 Python code blocks, so past the
highlighting cache) is painted into one element as it streams: first in large steps up to
NEAR_END_KB KB, then in DELTA_CHARS-character deltas to the end, each timed. Figures: the
median and the largest time of one of those deltas (the target is a frame, 16 ms: the
conversation paints once per frame), and for comparison a one-shot render of the whole answer,
what every delta cost when each paint built the answer again.

The page is served by a small server of this process from static/ (the files the page loads, as
Totem serves them) and a page of the benchmark's own; Chromium prints the figures with
--dump-dom. Without Chromium at CHROMIUM, the figure says so. It measures and reports; it asserts
nothing.
"""

from __future__ import annotations

import html
import http.server
import json
import os
import re
import subprocess
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STATIC = os.path.join(ROOT, "static")
CHROMIUM = "/usr/bin/chromium-headless-shell"  # as tests/ui/harness.py
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ANSWER_KB = 200
NEAR_END_KB = 180
DELTA_CHARS = 40
TARGET_MS = 16.0
TIMEOUT_S = 300
NAME = f"markdown: streaming paint per delta near {ANSWER_KB} KB"

PAGE = """<!doctype html><meta charset="utf-8"><title>markdown bench</title>
<script src="/vendor/highlight/highlight.min.js"></script>
<script type="module" src="/bench/markdown.js"></script><pre id="result"></pre>"""

# Runs as the page loads (a module's top level), so that --dump-dom prints its result.
SCRIPT = """import { renderMarkdown, renderMarkdownInto } from '/markdown.js';
const section = (n) => `## Section ${n}\\n\\nSome *text* with \\`code*${n}*\\` and https://example.com/${n}_(x),
over two lines, with [a reference][ref${n}].\\n\\n- item a\\n- item b\\n\\n  still b\\n\\n` +
  `1. Run:\\n\\n   \\`\\`\\`python\\n   def f${n}(x):\\n       # Say hello.\\n` +
  `       return x * ${n}\\n   \\`\\`\\`\\n` +
  `2. Check it.\\n\\n| a | b |\\n|---|--:|\\n| ${n} | **${n * 2}** |\\n\\n> quoted ${n}\\n\\n[ref${n}]: https://example.com/ref/${n}\\n\\n`;
let text = '';
for (let n = 0; text.length < ANSWER_CHARS; n += 1) text += section(n);
text = text.slice(0, ANSWER_CHARS);
const box = document.createElement('div');
document.body.append(box);
for (let at = 20000; at <= NEAR_END_CHARS; at += 20000) renderMarkdownInto(box, text.slice(0, at), { complete: false });
const times = [];
for (let at = NEAR_END_CHARS + DELTA_CHARS; at < text.length; at += DELTA_CHARS) {
  const started = performance.now();
  renderMarkdownInto(box, text.slice(0, at), { complete: false });
  times.push(performance.now() - started);
}
renderMarkdownInto(box, text, { complete: false });
const started = performance.now();
const whole = document.createElement('div');
whole.append(renderMarkdown(text, { complete: false }));
const oneShot = performance.now() - started;
times.sort((a, b) => a - b);
document.getElementById('result').textContent = JSON.stringify({
  median: times[Math.floor(times.length / 2)], max: times[times.length - 1], deltas: times.length, oneShot,
  codeBlocks: box.querySelectorAll('.codeblock').length, same: box.innerHTML === whole.innerHTML,
});
""".replace("ANSWER_CHARS", str(ANSWER_KB * 1000)).replace("NEAR_END_CHARS", str(NEAR_END_KB * 1000)) \
    .replace("DELTA_CHARS", str(DELTA_CHARS))

TYPES = {".js": "text/javascript; charset=utf-8", ".mjs": "text/javascript; charset=utf-8",
         ".html": "text/html; charset=utf-8"}


class Handler(http.server.BaseHTTPRequestHandler):
    """The benchmark's page and script, and the files of static/ (nothing above it)."""

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/bench/markdown.html":
            self.answer(PAGE.encode(), ".html")
            return
        if path == "/bench/markdown.js":
            self.answer(SCRIPT.encode(), ".js")
            return
        file_path = os.path.realpath(os.path.join(STATIC, path.lstrip("/")))
        if not file_path.startswith(STATIC + os.sep) or not os.path.isfile(file_path):
            self.send_error(404)
            return
        with open(file_path, "rb") as handle:
            self.answer(handle.read(), os.path.splitext(file_path)[1])

    def answer(self, body: bytes, ext: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", TYPES.get(ext, "application/octet-stream"))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:
        pass


def measure() -> dict:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="markdown-bench", daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/bench/markdown.html"
        done = subprocess.run([CHROMIUM, *CHROMIUM_ARGS, "--dump-dom", url], capture_output=True,
                              text=True, timeout=TIMEOUT_S, check=False)
    finally:
        server.shutdown()
        server.server_close()
    found = re.search(r'<pre id="result">(.*?)</pre>', done.stdout, re.DOTALL)
    if not found or not found.group(1):
        raise RuntimeError(f"Chromium printed no result (exit {done.returncode}): {done.stderr[-2000:]}")
    return json.loads(html.unescape(found.group(1)))


def main() -> list[tuple]:
    if not os.path.exists(CHROMIUM):
        return [(NAME, "not measured", "", f"Chromium is not at {CHROMIUM}", None)]
    result = measure()
    if not result["same"]:
        raise RuntimeError("the streamed paint differs from a one-shot render of the same answer")
    return [
        (f"{NAME} (median of {result['deltas']})", float(result["median"]), "ms", f"< {TARGET_MS:.0f} ms",
         result["median"] < TARGET_MS),
        (f"{NAME} (largest)", float(result["max"]), "ms", None, None),
        (f"markdown: one-shot render of {ANSWER_KB} KB ({result['codeBlocks']} code blocks)", float(result["oneShot"]),
         "ms", None, None),
    ]
