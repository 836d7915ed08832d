"""The conversation service's pieces as its wiring puts them together, over a real session store,
with the stand-ins of ``peers.py`` for its peers: tests drive turns through :meth:`World.ask`."""

from __future__ import annotations

from collections.abc import Sequence

from langgraph.checkpoint.memory import InMemorySaver
from peers import CALLER, Memory, Models, Search, Tools

from knowsphere_contracts.events import ChatRequested, ChatTurnEvent, TurnCompleted
from knowsphere_conversation.adapters.sessions_sql import SqlSessionStore
from knowsphere_conversation.domain.graph import TurnLimits, build_graph
from knowsphere_conversation.domain.layout import Message
from knowsphere_conversation.domain.turns import TurnRunner


class World:
    """The service's pieces as its wiring puts them together (peers are the stand-ins of peers.py)."""

    def __init__(self, store: SqlSessionStore, models: Models, search: Search | None = None) -> None:
        self.store = store
        self.models = models
        self.saver = InMemorySaver()
        self.graph = build_graph(self.saver)
        self.events: list[ChatTurnEvent] = []
        self.forgotten: list[tuple[str, str]] = []

        async def publish(event: ChatTurnEvent) -> None:
            self.events.append(event)

        async def announce(event: TurnCompleted) -> None:
            return None

        self.tools = Tools()
        self.runner = TurnRunner(
            lambda: self.graph,
            models=models,
            tools=self.tools,
            memory=Memory(),
            search=search or Search(),
            publish=publish,
            publish_completed=announce,
            limits=TurnLimits(),
            sessions=store,
        )

    async def history(self, thread: str) -> Sequence[Message]:
        state = await self.graph.aget_state({"configurable": {"thread_id": thread}})
        messages: Sequence[Message] = state.values.get("messages", [])
        return messages

    async def cancel(self, turn_id: str) -> bool:
        return self.runner.cancel(turn_id, CALLER)

    async def forget(self, thread: str, session_id: str) -> None:
        self.forgotten.append((thread, session_id))
        await self.saver.adelete_thread(thread)

    async def ask(self, session_id: str, message: str, turn_id: str) -> list[ChatTurnEvent]:
        start = len(self.events)
        await self.runner.run(
            ChatRequested(
                turn_id=turn_id, session_id=session_id, message=message, knowledge_base_ids=["kb-1"]
            )
        )
        return self.events[start:]
