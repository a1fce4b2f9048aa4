"""GET /attachments/{id}/: a file that was attached to a prompt.

Images are served with their type, text files as plain text, anything else as a download; with
nosniff (on every answer) the browser never guesses a type that could run script.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import quote

from totem.errors import NotFound
from totem.http.httpd import Response

if TYPE_CHECKING:
    from totem.services.attachments import Attachments

INLINE_IMAGE_TYPES = frozenset(("image/png", "image/jpeg", "image/gif", "image/webp"))


def _disposition(kind: str, name: str) -> str:
    ascii_name = "".join(ch if 32 <= ord(ch) < 127 and ch not in '"\\' else "_" for ch in name)
    return f"{kind}; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(name)}"


async def attachment_response(attachments: Attachments, path: str) -> Response:
    """The answer for /attachments/{id}/, from the attachments service. Raises NotFound."""
    ident = path[len("/attachments/"):].strip("/")
    if not ident or "/" in ident:
        raise NotFound(("id", "no such attachment"))
    row = await attachments.get(ident)
    data, mime, name = row["data"], row["mime"], row["name"]
    if mime in INLINE_IMAGE_TYPES:
        return Response(200, data, mime, [("Content-Disposition", _disposition("inline", name))])
    if mime.startswith("text/") or mime in ("application/json", "application/xml"):
        return Response(200, data, "text/plain; charset=utf-8", [("Content-Disposition", _disposition("inline", name))])
    return Response(200, data, "application/octet-stream", [("Content-Disposition", _disposition("attachment", name))])
