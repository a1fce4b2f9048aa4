"""How a part's text is kept: its row's text, then pieces appended as it streams (one row each,
numbered under the part's number), joined when the part is read."""

from __future__ import annotations

import json
import sqlite3

from totem.rows import MessageRow, PartRow
from totem.store.engine import MAX_SQL_VARIABLES, Record, as_row, records_of

JSON_OVERHEAD_BYTES = 200
# A piece's id is its part's number shifted by this many bits, plus its place in the part.
PIECE_BITS = 20
MAX_PIECES = (1 << PIECE_BITS) - 1


def with_parts(c: sqlite3.Connection, rows: list[Record]) -> list[MessageRow]:
    """Message rows decoded, each with its parts (their text joined from the pieces)."""
    parts: list[Record] = []
    ids = [row["id"] for row in rows]
    for start in range(0, len(ids), 500):  # sqlite's limit on the number of parameters
        chunk = ids[start:start + 500]
        parts += records_of(c.execute(f"SELECT * FROM parts WHERE messageid IN ({','.join('?' * len(chunk))}) "
                                 "ORDER BY id", chunk))
    join_pieces(c, parts)
    by_message: dict[str, list[PartRow]] = {row["id"]: [] for row in rows}
    for part in parts:
        by_message[part["messageid"]].append(decode_part(part))
    messages: list[MessageRow] = []
    for row in rows:
        message = decode_message(row)
        message["parts"] = by_message[row["id"]]
        messages.append(message)
    return messages


def decode_message(row: Record) -> MessageRow:
    row["reverted"] = bool(row.get("reverted"))
    row["usage"] = json.loads(row["usage"]) if row.get("usage") else None
    row["data"] = json.loads(row["data"]) if row.get("data") else {}
    return as_row(row, MessageRow)


def decode_part(row: Record) -> PartRow:
    row.pop("num", None)  # where its pieces are: the store's business alone
    row["data"] = json.loads(row["data"]) if row.get("data") else {}
    return as_row(row, PartRow)


def _piece_range(num: int) -> tuple[int, int]:
    return num << PIECE_BITS, (num << PIECE_BITS) | MAX_PIECES


def _part_number(c: sqlite3.Connection, partid: str) -> int | None:
    row = c.execute("SELECT num FROM parts WHERE id = ?", (partid,)).fetchone()
    if row is None:
        return None
    if row[0] is not None:
        known: int = row[0]
        return known
    num: int = c.execute("SELECT ifnull(max(num), 0) + 1 FROM parts WHERE num IS NOT NULL").fetchone()[0]
    c.execute("UPDATE parts SET num = ? WHERE id = ?", (num, partid))
    return num


def add_piece(c: sqlite3.Connection, partid: str, text: str) -> None:
    num = _part_number(c, partid)
    if num is None:
        return
    low, high = _piece_range(num)
    last = c.execute("SELECT max(id) FROM part_pieces WHERE id BETWEEN ? AND ?", (low, high)).fetchone()[0]
    if last == high:  # a part of a million pieces: fold them into its text and start again
        _fold_pieces(c, partid, num)
        last = None
    c.execute("INSERT INTO part_pieces (id, text) VALUES (?, ?)", ((last or low) + 1, text))


def _fold_pieces(c: sqlite3.Connection, partid: str, num: int) -> None:
    low, high = _piece_range(num)
    c.execute("UPDATE parts SET text = text || ifnull((SELECT group_concat(text, '') FROM "
              "(SELECT text FROM part_pieces WHERE id BETWEEN ? AND ? ORDER BY id)), '') WHERE id = ?",
              (low, high, partid))
    c.execute("DELETE FROM part_pieces WHERE id BETWEEN ? AND ?", (low, high))


def drop_pieces(c: sqlite3.Connection, partid: str) -> None:
    row = c.execute("SELECT num FROM parts WHERE id = ?", (partid,)).fetchone()
    if row is not None and row[0] is not None:
        c.execute("DELETE FROM part_pieces WHERE id BETWEEN ? AND ?", _piece_range(row[0]))


def row_size(row: Record) -> int:
    return sum(len(value) for value in row.values() if isinstance(value, str)) + JSON_OVERHEAD_BYTES


def part_sizes(c: sqlite3.Connection, messageids: list[str]) -> dict[str, int]:
    """The bytes of stored text and data of the parts of each message (pieces included)."""
    sizes: dict[str, int] = {}
    for start in range(0, len(messageids), MAX_SQL_VARIABLES):
        chunk = messageids[start:start + MAX_SQL_VARIABLES]
        marks = ",".join("?" * len(chunk))
        for messageid, size in c.execute(
                "SELECT parts.messageid, sum(length(CAST(parts.text AS BLOB)) + length(CAST(parts.data AS BLOB))"
                f" + {JSON_OVERHEAD_BYTES} + ifnull((SELECT sum(length(CAST(part_pieces.text AS BLOB)))"
                f" FROM part_pieces WHERE part_pieces.id BETWEEN parts.num << {PIECE_BITS}"
                f" AND (parts.num << {PIECE_BITS}) | {MAX_PIECES}), 0))"
                f" FROM parts WHERE parts.messageid IN ({marks}) GROUP BY parts.messageid", chunk):
            sizes[messageid] = size or 0
    return sizes


def join_pieces(c: sqlite3.Connection, parts: list[Record]) -> None:
    """Each part's text followed by its stored pieces, in order."""
    for part in parts:
        num = part.pop("num", None)
        if num is None:
            continue
        texts = [row[0] for row in c.execute(
            "SELECT text FROM part_pieces WHERE id BETWEEN ? AND ? ORDER BY id", _piece_range(num))]
        if texts:
            part["text"] = (part["text"] or "") + "".join(texts)
