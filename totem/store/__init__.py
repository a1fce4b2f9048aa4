"""The sqlite database: schema, migrations and every query. Nothing outside this package writes SQL.

One sqlite file in the data folder (WAL mode, foreign keys on, removal cascading), reached
through the engine (engine.py: one writer thread, a pool of readers). Each table family has its
repository beside it; `Store` is all of them over one engine.
"""

from __future__ import annotations

from totem.store.access import AccessRows
from totem.store.attachments import AttachmentRows
from totem.store.exports import ExportRows
from totem.store.messages import MessageRows
from totem.store.projects import ProjectRows
from totem.store.providers import ProviderRows
from totem.store.rules import RuleRows
from totem.store.schedules import ScheduleRows
from totem.store.schema import DATABASE_FILE, MIGRATIONS, PAGE_BYTES, STOPPED_DURING_RUN, connect, migrate
from totem.store.sessions import SessionRows, session_view
from totem.store.settings import SettingRows
from totem.store.snapshots import SnapshotRows

__all__ = ["DATABASE_FILE", "MIGRATIONS", "PAGE_BYTES", "STOPPED_DURING_RUN", "Store", "connect", "migrate",
           "session_view"]


class Store(ProjectRows, SessionRows, MessageRows, AttachmentRows, RuleRows, SnapshotRows, SettingRows,
            ScheduleRows, ProviderRows, AccessRows, ExportRows):
    """The database of one Totem process: every repository over one engine."""
