"""The main model request, assembled in six segments ordered by stability.

1. system — identity, capability limits, bound skills (changes only when the agent changes);
2. task — knowledge bases / web / graph switches and answer language, in the same system message
   after (1); the tool schemas, trimmed by the same switches, travel beside it;
3. handoff summary — the compacted earlier turns, above the history; empty until a compaction;
4. history — at most the last ``keep_turns`` finished turns, verbatim (user question and final answer);
   the window moves forward in steps of ``slide_turns`` (see :func:`finished_turns`);
5. this turn's context — rewrite, image description, named skills, asker background; unchanged
   within the tool loop, never checkpointed;
6. this turn — the question, then this turn's tool calls and results.

Only (5) and (6) change inside a turn, so each request of a tool loop is a byte prefix of the next,
and a new turn repeats the previous request up to that turn's question: (1)–(4), unless the history
window moved or a compaction replaced the older turns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NotRequired, TypedDict

from knowsphere.modelhub.v1 import modelhub_pb2 as mpb
from knowsphere.modelhub.v1.modelhub_enums import ChatRole
from knowsphere_conversation.domain.prompts import HANDOFF_HEADER


class ToolCallRecord(TypedDict):
    id: str
    name: str
    arguments: str
    """The arguments as the model wrote them (JSON text)."""


class Message(TypedDict):
    """A message as the checkpoint keeps it."""

    id: str
    turn_id: str
    role: str
    """user, assistant or tool"""
    content: str
    tool_calls: NotRequired[list[ToolCallRecord]]
    tool_call_id: NotRequired[str]
    name: NotRequired[str]
    final: NotRequired[bool]
    """An assistant message that is a turn's answer (not a tool-calling step)."""
    citations: NotRequired[list[dict[str, Any]]]
    """A turn's answer: the sources its text cites (Citation fields), kept for the session's history."""


def finished_turns(
    messages: Sequence[Message], current_turn: str, keep_turns: int, slide_turns: int = 1
) -> list[Message]:
    """The question and final answer of the last finished turns, oldest first: all of them while there
    are at most ``keep_turns``, never more.

    Past ``keep_turns`` the window moves ``slide_turns`` turns at a time (at most half of
    ``keep_turns``) instead of one: it then starts at a multiple of the step, so it holds between
    ``keep_turns - step + 1`` and ``keep_turns`` turns and its first turn stays put for ``step`` turns
    running. Each move changes the request from the start of the history on — the provider's prompt
    cache then reuses only the segments above it — so moving by one drops the cached history on every
    turn of a long session, moving by ``step`` once every ``step`` turns.
    """
    turns: dict[str, list[Message]] = {}
    for message in messages:
        if message["turn_id"] == current_turn:
            continue
        if message["role"] == "user" or (message["role"] == "assistant" and message.get("final")):
            turns.setdefault(message["turn_id"], []).append(message)
    finished = [pair for pair in turns.values() if any(m["role"] == "assistant" for m in pair)]
    if keep_turns <= 0:
        return []
    step = max(1, min(slide_turns, keep_turns // 2))
    excess = len(finished) - keep_turns
    start = -(-excess // step) * step if excess > 0 else 0
    return [message for pair in finished[start:] for message in pair]


def _text(role: ChatRole, text: str, *, breakpoint: bool = False) -> mpb.ChatMessage:
    return mpb.ChatMessage(
        role=role.to_proto(), content=[mpb.ContentPart(text=text)], cache_breakpoint=breakpoint
    )


def to_chat_message(message: Message) -> mpb.ChatMessage:
    role = ChatRole(message["role"])
    out = mpb.ChatMessage(role=role.to_proto())
    if message["content"]:
        out.content.append(mpb.ContentPart(text=message["content"]))
    for call in message.get("tool_calls", ()):
        out.tool_calls.append(
            mpb.ToolCall(id=call["id"], name=call["name"], arguments_json=call["arguments"])
        )
    if message.get("tool_call_id"):
        out.tool_call_id = message["tool_call_id"]
    if message.get("name"):
        out.name = message["name"]
    return out


def build_request_messages(
    *,
    system: str,
    task: str,
    handoff: str,
    history: Sequence[Message],
    context: str,
    turn: Sequence[Message],
) -> list[mpb.ChatMessage]:
    """The messages of one main-model request, in segment order."""
    messages = [_text(ChatRole.SYSTEM, f"{system}\n\n{task}", breakpoint=True)]
    if handoff:
        messages.append(_text(ChatRole.USER, f"{HANDOFF_HEADER}\n{handoff}"))
        messages.append(_text(ChatRole.ASSISTANT, "Understood."))
    messages.extend(to_chat_message(m) for m in history)
    for index, message in enumerate(turn):
        if index == 0 and context:
            # The context sits right before the question, in the same user message.
            messages.append(_text(ChatRole.USER, f"{context}\n\nQuestion: {message['content']}"))
        else:
            messages.append(to_chat_message(message))
    return messages


__all__ = ["Message", "ToolCallRecord", "build_request_messages", "finished_turns", "to_chat_message"]
