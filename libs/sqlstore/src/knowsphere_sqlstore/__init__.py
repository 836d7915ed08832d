"""SQL plumbing shared by the services' stores: one async engine on SQLite or PostgreSQL, and the
mapping of records to rows and back, and opaque paging tokens."""

from knowsphere_sqlstore.database import SqlDatabase, StoreOpenError, UtcDateTime
from knowsphere_sqlstore.pages import decode_page_token, encode_page_token
from knowsphere_sqlstore.rows import AnyRow, record_from_row, row_from
from knowsphere_sqlstore.settings_rows import SettingsRows, settings_table

__all__ = [
    "AnyRow",
    "SettingsRows",
    "SqlDatabase",
    "StoreOpenError",
    "UtcDateTime",
    "decode_page_token",
    "encode_page_token",
    "record_from_row",
    "row_from",
    "settings_table",
]
