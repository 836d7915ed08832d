"""The chat messages asking a model for one batch's entities and relations as JSON.

The prompt language follows the answer language (``zh*`` → Chinese instructions, else English);
names are always kept as written in the text, entity types are always the English labels of
``DEFAULT_ENTITY_TYPES`` (the spec names no type list; these are the usual LightRAG-style types),
relation types are asked for as short English ``snake_case`` labels. Each chunk is shown under its
label (:func:`chunk_label`) with its heading path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from knowsphere_ingestion.domain.graph.records import (
    DEFAULT_ENTITY_TYPES,
    DEFAULT_MAX_ENTITIES_PER_BATCH,
    DEFAULT_MAX_RELATIONS_PER_BATCH,
    ChunkText,
    chunk_label,
)

_SYSTEM_EN: Final = """\
You extract a knowledge graph from document excerpts.

Find the important named entities in the excerpts and the relations between them that the text states.

Entity types (use exactly one of these English labels): {types}.

Rules:
- Keep every name exactly as written in the text (same language and spelling); do not translate names.
- Put other names of the same entity (abbreviations, full names, translations found in the text) in "aliases".
- "description": one or two sentences, based only on the excerpts, in the language of the excerpts.
- Relation "type": a short lowercase English snake_case label such as part_of, located_in, works_for, \
founded_by, develops, uses, produces, depends_on.
- "source" and "target" of a relation must be entity names from your "entities" list.
- "weight": a number from 0 to 1 for how clearly the text supports the relation.
- "chunks": the labels (like "C1") of the excerpts the item comes from. Cite labels only, never invent labels.
- At most {max_entities} entities and {max_relations} relations; skip trivial or generic terms.
- If there is nothing to extract, return {{"entities": [], "relations": []}}.

Return ONLY one JSON object, with no explanation and no Markdown, in this form:
{schema}"""

_SYSTEM_ZH: Final = """\
你负责从文档片段中抽取知识图谱。

找出片段中重要的命名实体，以及文本明确说明的实体之间的关系。

实体类型（type 只能取下列英文标签之一）：{types}。

规则：
- 实体名称与原文保持完全一致（语言和写法都不变），不要翻译名称。
- 同一实体在文中出现的其他名称（简称、全称、译名）放在 "aliases" 中。
- "description"：一到两句话，只依据片段内容，使用片段的语言。
- 关系的 "type"：简短的小写英文 snake_case 标签，例如 part_of、located_in、works_for、founded_by、\
develops、uses、produces、depends_on。
- 关系的 "source" 和 "target" 必须是 "entities" 列表中的实体名称。
- "weight"：0 到 1 之间的数字，表示文本对该关系的支持程度。
- "chunks"：该条目来源片段的标签（如 "C1"）。只引用给出的标签，不要编造。
- 最多 {max_entities} 个实体、{max_relations} 条关系；忽略琐碎或泛泛的词语。
- 如果没有可抽取的内容，返回 {{"entities": [], "relations": []}}。

只返回一个 JSON 对象，不要任何解释，不要 Markdown，格式如下：
{schema}"""

_SCHEMA: Final = (
    '{"entities": [{"name": "...", "type": "...", "description": "...", "aliases": ["..."], '
    '"chunks": ["C1"]}], '
    '"relations": [{"source": "...", "target": "...", "type": "...", "description": "...", '
    '"weight": 0.8, "chunks": ["C1"]}]}'
)

_USER_INTRO_EN: Final = "Extract entities and relations from these {count} excerpts."
_USER_INTRO_ZH: Final = "请从以下 {count} 个片段中抽取实体和关系。"
_USER_OUTRO_EN: Final = "Return the JSON object now."
_USER_OUTRO_ZH: Final = "现在只返回 JSON 对象。"
_SECTION_EN: Final = "section"
_SECTION_ZH: Final = "章节"


def is_chinese(language: str) -> bool:
    """Whether ``language`` (``zh``, ``zh-CN``, ``zh_Hant`` …) asks for Chinese instructions."""
    return language.strip().lower().replace("_", "-").split("-")[0] == "zh"


def build_extraction_messages(
    batch: Sequence[ChunkText],
    language: str,
    *,
    entity_types: Sequence[str] = DEFAULT_ENTITY_TYPES,
    max_entities: int = DEFAULT_MAX_ENTITIES_PER_BATCH,
    max_relations: int = DEFAULT_MAX_RELATIONS_PER_BATCH,
) -> list[dict[str, str]]:
    """A system and a user chat message asking for the batch's entities and relations as JSON."""
    if not batch:
        raise ValueError("batch must hold at least one chunk")
    if not entity_types:
        raise ValueError("entity_types must name at least one type")
    chinese = is_chinese(language)
    system = (_SYSTEM_ZH if chinese else _SYSTEM_EN).format(
        types=", ".join(entity_types),
        max_entities=max_entities,
        max_relations=max_relations,
        schema=_SCHEMA,
    )
    section = _SECTION_ZH if chinese else _SECTION_EN
    parts = [(_USER_INTRO_ZH if chinese else _USER_INTRO_EN).format(count=len(batch))]
    for index, chunk in enumerate(batch):
        header = f"[{chunk_label(index)}]"
        if chunk.heading_path:
            header += f" ({section}: {' > '.join(chunk.heading_path)})"
        parts.append(f"{header}\n{chunk.text.strip()}")
    parts.append(_USER_OUTRO_ZH if chinese else _USER_OUTRO_EN)
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": "\n\n".join(parts)},
    ]
