"""The Forge documentation of Total.js: its index once a day, a local search, the page that matches.

For a prompt in a Total.js project, Totem downloads `llms.txt` from `forgeurl` at most once a
day (kept in `<data>/forge/` with the time it was fetched), searches its entries here for the
pages that match the prompt's words, and downloads only the best page, with a GET. The prompt's
text never leaves Totem: the only requests are the index and that page. The downloads go through
the fetch tool's protections (caps while reading, a total time, redirects checked, HTML made
text), and only to the host of `forgeurl`, which config.ini names. Offline or failing, the
result says so (with the day of the copy it used, if any) and the run goes on.

Must not: send anything of the prompt or the project, follow a redirect to another host, or
decide where the result goes (the agent puts it in a `knowledge` part, as untrusted data).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import time
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

from totem.tools import ToolContext, ToolError

log = logging.getLogger("totem.forge")

INDEX_NAME = "llms.txt"
REFRESH_S = 24 * 3600  # the index is downloaded at most once a day
RETRY_S = 600  # after a failed download, the next try waits this long (the old copy serves)
TIMEOUT_S = 15.0  # for each download, redirects included
MAX_INDEX_BYTES = 2 * 1024 * 1024
MAX_PAGE_BYTES = 1024 * 1024
MAX_KNOWLEDGE_CHARS = 12_000  # of a page's text in the model's context
MAX_ENTRIES = 20_000
MIN_SCORE = 2
# `- [Title](url): description` (the llms.txt convention), or a bare `[Title](url)`.
_ENTRY = re.compile(r"^\s*(?:[-*+]\s*)?\[([^\]]{1,300})\]\(([^)\s]{1,2000})\)\s*(?::\s*(.*))?$")
_WORD = re.compile(r"[a-z][a-z0-9_]{2,}")
_SUFFIXES = ("ations", "ation", "ings", "ing", "ies", "es", "ed", "s", "e")
_STOP = frozenset((
    "the", "and", "for", "with", "that", "this", "from", "into", "how", "what", "when", "where", "which",
    "why", "are", "was", "were", "have", "has", "had", "not", "but", "you", "your", "can", "will", "would",
    "should", "could", "use", "using", "make", "does", "done", "add", "get", "set", "all", "any", "some",
    "one", "two", "please", "need", "want", "like", "just", "then", "than", "them", "they", "there", "here",
    "about", "also", "only", "more", "file", "files", "code", "write", "create", "show", "tell", "help",
    "work", "project", "total", "totaljs",
))


@dataclass(frozen=True)
class Entry:
    title: str
    url: str
    description: str = ""


@dataclass
class Knowledge:
    """What the documentation gave for one prompt (`view()` is the knowledge part's data)."""

    source: str  # the page's URL, or the index's when no page matched
    title: str = ""
    text: str = ""  # the page as text, cut to MAX_KNOWLEDGE_CHARS
    note: str = ""  # what went wrong, or which copy of the index was used, in a sentence
    indexed: str = ""  # when the index used was downloaded (ISO date)
    failed: bool = False  # a download failed (said in `note`)

    def view(self) -> dict:
        return {"source": self.source, "title": self.title, "note": self.note, "indexed": self.indexed,
                "chars": len(self.text), "failed": self.failed}


def parse_index(text: str, base: str) -> list[Entry]:
    """The pages an llms.txt lists, with their URLs made absolute; only pages on the host of
    `base` (a link elsewhere is never fetched)."""
    host = urlsplit(base).hostname
    entries = []
    for line in text.splitlines():
        found = _ENTRY.match(line)
        if not found:
            continue
        url = urljoin(base, found.group(2))
        if urlsplit(url).scheme not in ("http", "https") or urlsplit(url).hostname != host:
            continue
        entries.append(Entry(found.group(1).strip(), url, (found.group(3) or "").strip()))
        if len(entries) >= MAX_ENTRIES:
            break
    return entries


def words(text: str) -> set[str]:
    """The searchable words of a text: lower case, three letters or more, common words left
    out, each cut to a rough stem (routes, routing and route are one word)."""
    return {_stem(word) for word in _WORD.findall(text.lower()) if word not in _STOP}


def _stem(word: str) -> str:
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[:-len(suffix)]
    return word


def search(entries: list[Entry], prompt: str, limit: int = 3) -> list[tuple[int, Entry]]:
    """The entries that match the prompt best, with their scores: a word of the prompt counts
    three in the title, two in the page's path and one in the description; ties keep the
    index's order. Entries under MIN_SCORE are left out."""
    wanted = words(prompt)
    if not wanted:
        return []
    scored = []
    for order, entry in enumerate(entries):
        title, about = words(entry.title), words(entry.description)
        path = words(urlsplit(entry.url).path.replace("/", " "))
        score = sum(3 * (word in title) + 2 * (word in path) + (word in about) for word in wanted)
        if score >= MIN_SCORE:
            scored.append((-score, order, entry))
    scored.sort()
    return [(-score, entry) for score, _order, entry in scored[:limit]]


class ForgeDocs:
    """The documentation of one Totem: the kept index, and the downloads."""

    def __init__(self, data_dir: str, url: str, fetcher=None):
        self.folder = os.path.join(data_dir, "forge")
        self.base = url.rstrip("/") + "/"
        self.host = urlsplit(self.base).hostname or ""
        self.fetcher = fetcher  # a FetchTool; made with the first download
        self._lock = asyncio.Lock()
        self._failed_at = 0.0
        self._entries: tuple[float, list[Entry]] | None = None

    async def knowledge(self, prompt: str) -> Knowledge:
        """The documentation for a prompt; never raises (a failure is said in `note`)."""
        index_url = urljoin(self.base, INDEX_NAME)
        try:
            fetched, entries, note = await self._index()
        except ToolError as exc:
            return Knowledge(index_url, note=f"The Forge documentation could not be read ({exc}); "
                                             "the answer does not use it.", failed=True)
        indexed = time.strftime("%Y-%m-%d", time.gmtime(fetched))
        found = search(entries, prompt, 1)
        if not found:
            return Knowledge(index_url, note=note or "No page of the Forge documentation matches this prompt.",
                             indexed=indexed)
        entry = found[0][1]
        try:
            text = await self._download(entry.url, MAX_PAGE_BYTES)
        except ToolError as exc:
            failure = f"The page {entry.title} could not be read ({exc})."
            return Knowledge(entry.url, entry.title, note=f"{note} {failure}".strip(), indexed=indexed, failed=True)
        if len(text) > MAX_KNOWLEDGE_CHARS:
            text = text[:MAX_KNOWLEDGE_CHARS] + f"\n[page cut at {MAX_KNOWLEDGE_CHARS} characters]"
        return Knowledge(entry.url, entry.title, text, note, indexed)

    async def _index(self) -> tuple[float, list[Entry], str]:
        """(when it was fetched, its entries, a note when an old copy serves). Raises ToolError
        when there is neither a fresh download nor a kept copy."""
        async with self._lock:
            kept = await asyncio.to_thread(self._read_kept)
            now = time.time()
            if kept is not None and now - kept[0] < REFRESH_S:
                return kept[0], self._parsed(kept), ""
            if now - self._failed_at < RETRY_S:
                if kept is None:
                    raise ToolError("the last download failed a moment ago")
                return kept[0], self._parsed(kept), self._stale_note(kept[0])
            try:
                text = await self._download(urljoin(self.base, INDEX_NAME), MAX_INDEX_BYTES)
            except ToolError:
                self._failed_at = now
                if kept is None:
                    raise
                return kept[0], self._parsed(kept), self._stale_note(kept[0])
            await asyncio.to_thread(self._keep, now, text)
            self._entries = None
            return now, self._parsed((now, text)), ""

    def _parsed(self, kept: tuple[float, str]) -> list[Entry]:
        if self._entries is None or self._entries[0] != kept[0]:
            self._entries = (kept[0], parse_index(kept[1], self.base))
        return self._entries[1]

    @staticmethod
    def _stale_note(fetched: float) -> str:
        return (f"Offline: the Forge documentation index could not be downloaded; the copy of "
                f"{time.strftime('%Y-%m-%d', time.gmtime(fetched))} was used.")

    async def _download(self, url: str, cap: int) -> str:
        """A GET of one URL on the documentation's host, through the fetch tool. Raises ToolError."""
        host = self.host

        async def permit(tool: str, subject: str, args: dict | None = None, always_ask: str | None = None) -> None:
            if subject != host:  # a redirect elsewhere: config.ini names only this host
                raise ToolError(f"the documentation sent Totem to {subject}, which is not {host}")

        ctx = ToolContext(root=self.folder, sessionid="", permit=permit)
        if self.fetcher is None:
            from totem.tools.fetch import FetchTool  # loaded with the first download, not at start-up
            self.fetcher = FetchTool(total_timeout=TIMEOUT_S)
        result = await self.fetcher.run({"url": url, "max_bytes": cap}, ctx)
        status = result.data.get("status")
        if status != 200:
            raise ToolError(f"{url} answered HTTP {status}")
        return result.output.split(":\n\n", 1)[-1]  # without the fetch tool's heading line

    def _read_kept(self) -> tuple[float, str] | None:
        try:
            with open(os.path.join(self.folder, "llms.json"), encoding="utf-8") as handle:
                meta = json.load(handle)
            if meta.get("url") != self.base or not isinstance(meta.get("fetched"), (int, float)):
                return None  # kept for another forgeurl
            with open(os.path.join(self.folder, INDEX_NAME), encoding="utf-8") as handle:
                return float(meta["fetched"]), handle.read(MAX_INDEX_BYTES * 2)
        except (OSError, ValueError):
            return None

    def _keep(self, fetched: float, text: str) -> None:
        os.makedirs(self.folder, mode=0o700, exist_ok=True)
        for name, content in ((INDEX_NAME, text), ("llms.json", json.dumps({"url": self.base, "fetched": fetched}))):
            temporary = os.path.join(self.folder, f".{name}.tmp")
            with open(temporary, "w", encoding="utf-8") as handle:
                handle.write(content)
            os.replace(temporary, os.path.join(self.folder, name))
