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
    r"^\s*(?:(?:hi|hello|hey|hiya|good\s+(?:morning|afternoon|evening|night)|thanks?(?:\s+you)?(?:\s+so\s+much)?"
    r"|thank\s+you(?:\s+so\s+much)?|cheers|bye|goodbye|see\s+you|happy\s+new\s+year|merry\s+christmas"
    r"|你好|您好|嗨|哈喽|哈啰|早上好|早安|上午好|中午好|下午好|晚上好|晚安|在吗|在不在|谢谢|多谢|感谢|辛苦了|再见|拜拜"
    r"|新年快乐|节日快乐|中秋快乐|春节快乐)"
    r"[\s,，.。!！~～?？:;)(）（呀啊呢哈哦喔嘛]*(?:there|all|everyone|team|大家|小助手|助手|你)?)+"
    r"[\s,，.。!！~～?？:;)(）（呀啊呢哈哦喔嘛]*$",
    re.IGNORECASE,
)
_WEB = re.compile(
    r"最新|最近|今天|今日|明天|现在|当前|目前|实时|汇率|天气|股价|新闻|热搜|比较火|热门|刚刚发布"
    r"|\b(?:latest|today|tonight|tomorrow|current(?:ly)?|right now|news|weather|stock price|exchange rate"
    r"|recent(?:ly)?|trending|this week|this year)\b",
    re.IGNORECASE,
)
_SUMMARY = re.compile(
    r"总结|概括|汇总|归纳|梳理|概述|摘要|提炼|要点"
    r"|\b(?:summar(?:y|ise|ize)|overview|outline|recap|key points|tl;?dr)\b",
    re.IGNORECASE,
)
_CLARIFY = re.compile(
    r"什么意思|展开讲|展开说|再简单|说得再|没看懂|不太懂|你的意思|你刚才|你说的|上面(?:这|那|的)|前面(?:说|提)|哪个对|到底是"
    r"|\b(?:what do you mean|elaborate|explain (?:that|this|it) (?:again|more)|you (?:just )?said|clarify"
    r"|in simpler terms|which one is (?:it|right)|did you mean)\b",
    re.IGNORECASE,
)
_CHITCHAT = re.compile(
    r"^(?:你是谁|你叫什么|你能(?:帮我)?做(?:些)?什么|你会什么|你是用什么|讲个笑话|给我讲个笑话|好累|好无聊|哈哈|你好吗)"
    r"|笑话|无聊|好累|你还挺"
    r"|\b(?:who are you|what can you do|tell me a joke|how are you|are you (?:a bot|human)"
    r"|you(?:'re| are) (?:funny|slow|fast|great))\b",
    re.IGNORECASE,
)


def rule_intent(
    question: str, *, has_image: bool = False, has_document: bool = False, has_history: bool = False
) -> Intent:
    """The intent without a model, from plain cues: an attachment decides first (image_only,
    doc_only), then greetings, requests about the previous answer (with a history), web cues
    (latest, today …), summary requests and small talk; anything else is a knowledge-base question."""
    if has_document:
        return Intent.DOC_ONLY
    if has_image:
        return Intent.IMAGE_ONLY
    if _GREETING.match(question):
        return Intent.GREETING
    if has_history and _CLARIFY.search(question):
        return Intent.CLARIFICATION
    if _WEB.search(question):
        return Intent.WEB_SEARCH
    if _SUMMARY.search(question):
        return Intent.SUMMARIZE
    if _CHITCHAT.search(question):
        return Intent.CHITCHAT
    return Intent.KB_SEARCH


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
