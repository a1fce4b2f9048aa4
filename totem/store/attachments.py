"""The files a prompt carries, written in steps so that a large one is never copied whole."""

from __future__ import annotations

import sqlite3

from totem.clock import now_ms
from totem.rows import AttachmentInfo, AttachmentRow
from totem.store.engine import Engine, row_of

BLOB_STEP_BYTES = 1 << 20  # a large value is written in steps of this size (attachments)


class AttachmentRows(Engine):
    async def add_attachments(self, sessionid: str, messageid: str, files: list[tuple[str, str, bytes]],
                              ) -> list[AttachmentInfo]:
        """Store files of a prompt; returns [{id, name, mime, size}]."""
        ids = [self.ids.new() for _ in files]

        def run(c: sqlite3.Connection) -> list[AttachmentInfo]:
            stamp = now_ms()
            for newid, (name, mime, data) in zip(ids, files, strict=True):
                # Written in steps into a blob of its size: binding a 15 MB file would copy it whole.
                rowid = c.execute("INSERT INTO attachments (id, sessionid, messageid, name, mime, size, data, created)"
                                  " VALUES (?, ?, ?, ?, ?, ?, zeroblob(?), ?)",
                                  (newid, sessionid, messageid, name, mime, len(data), len(data), stamp)).lastrowid
                if data and rowid is not None:
                    view = memoryview(data)
                    with c.blobopen("attachments", "data", rowid) as blob:
                        for start in range(0, len(view), BLOB_STEP_BYTES):
                            blob.write(view[start:start + BLOB_STEP_BYTES])
            return [AttachmentInfo(id=newid, name=name, mime=mime, size=len(data))
                    for newid, (name, mime, data) in zip(ids, files, strict=True)]
        return await self.write(run)

    async def attachment_info(self, attachmentid: str) -> AttachmentInfo | None:
        """`{id, name, mime, size}` of an attachment, without its content."""
        def run(c: sqlite3.Connection) -> AttachmentInfo | None:
            return row_of(c.execute("SELECT id, name, mime, size FROM attachments WHERE id = ?", (attachmentid,)),
                          AttachmentInfo)
        return await self.read(run)

    async def get_attachment(self, attachmentid: str) -> AttachmentRow | None:
        def run(c: sqlite3.Connection) -> AttachmentRow | None:
            return row_of(c.execute("SELECT * FROM attachments WHERE id = ?", (attachmentid,)), AttachmentRow)
        return await self.read(run)
