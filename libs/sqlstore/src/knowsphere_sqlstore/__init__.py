"""SQL plumbing shared by the services' stores: one async engine on SQLite or PostgreSQL."""

from knowsphere_sqlstore.database import SqlDatabase, UtcDateTime

__all__ = ["SqlDatabase", "UtcDateTime"]
