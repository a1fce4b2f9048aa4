"""The body of a fetched document as text for the model; HTML through `html.parser`.

Owns: choosing by media type (HTML converted, text types decoded, anything else described in a
line, never its bytes) and the charset (a byte order mark, then the declared charset, then an
HTML `<meta charset>`, else UTF-8, bad bytes replaced); and the HTML conversion: dropping what is
not content (scripts, styles, templates, SVG, ...), headings as `#` lines, paragraphs, list items
as `- `, links as `text (absolute url)`, `pre` blocks verbatim in fences, table rows with cells
joined by ` | `, whitespace collapsed and entities decoded.

Must not: fetch anything, follow a link, run a script, or decide what a page may do: the text it
returns is untrusted data like any other tool output (the agent loop marks it so).
"""

from __future__ import annotations

import codecs
import re
from html.parser import HTMLParser
from urllib.parse import urljoin

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
# Returned as text besides text/*, */*+json and */*+xml.
TEXT_TYPES = frozenset({
    "application/json", "application/xml", "application/javascript", "application/ecmascript",
    "application/x-javascript", "application/yaml", "application/x-yaml", "application/toml",
    "application/x-sh", "application/sql", "application/graphql", "application/x-ndjson",
    "application/markdown", "image/svg+xml"})
# Without a media type, a NUL byte this close to the start means binary.
BINARY_SNIFF_BYTES = 8192
# Elements whose content is never text for a reader.
SKIPPED_TAGS = frozenset({"script", "style", "noscript", "template", "svg", "math", "iframe",
                          "object", "embed", "canvas", "select", "datalist"})
# Elements that start and end a block of text (a paragraph boundary).
BLOCK_TAGS = frozenset({
    "p", "div", "section", "article", "header", "footer", "main", "nav", "aside", "blockquote",
    "figure", "figcaption", "form", "fieldset", "legend", "dl", "dt", "dd", "address", "details",
    "summary", "ul", "ol", "menu", "center", "caption", "body", "html", "hgroup", "search"})
HEADING_TAGS = {f"h{level}": level for level in range(1, 7)}
CELL_TAGS = frozenset({"td", "th"})
LIST_TAGS = frozenset({"ul", "ol", "menu"})
MAX_LIST_INDENT = 6  # nesting levels shown as indentation; deeper lists stay at this level
# Tags that never have an end tag: `<br>` and `<br/>` mean the same.
VOID_TAGS = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta",
                       "source", "track", "wbr"})
