"""The texts the conversation sends to models: the agent's system segment, the task segment, the
query-understanding requests and the fixed replies used when no chat model is configured.

The system segment depends only on the agent (identity, limits, bound skills) — never on this turn's
switches or language — so its bytes stay equal from turn to turn and the provider's prompt cache keeps
hitting. Everything that a switch changes is in :func:`task_segment`, after it.
"""

from __future__ import annotations

from collections.abc import Sequence

from knowsphere_conversation.domain.intents import LABELS

DEFAULT_IDENTITY = "You are KnowSphere, an assistant that answers questions from an organisation's documents."

RULES = """Rules:
- Facts come only from the results of retrieval or web tools of this turn. Never answer a factual \
question from memory; if the tools find nothing, say so plainly.
- After a hit, read the passage in full with list_chunks before relying on it.
- A previous turn's tool results are not evidence for this turn: search again.
- Cite each fact right after it with its source handle in double brackets, e.g. "The fee is 5% [[c2]].". \
Use only handles of this turn's results; never write [1] or a list of references at the end.
- Answer in the language of the question unless the task says otherwise. Be concise."""


WORKSPACE_RULES = """You work as a deep agent, in a file workspace kept for this conversation:
- For a task of several steps, write your plan first with write_plan and keep it up to date.
- Keep notes, intermediate results and drafts in workspace files (workspace_write, workspace_edit) \
and read them back (workspace_ls, workspace_read) instead of holding everything in mind.
- Skill scripts (execute_skill_script) read the workspace's files in /workspace/input and what they \
write to /workspace/output comes back into the workspace under output/.
- Facts still come from retrieval or the web; cite them as usual."""


def system_segment(identity: str, skills: Sequence[tuple[str, str]] = (), *, workspace: bool = False) -> str:
    """Identity, capability limits, how a deep agent works (``workspace``) and the bound skills
    catalogue (name, description)."""
    parts = [identity.strip() or DEFAULT_IDENTITY, RULES]
    if workspace:
        parts.append(WORKSPACE_RULES)
    if skills:
        lines = [
            f"- {name}: {description} (instructions: /skills/{name}/SKILL.md)" for name, description in skills
        ]
        parts.append("Skills (read the instructions with read_file before using one):\n" + "\n".join(lines))
    return "\n\n".join(parts)


def task_segment(*, knowledge_bases: int, web_search: bool, knowledge_graph: bool, language: str) -> str:
    """This turn's switches: what the tools can reach and the answer language."""
    lines = [
        "Task settings:",
        f"- knowledge bases selected: {'yes' if knowledge_bases else 'no'}",
        f"- web search: {'on' if web_search else 'off'}",
        f"- knowledge graph: {'on' if knowledge_graph else 'off'}",
        f"- answer language: {language or 'the language of the question'}",
    ]
    return "\n".join(lines)


def turn_context(
    *, rewritten: str, image_description: str, skills: Sequence[str], background: str, passages: str = ""
) -> str:
    """The block right before the question: what query understanding found, who is asking and, on the
    retrieve route, the passages found (or the experts' answers of a collaboration), with their header.

    ``background`` is memory's block as it is to be placed (it has its own header, in the asker's
    language), so it goes in unchanged."""
    parts = []
    if rewritten:
        parts.append(f"Search query for this question: {rewritten}")
    if image_description:
        parts.append(f"The attached image shows: {image_description}")
    if skills:
        parts.append("Skills named for this question: " + ", ".join(skills))
    if background:
        parts.append(background)
    if passages:
        parts.append(passages)
    return "\n\n".join(parts)


PASSAGES_HEADER = (
    "Passages found in the knowledge bases for this question. Answer from them only; put [[cN]] right "
    "after each fact taken from passage cN; if they do not hold the answer, say so."
)


SUPERVISE_RELAY = (
    "You lead a team: hand each part of the user's question to the worker who knows it best with its "
    "transfer_to_… tool (one self-contained task each), then pass on what they answered, keeping their "
    "[[cN]] citations; answer yourself only what no worker covers."
)
SUPERVISE_SUMMARIZE = (
    "You lead a team: hand each part of the user's question to the worker who knows it best with its "
    "transfer_to_… tool (one self-contained task each), then write one summary of their answers for the "
    "user, keeping their [[cN]] citations right after the facts they support."
)

EXPERTS_HEADER = (
    "Answers of the experts to this question, in order. Combine them into one answer for the user: keep "
    "what they agree on, say where they differ, and keep their [[cN]] citations right after the facts "
    "they support; add no fact they do not give."
)


