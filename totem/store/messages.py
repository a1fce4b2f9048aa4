"""The messages of a session and their parts: added, streamed into, read back in pages and as
the model's history."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from totem.clock import now_ms
from totem.rows import MessageRow, PartRow, SessionTokens
from totem.store.engine import MAX_SQL_VARIABLES, Engine, record_of, records_of, written_record
from totem.store.parts import (
    add_piece,
    decode_message,
    decode_part,
    drop_pieces,
    join_pieces,
    part_sizes,
    row_size,
    with_parts,
)


class MessageRows(Engine):
    async def list_messages(self, sessionid: str, before: str | None, limit: int,
                            max_bytes: int | None = None) -> tuple[list[MessageRow], bool]:
        """`(messages, more)`: the newest `limit` messages older than `before`, oldest first, with
        their parts. With `max_bytes`, also no more messages than fit in about that many bytes of
        stored text and data (the newest message always comes, however big); the size of each
        message is summed in SQL before any part is read, so a page never loads what it leaves out.
        """
        def run(c: sqlite3.Connection) -> tuple[list[MessageRow], bool]:
            if before:
                rows = records_of(c.execute(
                    "SELECT * FROM messages WHERE sessionid = ? AND id < ? ORDER BY id DESC LIMIT ?",
                    (sessionid, before, limit + 1)))
            else:
                rows = records_of(c.execute(
                    "SELECT * FROM messages WHERE sessionid = ? ORDER BY id DESC LIMIT ?",
                    (sessionid, limit + 1)))
            more = len(rows) > limit
            rows = rows[:limit]
            if max_bytes is not None and rows:
                sizes = part_sizes(c, [r["id"] for r in rows])
                total = 0
                for count, row in enumerate(rows):
                    total += row_size(row) + sizes.get(row["id"], 0)
                    if count and total > max_bytes:
                        rows, more = rows[:count], True
                        break
            rows.reverse()
            return with_parts(c, rows), more
        return await self.read(run)

    async def add_message(self, sessionid: str, role: str, model: str | None = None,
                          data: dict[str, Any] | None = None,
                          newid: str | None = None) -> MessageRow:
        newid = newid or self.ids.new()

        def run(c: sqlite3.Connection) -> MessageRow:
            c.execute("INSERT INTO messages (id, sessionid, role, model, data, created) VALUES (?, ?, ?, ?, ?, ?)",
                      (newid, sessionid, role, model, json.dumps(data or {}), now_ms()))
            return decode_message(written_record(c.execute("SELECT * FROM messages WHERE id = ?", (newid,))))
        return await self.write(run)

    async def add_part(self, messageid: str, sessionid: str, kind: str, status: str,
                       text: str = "", data: dict[str, Any] | None = None, closed: bool = False) -> PartRow:
        newid = self.ids.new()

        def run(c: sqlite3.Connection) -> PartRow:
            stamp = now_ms()
            c.execute("INSERT INTO parts (id, messageid, sessionid, kind, status, text, data, created, updated, closed)"
                      " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                      (newid, messageid, sessionid, kind, status, text, json.dumps(data or {}), stamp, stamp,
                       stamp if closed else None))
            return decode_part(written_record(c.execute("SELECT * FROM parts WHERE id = ?", (newid,))))
        return await self.write(run)

    async def update_part(self, partid: str, *, text: str | None = None, status: str | None = None,
                          data: dict[str, Any] | None = None, close: bool = False,
                          append: str | None = None) -> PartRow | None:
        """Change a part; `text` replaces its whole text (pieces included), `append` adds a piece,
        `close` stamps it complete. Returns the part with its text, None when it is gone."""
        def run(c: sqlite3.Connection) -> PartRow | None:
            stamp = now_ms()
            if text is not None:
                drop_pieces(c, partid)
            if append:
                add_piece(c, partid, append)
            sets: list[str] = ["updated = ?"]
            values: list[int | str] = [stamp]
            for column, value in (("text", text), ("status", status)):
                if value is not None:
                    sets.append(f"{column} = ?")
                    values.append(value)
            if data is not None:
                sets.append("data = ?")
                values.append(json.dumps(data))
            if close:
                sets.append("closed = ?")
                values.append(stamp)
            c.execute(f"UPDATE parts SET {', '.join(sets)} WHERE id = ?", (*values, partid))
            row = record_of(c.execute("SELECT * FROM parts WHERE id = ?", (partid,)))
            if row:
                join_pieces(c, [row])
            return decode_part(row) if row else None
        return await self.write(run)

    async def append_part_texts(self, pieces: list[tuple[str, str]]) -> None:
        """Store text streamed into open parts since their last flush, in one transaction: each
        as a new piece of its part (a closed or removed part takes none)."""
        def run(c: sqlite3.Connection) -> None:
            for partid, text in pieces:
                if text and c.execute("SELECT 1 FROM parts WHERE id = ? AND closed IS NULL",
                                      (partid,)).fetchone():
                    add_piece(c, partid, text)
        await self.write(run)

    async def finish_message(self, messageid: str, usage: dict[str, Any] | None, data: dict[str, Any]) -> None:
        def run(c: sqlite3.Connection) -> None:
            c.execute("UPDATE messages SET usage = ?, data = ?, finished = ? WHERE id = ?",
                      (json.dumps(usage) if usage is not None else None, json.dumps(data), now_ms(), messageid))
        await self.write(run)

    async def mark_run_end(self, sessionid: str, promptid: str, mark: dict[str, Any]) -> MessageRow | None:
        """Add `mark` to the data of the last message of the run of the prompt `promptid` (its
        newest answer, else the prompt itself): where an aborted or failed run stopped, kept with
        the conversation. Returns that message (without its parts), or None."""
        def run(c: sqlite3.Connection) -> MessageRow | None:
            row = c.execute("SELECT id FROM messages WHERE sessionid = ? AND role = 'assistant' AND "
                            "json_extract(data, '$.prompt') = ? ORDER BY id DESC LIMIT 1",
                            (sessionid, promptid)).fetchone()
            target = row[0] if row else promptid
            found = record_of(c.execute("SELECT * FROM messages WHERE id = ? AND sessionid = ?", (target, sessionid)))
            if found is None:
                return None
            message = decode_message(found)
            message["data"] = message["data"] | mark
            c.execute("UPDATE messages SET data = ? WHERE id = ?", (json.dumps(message["data"]), target))
            return message
        return await self.write(run)

    async def set_message_queued(self, messageid: str, queued: bool) -> None:
        """Mark a user message as waiting for the current run to end, or not any more."""
        def run(c: sqlite3.Connection) -> None:
            row = c.execute("SELECT data FROM messages WHERE id = ?", (messageid,)).fetchone()
            if row is None:
                return
            data: dict[str, Any] = json.loads(row[0]) if row[0] else {}
            data.pop("queued", None)
            if queued:
                data["queued"] = True
            c.execute("UPDATE messages SET data = ? WHERE id = ?", (json.dumps(data), messageid))
        await self.write(run)

    async def remove_message(self, messageid: str) -> bool:
        """Remove a message with its parts, attachments and file changes."""
        def run(c: sqlite3.Connection) -> bool:
            return c.execute("DELETE FROM messages WHERE id = ?", (messageid,)).rowcount > 0
        return await self.write(run)

    async def session_tokens(self, sessionid: str) -> SessionTokens:
        """`{input, output, estimated, cost, cached}`: the tokens of a session's answers, summed
        (`cached`: the input its provider's prompt cache served, when any did)
        (estimated when any answer's count was), and the cost in USD of those whose price was
        known; without `cost` when none was."""
        def run(c: sqlite3.Connection) -> SessionTokens:
            row = c.execute(
                "SELECT ifnull(sum(json_extract(data, '$.tokens.input')), 0), "
                "ifnull(sum(json_extract(data, '$.tokens.output')), 0), "
                "ifnull(max(json_extract(data, '$.tokens.estimated')), 0), "
                "total(json_extract(data, '$.tokens.cost')), count(json_extract(data, '$.tokens.cost')), "
                "ifnull(sum(json_extract(data, '$.tokens.cached')), 0) "
                "FROM messages WHERE sessionid = ? AND role = 'assistant'", (sessionid,)).fetchone()
            tokens = SessionTokens(input=row[0], output=row[1], estimated=bool(row[2]))
            if row[5]:
                tokens["cached"] = row[5]
            if row[4]:  # rounded as each answer's cost is (agent/answers.py COST_DIGITS): the rest is float noise
                tokens["cost"] = round(row[3], 8)
            return tokens
        return await self.read(run)

    async def count_messages(self, sessionid: str) -> int:
        def run(c: sqlite3.Connection) -> int:
            count: int = c.execute("SELECT count(*) FROM messages WHERE sessionid = ?", (sessionid,)).fetchone()[0]
            return count
        return await self.read(run)

    async def session_history(self, sessionid: str) -> list[MessageRow]:
        """Every message of a session with its parts, oldest first (for the model's context);
        none that an undo took back, none that waits for the current run to end."""
        messages, _last = await self.history_after(sessionid, None)
        return messages

    async def history_after(self, sessionid: str, after: str | None) -> tuple[list[MessageRow], str | None]:
        """`(messages, last)`: what session_history gives of the messages after the id `after`
        (all with None), and the id of the newest message read (left out or not), for the next
        call: a run reads only what its last step added."""
        def run(c: sqlite3.Connection) -> tuple[list[MessageRow], str | None]:
            rows = records_of(c.execute("SELECT * FROM messages WHERE sessionid = ? AND id > ? ORDER BY id",
                                        (sessionid, after or "")))
            last = rows[-1]["id"] if rows else after
            rows = [row for row in rows if not row.get("reverted")]
            messages = [message for message in with_parts(c, rows) if not message["data"].get("queued")]
            return messages, last
        return await self.read(run)

    async def get_parts(self, partids: list[str]) -> dict[str, PartRow]:
        """Parts by id (those that exist), with their text."""
        def run(c: sqlite3.Connection) -> dict[str, PartRow]:
            found: dict[str, PartRow] = {}
            for start in range(0, len(partids), MAX_SQL_VARIABLES):
                chunk = partids[start:start + MAX_SQL_VARIABLES]
                rows = records_of(c.execute(f"SELECT * FROM parts WHERE id IN ({','.join('?' * len(chunk))})", chunk))
                join_pieces(c, rows)
                found.update((row["id"], decode_part(row)) for row in rows)
            return found
        return await self.read(run)

    async def message_ids(self, sessionid: str, reverted: bool | None = None) -> list[str]:
        """The ids of a session's messages, oldest first (only those taken back, or not)."""
        def run(c: sqlite3.Connection) -> list[str]:
            if reverted is None:
                return [row[0] for row in c.execute("SELECT id FROM messages WHERE sessionid = ? ORDER BY id",
                                                    (sessionid,))]
            return [row[0] for row in c.execute(
                "SELECT id FROM messages WHERE sessionid = ? AND reverted = ? ORDER BY id", (sessionid, int(reverted)))]
        return await self.read(run)