# Link targets that say nothing to a reader of the text.
SILENT_SCHEMES = ("javascript:", "data:", "vbscript:")
# The HTML standard's prescan for <meta charset> looks at the first 1024 bytes; pages with a long
# head put it later, so look a little further.
META_PRESCAN_BYTES = 4096
_META_CHARSET = re.compile(rb"""<meta[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.I)
_WHITESPACE = re.compile(r"\s+")
# Stands for a line break (`<br>`) inside collected inline text until it is collapsed; NUL bytes
# of the page are replaced before they can be confused with it.
_BREAK = "\x00"


def body_text(body: bytes, media_type: str, charset: str | None, url: str) -> str:
    """The body as text: HTML converted (links resolved against `url`), text types decoded,
    anything else described. `media_type` is lower-case without parameters ("" when the server
    sent none: the body is sniffed); `charset` a codec name from the Content-Type, or None."""
    if not body:
        return "(empty body)"
    if media_type in HTML_TYPES or (not media_type and _looks_like_html(body)):
        charset = _bom_charset(body) or charset or meta_charset(body) or "utf-8"
        return html_to_text(body.decode(charset, "replace"), url) or "(no text in the page)"
    if _is_text_type(media_type) or (not media_type and b"\x00" not in body[:BINARY_SNIFF_BYTES]):
        return body.decode(_bom_charset(body) or charset or "utf-8", "replace")
    return f"[{media_type or 'binary'} content of {len(body)} bytes; not shown: fetch returns text only]"


def html_to_text(html: str, base_url: str) -> str:
    """The readable text of an HTML document; relative links are resolved against `base_url`
    (or the document's own `<base href>`). Never raises on malformed HTML."""
    converter = _Converter(base_url)
    converter.feed(html.replace(_BREAK, "\ufffd"))
    converter.close()
    return converter.text()


def meta_charset(data: bytes) -> str | None:
    """The charset declared by `<meta charset>` or `<meta http-equiv content="...charset=...">`
    near the start of an HTML document, as a Python codec name; None when absent or unknown."""
    found = _META_CHARSET.search(data[:META_PRESCAN_BYTES])
    if not found:
        return None
    return codec_name(found.group(1).decode("ascii", "replace"))


def codec_name(label: str) -> str | None:
    """The Python codec for a charset label, or None when Python does not know it."""
    try:
        name = codecs.lookup(label.strip().strip("\"'")).name
        b"a".decode(name, "replace")  # refuses codecs that are not text (base64, zlib, idna)
    except (LookupError, ValueError):  # UnicodeError is a ValueError
        return None
    # The web's "iso-8859-1" and "ascii" mean windows-1252 (WHATWG Encoding, "labels").
    return "cp1252" if name in ("latin-1", "iso8859-1", "ascii") else name


def _is_text_type(media_type: str) -> bool:
    return media_type.startswith("text/") or media_type in TEXT_TYPES or \
        media_type.endswith(("+json", "+xml"))


def _looks_like_html(body: bytes) -> bool:
    start = body[:BINARY_SNIFF_BYTES].lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    return start.startswith((b"<!doctype html", b"<html", b"<head", b"<body"))


def _bom_charset(body: bytes) -> str | None:
    # WHATWG Encoding, "decode": a byte order mark wins over any declared charset.
    if body.startswith(codecs.BOM_UTF8):
        return "utf-8-sig"
    if body.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-16"
    return None


def _collapse(text: str) -> str:
    lines = (_WHITESPACE.sub(" ", line).strip() for line in text.split(_BREAK))
    return "\n".join(line for line in lines if line)


class _Converter(HTMLParser):
    """Collects blocks of text as (kind, text): kind "li" and "row" lines sit together, every
    other block is set apart by a blank line."""

    def __init__(self, base_url: str) -> None:
        super().__init__(convert_charrefs=True)
        self._base = base_url
        self._blocks: list[tuple[str, str]] = []
        self._inline: list[str] = []  # the text of the block being collected
        self._kind = "p"  # p, h1..h6 or li: how that block is shown
        self._skipping: list[str] = []  # open skipped elements
        self._title: list[str] | None = None
        self._titles: list[str] = []
        self._pre: list[str] | None = None
        self._pre_depth = 0
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._lists: list[str] = []
        self._links: list[tuple[str | None, list[str], int]] = []  # (url, sink, start)

    # -- the parser's callbacks -------------------------------------------------------------

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._skipping:
            if tag == self._skipping[-1]:
                self._skipping.append(tag)  # nested <svg> in <svg>
            return
        if tag in SKIPPED_TAGS:
            self._skipping.append(tag)
            return
        if tag == "title" and self._pre is None:
            self._title = []
        elif tag == "base":
            href = dict(attrs).get("href")
            if href:
                self._base = urljoin(self._base, href.strip())
        elif tag == "pre":
            if self._pre is None:
                self._end_block()
                self._pre = []
            self._pre_depth += 1
        elif self._pre is not None:
            if tag == "br":
                self._pre.append("\n")
        elif tag in HEADING_TAGS:
            self._end_block()
            self._kind = tag
        elif tag == "li":
            self._end_block()
            self._kind = "li"
        elif tag in LIST_TAGS:
            self._end_block()
            self._lists.append(tag)
        elif tag == "tr":
            self._end_row()
            self._row = []
        elif tag in CELL_TAGS:
            self._end_cell()
            if self._row is None:
                self._end_block()
                self._row = []
            self._cell = []
        elif tag == "table":
            self._end_block()
        elif tag == "br":
            self._sink().append(_BREAK if self._cell is None else " ")
        elif tag == "hr":
            self._end_block()
            self._blocks.append(("p", "---"))
        elif tag == "a":
            self._end_link()  # an <a> inside an open <a> closes it (HTML's parsing rules)
            self._links.append((self._link_url(dict(attrs).get("href")), self._sink(), len(self._sink())))
        elif tag == "img":
            alt = (dict(attrs).get("alt") or "").strip()
            if alt and self._links:
                self._sink().append(alt)
        elif tag == "code":
            self._sink().append("`")
        elif tag in BLOCK_TAGS:
            self._end_block()
        elif tag in ("input", "button", "label"):
            self._sink().append(" ")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in VOID_TAGS:
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        if self._skipping:
            if tag in self._skipping:  # close the innermost open one, and what it holds
                del self._skipping[len(self._skipping) - 1 - self._skipping[::-1].index(tag):]
            return
        if tag == "title" and self._title is not None:
            title = _collapse("".join(self._title))
            if title:
                self._titles.append(title)
            self._title = None
        elif tag == "pre":
            self._pre_depth = max(self._pre_depth - 1, 0)
            if self._pre is not None and not self._pre_depth:
                self._end_pre()
        elif self._pre is not None:
            return
        elif tag in HEADING_TAGS or tag == "li":
            self._end_block()
        elif tag in LIST_TAGS:
            self._end_block()
            if tag in self._lists:
                del self._lists[len(self._lists) - 1 - self._lists[::-1].index(tag):]
        elif tag in CELL_TAGS:
            self._end_cell()
        elif tag in ("tr", "table"):
            self._end_row()
        elif tag == "a":
            self._end_link()
        elif tag == "code":
            sink = self._sink()
            if sink and sink[-1] == "`":
                sink.pop()  # an empty <code></code>
            else:
                sink.append("`")
        elif tag in BLOCK_TAGS:
            self._end_block()

    def handle_data(self, data: str) -> None:
        if self._skipping:
            return
        if self._title is not None:
            self._title.append(data)
        elif self._pre is not None:
            self._pre.append(data)
        else:
            self._sink().append(data)

    def close(self) -> None:
        super().close()
        self._skipping.clear()
        if self._pre is not None:
            self._end_pre()
        self._end_row()
        self._end_block()

    # -- blocks -------------------------------------------------------------------------------

    def text(self) -> str:
        """The collected blocks, the page title first."""
        blocks = [("p", f"Title: {self._titles[0]}")] if self._titles else []
        blocks += self._blocks
        out: list[str] = []
        previous = ""
        for kind, text in blocks:
            if out:
                out.append("\n" if kind == previous and kind in ("li", "row") else "\n\n")
            out.append(text)
            previous = kind
        return "".join(out)

    def _sink(self) -> list[str]:
        return self._cell if self._cell is not None else self._inline

    def _end_block(self) -> None:
        if self._cell is not None:
            self._cell.append(" ")  # blocks inside a table cell stay on the row
            return
        old, self._inline = self._inline, []
        # A link around several blocks (<a><h3>..</h3><p>..</p></a>) is shown after the first
        # block that has text; it goes on over the next blocks without its url.
        links = []
        for url, sink, start in self._links:
            if sink is old:
                if url is not None and self._show_link(url, old, start):
                    url = None
                sink, start = self._inline, 0
            links.append((url, sink, start))
        self._links = links
        text = _collapse("".join(old))
        kind, self._kind = self._kind, "p"
        if not text:
            return
        if kind in HEADING_TAGS:
            text = "#" * HEADING_TAGS[kind] + " " + text.replace("\n", " ")
        elif kind == "li":
            indent = "  " * min(max(len(self._lists) - 1, 0), MAX_LIST_INDENT)
            text = indent + "- " + text.replace("\n", "\n" + indent + "  ")
        self._blocks.append((kind, text))

    def _end_pre(self) -> None:
        text = "".join(self._pre or ())
        self._pre = None
        self._pre_depth = 0
        if text.startswith("\n"):
            text = text[1:]  # HTML drops the newline right after <pre>
        text = text.rstrip()
        if text.strip():
            fence = "````" if "```" in text else "```"
            self._blocks.append(("pre", f"{fence}\n{text}\n{fence}"))

    def _end_cell(self) -> None:
        if self._cell is None or self._row is None:
            self._cell = None
            return
        self._links = [link for link in self._links if link[1] is not self._cell]
        self._row.append(_collapse("".join(self._cell)).replace("\n", " "))
        self._cell = None

    def _end_row(self) -> None:
        self._end_cell()
        if self._row is not None and any(self._row):
            self._blocks.append(("row", " | ".join(self._row)))
        self._row = None

    # -- links --------------------------------------------------------------------------------

    def _link_url(self, href: str | None) -> str | None:
        href = (href or "").strip()
        if not href or href.startswith("#") or href.lower().startswith(SILENT_SCHEMES):
            return None
        return urljoin(self._base, href)

    def _end_link(self) -> None:
        if not self._links:
            return
        url, sink, start = self._links.pop()
        if url is not None and sink is self._sink():
            self._show_link(url, sink, start)

    @staticmethod
    def _show_link(url: str, sink: list[str], start: int) -> bool:
        """Add ` (url)` after the link's text in `sink`; False when it has no text to follow."""
        text = _collapse("".join(sink[start:]))
        if not text:
            return False
        if text != url:
            sink.append(f" ({url})")
        return True
