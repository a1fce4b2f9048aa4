"""The files attached to prompts, as GET /attachments/{id}/ reads them.

Built by the composition root with the store, before the core: an attachment is served
without waiting for the agent.
"""

from __future__ import annotations

from totem.errors import NotFound
from totem.rows import AttachmentRow
from totem.store import Store


class Attachments:
    """The stored files of the prompts."""

    def __init__(self, store: Store):
        self.store = store

    async def get(self, attachmentid: str) -> AttachmentRow:
        """An attachment, with its `data`, `mime` and `name`. Raises NotFound."""
        row = await self.store.get_attachment(attachmentid)
        if row is None:
            raise NotFound(("id", "no such attachment"))
        return row
