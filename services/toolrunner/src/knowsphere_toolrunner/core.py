"""Start-up and shutdown of the toolrunner's store."""

from __future__ import annotations

from knowsphere_runtime.lifecycle import StartupError
from knowsphere_toolrunner.adapters.sql_store import SqlToolResultStore
from knowsphere_toolrunner.settings import Settings


class ToolRunnerCore:
    name = "toolrunner-store"

    def __init__(self, settings: Settings, store: SqlToolResultStore) -> None:
        self._settings = settings
        self._store = store

    async def start(self) -> object:
        self._settings.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            await self._store.open()
        except Exception as error:
            # A server URL may hold a password: name the setting rather than print it.
            where = (
                "KS_TOOLRUNNER_DATABASE_URL"
                if self._settings.database_url
                else self._settings.result_store_url()
            )
            raise StartupError(f"cannot open the tool result store ({where}): {error}") from error
        return None

    async def stop(self, grace: float | None = None) -> None:
        await self._store.close()
