"""Intents and routing: which path a turn takes is decided by rule, never by the main model.

- greeting / chitchat / image_only / doc_only → generate (no tools);
- kb_search / clarification / summarize → ReAct when a knowledge base is selected;
- web_search → ReAct only when web search is on this turn;
- an agent bound to specialist tools (e.g. generate_pptx) → ReAct for every intent that is not a skip
  intent.

The intent itself comes from modelhub ``Decide`` over single-letter label codes (:data:`LABELS`);
without a chat model, :func:`rule_intent` gives the obvious cases (greetings) and treats the rest as a
knowledge-base question.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from knowsphere.conversation.v1.conversation_enums import Intent, TurnRoute

SKIP_INTENTS: Final = frozenset({Intent.GREETING, Intent.CHITCHAT, Intent.IMAGE_ONLY, Intent.DOC_ONLY})
"""Intents answered without tools."""
KNOWLEDGE_INTENTS: Final = frozenset({Intent.KB_SEARCH, Intent.CLARIFICATION, Intent.SUMMARIZE})
"""Intents that read the selected knowledge bases."""
SPECIALIST_TOOLS: Final = frozenset({"generate_pptx"})
"""Tools whose binding makes every non-skip intent go through ReAct."""


@dataclass(frozen=True)
class Label:
    code: str
    intent: Intent
    description: str


LABELS: Final = (
    Label("A", Intent.GREETING, "a greeting, thanks or goodbye with no question in it"),
    Label("B", Intent.CHITCHAT, "small talk or a general question that needs no documents and no web"),
    Label("C", Intent.IMAGE_ONLY, "asks only about the attached image itself (describe, read, explain it)"),
    Label("D", Intent.DOC_ONLY, "asks only about a file attached to this message, not the knowledge base"),
    Label("E", Intent.KB_SEARCH, "a question whose answer is in the organisation's documents"),
    Label("F", Intent.CLARIFICATION, "asks to explain, expand or correct the previous answer"),
    Label("G", Intent.SUMMARIZE, "asks to summarise or compare documents of the knowledge base"),
    Label("H", Intent.WEB_SEARCH, "needs current or public information from the web (news, latest, prices)"),
)
BY_CODE: Final = {label.code: label.intent for label in LABELS}


def route_for(
    intent: Intent,
    *,
    knowledge_bases: bool,
    web_search: bool,
    tool_names: Iterable[str] = (),
) -> TurnRoute:
    """The path of a turn; ``tool_names`` are the agent's bound tools."""
    if intent in SKIP_INTENTS:
        return TurnRoute.GENERATE
    if SPECIALIST_TOOLS.intersection(tool_names):
        return TurnRoute.REACT
    if intent in KNOWLEDGE_INTENTS and knowledge_bases:
        return TurnRoute.REACT
    if intent is Intent.WEB_SEARCH and web_search:
        return TurnRoute.REACT
    if intent is Intent.WEB_SEARCH and knowledge_bases:
        # Web is off: the knowledge bases are the only evidence there is.
        return TurnRoute.REACT
    return TurnRoute.GENERATE


_GREETING = re.compile(
    r"^\s*(hi|hello|hey|good (morning|afternoon|evening)|thanks?( you)?|thank you|bye|goodbye|"
    r"你好|您好|嗨|哈喽|早上好|下午好|晚上好|谢谢|多谢|感谢|再见|拜拜)"
    r"[\s!！。.,，~～?？]*(there|all|everyone|大家)?[\s!！。.,，~～?？]*$",
    re.IGNORECASE,
)


def rule_intent(question: str) -> Intent:
    """The intent without a model: a bare greeting or thanks is a greeting, anything else a question
    for the knowledge base."""
    return Intent.GREETING if _GREETING.match(question) else Intent.KB_SEARCH


__all__ = [
    "BY_CODE",
    "KNOWLEDGE_INTENTS",
    "LABELS",
    "SKIP_INTENTS",
    "SPECIALIST_TOOLS",
    "Label",
    "route_for",
    "rule_intent",
]
