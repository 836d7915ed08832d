"""The A2A tasks of the applications' agents, in memory and bounded in number.

A task is owned by its caller and application (:func:`task_owner`): ``tasks/get``, ``tasks/cancel``
and ``tasks/list`` of anyone else find nothing, as if it never was. The SDK's in-memory store keeps every
task forever; this one keeps the ``max_tasks`` most recently written and forgets the oldest beyond
that. A task is written on every event of its turn, so the ones forgotten first are long finished;
their answers stay in the KnowSphere session (the task's ``contextId``).

In memory only: a restarted gateway, or another replica, does not know a task, and a client that
wants one after that reads the conversation instead (``GET /api/v1/sessions/{contextId}/messages``).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final

from a2a.auth.user import User
from a2a.server.context import ServerCallContext
from a2a.server.tasks import InMemoryTaskStore, TaskStore
from a2a.types import ListTasksRequest, ListTasksResponse, Task

DEFAULT_MAX_A2A_TASKS: Final = 10_000
"""How many A2A tasks the gateway keeps in memory, all callers together."""


def task_owner(context: ServerCallContext) -> str:
    """The owner of the tasks of a call: its user's name (see ``api.a2a.ApplicationCall``), which
    names the tenant, the user and the application."""
    return context.user.user_name


class _Owner(User):
    """Stands for a task's owner when the store forgets one of its tasks."""

    def __init__(self, name: str) -> None:
        self._name = name

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self._name


class BoundedTaskStore(TaskStore):
    """The SDK's in-memory store scoped by :func:`task_owner`, holding at most ``max_tasks`` tasks."""

    def __init__(self, max_tasks: int = DEFAULT_MAX_A2A_TASKS) -> None:
        if max_tasks < 1:
            raise ValueError(f"max_tasks must be at least 1 (got {max_tasks})")
        self.max_tasks = max_tasks
        self._tasks = InMemoryTaskStore(owner_resolver=task_owner)
        self._written: OrderedDict[tuple[str, str], None] = OrderedDict()  # oldest write first

    async def save(self, task: Task, context: ServerCallContext) -> None:
        await self._tasks.save(task, context)
        key = (task_owner(context), task.id)
        self._written[key] = None
        self._written.move_to_end(key)
        while len(self._written) > self.max_tasks:
            (owner, task_id), _ = self._written.popitem(last=False)
            await self._tasks.delete(task_id, ServerCallContext(user=_Owner(owner)))

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        return await self._tasks.get(task_id, context)

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        return await self._tasks.list(params, context)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        await self._tasks.delete(task_id, context)
        self._written.pop((task_owner(context), task_id), None)

    def __len__(self) -> int:
        return len(self._written)


__all__ = ["DEFAULT_MAX_A2A_TASKS", "BoundedTaskStore", "task_owner"]
