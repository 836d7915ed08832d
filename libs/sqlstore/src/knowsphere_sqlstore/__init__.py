"""SQL plumbing shared by the services' stores: one async engine on SQLite or PostgreSQL, and the
mapping of records to rows and back."""

from knowsphere_sqlstore.database import SqlDatabase, UtcDateTime
from knowsphere_sqlstore.rows import AnyRow, record_from_row, row_from

__all__ = ["AnyRow", "SqlDatabase", "UtcDateTime", "record_from_row", "row_from"]