WORKFLOW_HEADER = (
    "Results of the earlier steps of this workflow, in the order they ran. Answer the user from them; "
    "keep their [[cN]] citations right after the facts they support (a result's [cN] labels are those "
    "sources); add no fact they do not give."
)


def workflow_briefing(produced: Sequence[tuple[str, str]], task: str) -> str:
    """The earlier steps' results and this step's task as the answering step's prompt shows them."""
    results = "\n\n".join(f"[step {step}]\n{text.strip()}" for step, text in produced)
    return f"{WORKFLOW_HEADER}\n\n{results}\n\nThis step's task:\n{task}"


def experts_briefing(answers: Sequence[tuple[str, str]]) -> str:
    """The experts' answers as the summary's prompt shows them; each is (expert name, answer)."""
    return EXPERTS_HEADER + "\n\n" + "\n\n".join(f"[{name}]\n{text.strip()}" for name, text in answers)


def numbered_passages(passages: Sequence[tuple[str, str, int, Sequence[str], str]]) -> str:
    """Passages as the answer's prompt shows them: ``[cN] file, page, heading path`` then the text;
    each is (handle, file name, page, heading path, text)."""
    blocks = []
    for handle, file_name, page, headings, text in passages:
        where = ", ".join(
            part for part in (file_name, f"p. {page}" if page else "", " > ".join(headings)) if part
        )
        blocks.append(f"[{handle}] {where}\n{text.strip()}")
    return PASSAGES_HEADER + "\n\n" + "\n\n".join(blocks)


HANDOFF_HEADER = "Summary of the earlier conversation (older turns were compacted):"

# --- query understanding: short requests of their own, never sharing the main prefix ---------------

REWRITE_SYSTEM = """Rewrite the user's latest question into a standalone search query.
Only resolve references (pronouns, "it", "that one", 它, 这个) and ellipsis from the conversation.
Keep every cue such as "latest", "most popular", 最近, 比较火. Keep the language of the question.
Never add instructions such as "search again for". Reply with the query only."""

INTENT_PROMPT = "Which label fits the user's latest message? Answer with the label's letter only."


def intent_labels() -> list[tuple[str, str]]:
    return [(label.code, label.description) for label in LABELS]


# --- replies without a chat model ----------------------------------------------------------------

ADD_MODEL_HINT = {
    "en": "No chat model is configured, so this answer is extracted from the documents, not written. "
    "Add one under Models (or set KS_MODELHUB_KNOWLEDGE_QA_PROVIDER / _MODEL / _API_KEY) "
    "for written answers.",
    "zh": "尚未配置对话模型，以下内容摘自文档原文，并非模型生成。"
    "在「模型」中添加对话模型（或设置 KS_MODELHUB_KNOWLEDGE_QA_PROVIDER / _MODEL / _API_KEY）"
    "即可获得完整回答。",
}
NO_MODEL_GREETING = {
    "en": "Hello! Ask me about the documents in your knowledge bases. No chat model is configured yet, "
    "so I can only quote the passages that match; add one under Models for written answers.",
    "zh": "你好！可以就知识库里的文档向我提问。目前尚未配置对话模型，我只能摘录匹配的原文；"
    "在「模型」中添加对话模型即可获得完整回答。",
}
NO_MODEL_NO_KB = {
    "en": "No chat model is configured and no knowledge base is selected, so there is nothing I can answer "
    "from. Select a knowledge base to get matching passages, or add a chat model under Models.",
    "zh": "尚未配置对话模型，也没有选择知识库，因此无法回答。"
    "选择知识库可获得匹配的原文摘录，或在「模型」中添加对话模型。",
}
NOTHING_FOUND = {
    "en": "The selected knowledge bases have no passage that matches this question.",
    "zh": "所选知识库中没有与这个问题相关的内容。",
}


def reply_language(language: str, question: str) -> str:
    """``zh`` or ``en`` for the fixed replies: the requested language, else the question's script."""
    if language:
        return "zh" if language.lower().startswith("zh") else "en"
    return "zh" if any("\u4e00" <= ch <= "\u9fff" for ch in question) else "en"


__all__ = [
    "ADD_MODEL_HINT",
    "DEFAULT_IDENTITY",
    "HANDOFF_HEADER",
    "INTENT_PROMPT",
    "NOTHING_FOUND",
    "NO_MODEL_GREETING",
    "NO_MODEL_NO_KB",
    "REWRITE_SYSTEM",
    "intent_labels",
    "reply_language",
    "system_segment",
    "task_segment",
    "turn_context",
]
