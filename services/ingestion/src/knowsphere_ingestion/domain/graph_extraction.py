"""Entity and relation extraction for the knowledge graph: prompt building, output parsing, merging.

Pure logic, no I/O: the ingestion workflow's graph stage sends each batch's messages to a chat model
and feeds the reply back here; the merged result becomes retrieval's ``IndexGraph`` request
(``EntityInput`` / ``RelationInput``).

Rules a caller can rely on:

* Batches are runs of consecutive chunks within a token budget (chunk text plus heading path, counted
  like the chunker does). A chunk is never split; one bigger than the budget is a batch on its own.
  Chunks with blank text are skipped: there is nothing to extract from them.
* Chunks are shown to the model under local labels ``C1``, ``C2`` … (in batch order) so the model cites
  short labels, not 32-character ids; the parser maps labels back to chunk ids. Unknown labels are
  dropped; an item citing no valid label is attributed to every chunk of its batch.
* The prompt language follows the answer language (``zh*`` → Chinese instructions, else English);
  names are always kept as written in the text, entity types are always the English labels of
  ``DEFAULT_ENTITY_TYPES`` (the spec names no type list; these are the usual LightRAG-style types),
  relation types are asked for as short English ``snake_case`` labels.
* Parsing is tolerant of real model output: ``<think>`` blocks, code fences, prose around the JSON,
  trailing commas, ``//`` comments, Python-style literals, output cut off mid-JSON (the complete items
  before the cut are kept), a bare list or a single entity/relation object instead of the envelope,
  alternative key names (``relationships``, ``entity_name``, ``src``/``tgt`` …), types in Chinese, and
  weights as strings, percentages, 1–10 or 1–100 scores, or high/medium/low. It raises
  ``ExtractionOutputError`` only when the reply holds no JSON object or array at all.
* Names are trimmed with whitespace runs collapsed; empty names and names whose merge key is over
  ``MAX_ENTITY_NAME_CHARS`` (retrieval's limit, which would reject the whole request) are dropped.
  Unknown entity types become ``FALLBACK_ENTITY_TYPE``; a missing relation type becomes
  ``DEFAULT_RELATION_TYPE``.
* A relation whose endpoint is not among the extracted entities is kept *without* adding a placeholder
  entity: retrieval already merges a relation's endpoints as entities supported by the relation's
  chunks, with an empty type that never overwrites a type the graph already has — a placeholder typed
  ``concept`` would. An endpoint matching an extracted entity's name or alias (after normalisation) is
  rewritten to that entity's name so both land on one node. Self-relations are dropped.
* Per batch at most ``max_entities`` distinct entities and ``max_relations`` distinct relations are kept
  (the first ones in the model's order), bounding what a runaway reply can add.
* Merging (within a batch and across batches) uses retrieval's keys: entities by
  ``normalise_entity_name`` (the shared vocabulary's merge key), relations by (source, type, target).
  It unions chunk ids and aliases (sorted), keeps the longest description, the highest weight, the
  first-seen name, and the most frequent type other than the fallback. Output is sorted by key, so the
  same replies always give byte-identical requests.
"""

from __future__ import annotations

import ast
import json
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from knowsphere_contracts.vocabulary import MAX_ENTITY_NAME_CHARS, normalise_entity_name
from knowsphere_ingestion.domain.chunking import HeuristicTokenCounter, TokenCounter

DEFAULT_BATCH_MAX_TOKENS: Final = 3000
DEFAULT_MAX_ENTITIES_PER_BATCH: Final = 50
DEFAULT_MAX_RELATIONS_PER_BATCH: Final = 80
MAX_DESCRIPTION_CHARS: Final = 1000
MAX_ALIASES_PER_ENTITY: Final = 10
MAX_RELATION_TYPE_CHARS: Final = 64
CHUNK_LABEL_PREFIX: Final = "C"

DEFAULT_ENTITY_TYPES: Final[tuple[str, ...]] = (
    "person",
    "organization",
    "location",
    "product",
    "technology",
    "concept",
    "event",
    "date",
)
FALLBACK_ENTITY_TYPE: Final = "concept"
DEFAULT_RELATION_TYPE: Final = "related_to"

# Type names models use instead of the requested labels (English variants and Chinese).
_TYPE_SYNONYMS: Final[Mapping[str, str]] = {
    "people": "person",
    "human": "person",
    "per": "person",
    "人物": "person",
    "人名": "person",
    "人": "person",
    "organisation": "organization",
    "org": "organization",
    "company": "organization",
    "institution": "organization",
    "组织": "organization",
    "机构": "organization",
    "组织机构": "organization",
    "公司": "organization",
    "企业": "organization",
    "place": "location",
    "geo": "location",
    "gpe": "location",
    "loc": "location",
    "country": "location",
    "city": "location",
    "地点": "location",
    "地名": "location",
    "位置": "location",
    "地区": "location",
    "国家": "location",
    "城市": "location",
    "产品": "product",
    "persons": "person",
    "organizations": "organization",
    "locations": "location",
    "products": "product",
    "technologies": "technology",
    "concepts": "concept",
    "events": "event",
    "dates": "date",
    "tech": "technology",
    "method": "technology",
    "algorithm": "technology",
    "技术": "technology",
    "方法": "technology",
    "算法": "technology",
    "概念": "concept",
    "术语": "concept",
    "事件": "event",
    "time": "date",
    "datetime": "date",
    "日期": "date",
    "时间": "date",
}
_WORD_WEIGHTS: Final[Mapping[str, float]] = {
    "high": 0.9,
    "strong": 0.9,
    "高": 0.9,
    "强": 0.9,
    "medium": 0.6,
    "moderate": 0.6,
    "中": 0.6,
    "low": 0.3,
    "weak": 0.3,
    "低": 0.3,
    "弱": 0.3,
}

_ENTITY_KEYS: Final = ("entities", "entity", "nodes", "实体")
_RELATION_KEYS: Final = ("relations", "relationships", "relation", "edges", "关系")
_NAME_KEYS: Final = ("name", "entity_name", "entity", "title", "名称")
_TYPE_KEYS: Final = ("type", "entity_type", "category", "label", "类型")
_DESCRIPTION_KEYS: Final = ("description", "desc", "summary", "描述")
_ALIAS_KEYS: Final = ("aliases", "alias", "other_names", "别名")
_CHUNK_KEYS: Final = ("chunks", "chunk", "chunk_ids", "source_chunks", "sources", "source_chunk_ids", "来源")
_SOURCE_KEYS: Final = ("source", "source_name", "src", "from", "head", "subject", "源")
_TARGET_KEYS: Final = ("target", "target_name", "tgt", "to", "tail", "object", "目标")
_RELATION_TYPE_KEYS: Final = ("type", "relation_type", "relation", "predicate", "label", "类型")
_WEIGHT_KEYS: Final = ("weight", "strength", "confidence", "score", "权重")

_WHITESPACE: Final = re.compile(r"\s+")
_THINK_BLOCK: Final = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_FENCE: Final = re.compile(r"```[A-Za-z0-9_-]*")
_LABEL: Final = re.compile(rf"(?i)\b{CHUNK_LABEL_PREFIX}\s*(\d+)\b")
_BARE_NUMBERS: Final = re.compile(r"^[\d\s,，;；、]+$")
_ALIAS_SEPARATORS: Final = re.compile(r"[;；、|]")
_RELATION_TYPE_JUNK: Final = re.compile(r"[^\w]+")
_PERCENT: Final = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*%\s*$")
_SCAN_CHARS: Final = re.compile(r"[{}\[\]\"'\\]")
_MAX_JSON_STARTS: Final = 1000  # brackets tried as the start of a value, bounding work on prose
_EXCERPT_CHARS: Final = 200
_SALVAGE_ATTEMPTS: Final = 50


class ExtractionOutputError(ValueError):
    """The model's reply holds no JSON object or array to read entities and relations from."""


@dataclass(frozen=True)
class ChunkText:
    id: str
    text: str
    heading_path: tuple[str, ...] = ()


@dataclass(frozen=True)
class ExtractedEntity:
    name: str
    type: str
    description: str = ""
    aliases: tuple[str, ...] = ()
    source_chunk_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class ExtractedRelation:
    source_name: str
    target_name: str
    type: str
    description: str = ""
    weight: float = 0.0  # in [0, 1]; 0 means not given
    source_chunk_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class GraphExtraction:
    entities: tuple[ExtractedEntity, ...] = ()
    relations: tuple[ExtractedRelation, ...] = ()


def chunk_label(index: int) -> str:
    """The label of the ``index``-th (0-based) chunk of a batch: ``C1``, ``C2`` …"""
    return f"{CHUNK_LABEL_PREFIX}{index + 1}"


# --- batching -----------------------------------------------------------------------------------------


def batch_chunks(
    chunks: Sequence[ChunkText],
    max_tokens: int = DEFAULT_BATCH_MAX_TOKENS,
    counter: TokenCounter | None = None,
) -> list[list[ChunkText]]:
    """Consecutive non-blank chunks grouped so each batch's text and heading paths fit ``max_tokens``."""
    if max_tokens <= 0:
        raise ValueError(f"max_tokens must be > 0, got {max_tokens}")
    counter = counter or HeuristicTokenCounter()
    batches: list[list[ChunkText]] = []
    current: list[ChunkText] = []
    used = 0
    for chunk in chunks:
        if not chunk.text.strip():
            continue
        tokens = counter.count(chunk.text) + counter.count(" ".join(chunk.heading_path))
        if current and used + tokens > max_tokens:
            batches.append(current)
            current, used = [], 0
        current.append(chunk)
        used += tokens
    if current:
        batches.append(current)
    return batches


# --- prompt -------------------------------------------------------------------------------------------

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


# --- parsing ------------------------------------------------------------------------------------------


def parse_extraction(
    raw: str,
    batch: Sequence[ChunkText],
    *,
    entity_types: Sequence[str] = DEFAULT_ENTITY_TYPES,
    max_entities: int = DEFAULT_MAX_ENTITIES_PER_BATCH,
    max_relations: int = DEFAULT_MAX_RELATIONS_PER_BATCH,
) -> GraphExtraction:
    """Entities and relations of one model reply for ``batch``, labels mapped back to chunk ids."""
    if max_entities < 0 or max_relations < 0:
        raise ValueError(f"max_entities and max_relations must be >= 0, got {max_entities}, {max_relations}")
    values = _json_values(raw)
    if not values:
        excerpt = raw.strip()[:_EXCERPT_CHARS] or "(empty)"
        raise ExtractionOutputError(
            f"the model's reply holds no JSON object with entities and relations; it begins: {excerpt!r}"
        )
    entity_items: list[Mapping[str, Any]] = []
    relation_items: list[Mapping[str, Any]] = []
    for value in values:
        _collect_items(value, entity_items, relation_items)

    chunk_ids = tuple(chunk.id for chunk in batch)
    allowed = {t.casefold(): t for t in entity_types}
    entities: list[ExtractedEntity] = []
    entity_keys: set[str] = set()
    for item in entity_items:
        entity = _entity(item, chunk_ids, allowed)
        if entity is None:
            continue
        entity_key = normalise_entity_name(entity.name)
        if entity_key in entity_keys or len(entity_keys) < max_entities:
            entity_keys.add(entity_key)
            entities.append(entity)

    names = _name_index(entities)
    relations: list[ExtractedRelation] = []
    relation_keys: set[tuple[str, str, str]] = set()
    for item in relation_items:
        relation = _relation(item, chunk_ids, names)
        if relation is None:
            continue
        relation_key = _relation_key(relation)
        if relation_key in relation_keys or len(relation_keys) < max_relations:
            relation_keys.add(relation_key)
            relations.append(relation)
    return merge_extractions([GraphExtraction(tuple(entities), tuple(relations))])


def _collect_items(
    value: Any, entities: list[Mapping[str, Any]], relations: list[Mapping[str, Any]], depth: int = 0
) -> None:
    """Sort the dicts of one JSON value into entity and relation items, whatever the envelope."""
    if isinstance(value, list):
        for item in value:
            if isinstance(item, dict):
                _collect_items(item, entities, relations, depth)
        return
    if not isinstance(value, dict):
        return
    entity_list = _first(value, _ENTITY_KEYS)
    relation_list = _first(value, _RELATION_KEYS)
    if isinstance(entity_list, list | dict) or isinstance(relation_list, list | dict):
        for item in _as_list(entity_list):
            if isinstance(item, dict):
                entities.append(item)
            elif isinstance(item, str):  # a bare list of names
                entities.append({"name": item})
        for item in _as_list(relation_list):
            if isinstance(item, dict):
                relations.append(item)
        return
    if _first(value, _SOURCE_KEYS) is not None and _first(value, _TARGET_KEYS) is not None:
        relations.append(value)
    elif _first(value, _NAME_KEYS) is not None:
        entities.append(value)
    elif depth == 0:
        # A wrapper such as {"result": {...}} or {"data": [...]}: look one level down.
        for inner in value.values():
            _collect_items(inner, entities, relations, depth + 1)


def _entity(
    item: Mapping[str, Any], chunk_ids: tuple[str, ...], allowed: Mapping[str, str]
) -> ExtractedEntity | None:
    name = _clean_name(_first(item, _NAME_KEYS))
    if not name:
        return None
    key = normalise_entity_name(name)
    aliases = tuple(
        alias for alias in _aliases(_first(item, _ALIAS_KEYS)) if normalise_entity_name(alias) != key
    )[:MAX_ALIASES_PER_ENTITY]
    return ExtractedEntity(
        name=name,
        type=_entity_type(_first(item, _TYPE_KEYS), allowed),
        description=_clean_description(_first(item, _DESCRIPTION_KEYS)),
        aliases=_sorted_unique(aliases),
        source_chunk_ids=_chunk_ids(_first(item, _CHUNK_KEYS), chunk_ids),
    )


def _relation(
    item: Mapping[str, Any], chunk_ids: tuple[str, ...], names: Mapping[str, str]
) -> ExtractedRelation | None:
    source = _clean_name(_first(item, _SOURCE_KEYS))
    target = _clean_name(_first(item, _TARGET_KEYS))
    if not source or not target:
        return None
    source = names.get(normalise_entity_name(source), source)
    target = names.get(normalise_entity_name(target), target)
    if normalise_entity_name(source) == normalise_entity_name(target):
        return None
    return ExtractedRelation(
        source_name=source,
        target_name=target,
        type=_relation_type(_first(item, _RELATION_TYPE_KEYS)),
        description=_clean_description(_first(item, _DESCRIPTION_KEYS)),
        weight=_weight(_first(item, _WEIGHT_KEYS)),
        source_chunk_ids=_chunk_ids(_first(item, _CHUNK_KEYS), chunk_ids),
    )


def _name_index(entities: Iterable[ExtractedEntity]) -> dict[str, str]:
    """Normalised name or alias → entity name; names win over another entity's alias."""
    index: dict[str, str] = {}
    entities = list(entities)
    for entity in entities:
        for alias in entity.aliases:
            index.setdefault(normalise_entity_name(alias), entity.name)
    for entity in entities:
        index[normalise_entity_name(entity.name)] = entity.name
    return index


def _first(item: Mapping[str, Any], keys: Sequence[str]) -> Any:
    """The value of the first of ``keys`` present (keys compared case-insensitively), else None."""
    folded = {str(k).strip().casefold(): v for k, v in item.items()}
    for key in keys:
        if key in folded and folded[key] is not None:
            return folded[key]
    return None


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return ""


def _clean_name(value: Any) -> str:
    name = _WHITESPACE.sub(" ", _text(value)).strip()
    # Retrieval refuses the whole request when one name's merge key is over the limit.
    return name if len(normalise_entity_name(name)) <= MAX_ENTITY_NAME_CHARS else ""


def _clean_description(value: Any) -> str:
    text = _WHITESPACE.sub(" ", _text(value)).strip()
    return text[:MAX_DESCRIPTION_CHARS].rstrip()


def _aliases(value: Any) -> list[str]:
    raw: list[str] = []
    for item in _as_list(value):
        text = _text(item)
        raw.extend(_ALIAS_SEPARATORS.split(text) if isinstance(item, str) else [text])
    return [alias for alias in (_clean_name(a) for a in raw) if alias]


def _entity_type(value: Any, allowed: Mapping[str, str]) -> str:
    folded = _WHITESPACE.sub("_", unicodedata.normalize("NFKC", _text(value)).casefold().strip())
    folded = folded.replace("-", "_")
    if folded in allowed:
        return allowed[folded]
    synonym = _TYPE_SYNONYMS.get(folded)
    if synonym is not None and synonym in allowed:
        return allowed[synonym]
    return FALLBACK_ENTITY_TYPE


def _relation_type(value: Any) -> str:
    folded = unicodedata.normalize("NFKC", _text(value)).casefold()
    label = _RELATION_TYPE_JUNK.sub("_", folded).strip("_")
    if not label or len(label) > MAX_RELATION_TYPE_CHARS:
        return DEFAULT_RELATION_TYPE
    return label


def _weight(value: Any) -> float:
    """A weight in [0, 1]; 0 (not given) for anything unreadable."""
    number: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):
        text = value.strip().casefold()
        percent = _PERCENT.match(text)
        if percent:
            number = float(percent.group(1)) / 100
        elif text in _WORD_WEIGHTS:
            number = _WORD_WEIGHTS[text]
        else:
            try:
                number = float(text)
            except ValueError:
                number = None
    if number is None or math.isnan(number) or number <= 0:
        return 0.0
    if number > 1:
        # Scores on a 1–10 scale (LightRAG's prompt asks for those) or a 1–100 scale.
        number = number / 10 if number <= 10 else number / 100
    return min(number, 1.0)


def _chunk_ids(value: Any, chunk_ids: tuple[str, ...]) -> tuple[str, ...]:
    """Chunk ids of the labels cited (``C2``, ``"[C1, C3]"``, ``2``, a chunk id); all ids if none is valid."""
    known = set(chunk_ids)
    cited: set[str] = set()
    for item in _as_list(value):
        if isinstance(item, int) and not isinstance(item, bool):
            numbers = [item]
        elif isinstance(item, str):
            if item.strip() in known:
                cited.add(item.strip())
                continue
            numbers = [int(n) for n in _LABEL.findall(item)]
            if not numbers and _BARE_NUMBERS.match(item):
                numbers = [int(n) for n in re.findall(r"\d+", item)]
        else:
            continue
        cited.update(chunk_ids[n - 1] for n in numbers if 1 <= n <= len(chunk_ids))
    return tuple(sorted(cited or known))


# --- merging ------------------------------------------------------------------------------------------


def merge_extractions(extractions: Iterable[GraphExtraction]) -> GraphExtraction:
    """One extraction for a document: duplicates merged by retrieval's keys, sorted by key."""
    extractions = list(extractions)
    entity_groups: dict[str, list[ExtractedEntity]] = {}
    for extraction in extractions:
        for entity in extraction.entities:
            entity_groups.setdefault(normalise_entity_name(entity.name), []).append(entity)
    entities = {key: _merge_entities(group) for key, group in entity_groups.items()}
    # Endpoints take the merged entity's name, also when they cite an alias another batch gave.
    names = _name_index(entities.values())

    relation_groups: dict[tuple[str, str, str], list[ExtractedRelation]] = {}
    for extraction in extractions:
        for relation in extraction.relations:
            source = names.get(normalise_entity_name(relation.source_name), relation.source_name)
            target = names.get(normalise_entity_name(relation.target_name), relation.target_name)
            if normalise_entity_name(source) == normalise_entity_name(target):
                continue
            renamed = replace(relation, source_name=source, target_name=target)
            relation_groups.setdefault(_relation_key(renamed), []).append(renamed)
    relations = {key: _merge_relations(group) for key, group in relation_groups.items()}
    return GraphExtraction(
        entities=tuple(entities[k] for k in sorted(entities)),
        relations=tuple(relations[k] for k in sorted(relations)),
    )


def _merge_entities(group: Sequence[ExtractedEntity]) -> ExtractedEntity:
    first = group[0]
    key = normalise_entity_name(first.name)
    return ExtractedEntity(
        name=first.name,
        type=_majority_type(entity.type for entity in group),
        description=_longest(entity.description for entity in group),
        aliases=_sorted_unique(
            alias for entity in group for alias in entity.aliases if normalise_entity_name(alias) != key
        ),
        source_chunk_ids=tuple(sorted({c for entity in group for c in entity.source_chunk_ids})),
    )


def _merge_relations(group: Sequence[ExtractedRelation]) -> ExtractedRelation:
    first = group[0]
    return ExtractedRelation(
        source_name=first.source_name,
        target_name=first.target_name,
        type=first.type,
        description=_longest(relation.description for relation in group),
        weight=max(relation.weight for relation in group),
        source_chunk_ids=tuple(sorted({c for relation in group for c in relation.source_chunk_ids})),
    )


def _relation_key(relation: ExtractedRelation) -> tuple[str, str, str]:
    return (
        normalise_entity_name(relation.source_name),
        normalise_entity_name(relation.type),
        normalise_entity_name(relation.target_name),
    )


def _majority_type(types: Iterable[str]) -> str:
    """The most frequent type, the fallback losing to any other; ties go to the first seen."""
    counts = Counter(types)
    specific = [(t, n) for t, n in counts.items() if t != FALLBACK_ENTITY_TYPE]
    candidates = specific or list(counts.items())
    best = max(n for _, n in candidates)
    return next(t for t, n in candidates if n == best)


def _longest(texts: Iterable[str]) -> str:
    """The longest text; ties go to the lexicographically smallest, so the choice never depends on order."""
    return min(texts, key=lambda text: (-len(text), text), default="")


def _sorted_unique(names: Iterable[str]) -> tuple[str, ...]:
    """Names deduplicated by normalised form (first spelling kept), sorted by that form."""
    unique: dict[str, str] = {}
    for name in names:
        unique.setdefault(normalise_entity_name(name), name)
    return tuple(unique[k] for k in sorted(unique))


# --- finding JSON in a reply --------------------------------------------------------------------------


def _json_values(raw: str) -> list[Any]:
    """Every top-level JSON object or array in ``raw`` that can be read, in order."""
    text = _FENCE.sub("", _THINK_BLOCK.sub("", raw))
    values: list[Any] = []
    position = 0
    for _ in range(_MAX_JSON_STARTS):
        start = _next_opening(text, position)
        if start < 0:
            break
        end, state, closings = _scan(text, start)
        value = _load(text[start:end]) if state == "closed" else _salvage(text, start, closings)
        if value is _UNREADABLE:
            # Not JSON from here (prose such as "{name}", or a broken item): try the next bracket,
            # which may be an intact inner list or object.
            position = start + 1
            continue
        if isinstance(value, dict | list):
            values.append(value)
        if state == "truncated":
            break
        position = end
    return values


def _next_opening(text: str, position: int) -> int:
    starts = [i for i in (text.find("{", position), text.find("[", position)) if i >= 0]
    return min(starts, default=-1)


# A point right after a nested value closed, with the closers of the brackets still open there.
_Closing = tuple[int, str]


def _scan(text: str, start: int) -> tuple[int, str, list[_Closing]]:
    """End of the bracketed value at ``start``; "closed", "truncated" or "mismatched"; inner closings."""
    stack: list[str] = []
    quote = ""
    escaped_until = -1  # index of the character a backslash escapes
    closings: list[_Closing] = []
    for match in _SCAN_CHARS.finditer(text, start):
        i, char = match.start(), match.group()
        if quote:
            if i == escaped_until:
                continue
            if char == "\\":
                escaped_until = i + 1
            elif char == quote:
                quote = ""
            continue
        if char in "\"'":
            quote = char
        elif char in "{[":
            stack.append("}" if char == "{" else "]")
        elif char in "}]":
            if stack[-1] != char:
                return i, "mismatched", closings
            stack.pop()
            if not stack:
                return i + 1, "closed", closings
            closings.append((i + 1, "".join(reversed(stack))))
    return len(text), "truncated", closings


class _Unreadable:
    pass


_UNREADABLE: Final = _Unreadable()


def _load(candidate: str) -> Any:
    try:
        return json.loads(candidate, strict=False)
    except ValueError:
        pass
    cleaned = _strip_comments_and_trailing_commas(candidate)
    try:
        return json.loads(cleaned, strict=False)
    except ValueError:
        pass
    try:
        # Python-style output: single quotes, True/None.
        return ast.literal_eval(cleaned)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        pass
    try:
        return ast.literal_eval(_python_literals(cleaned))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return _UNREADABLE


def _salvage(text: str, start: int, closings: list[_Closing]) -> Any:
    """A value cut off (or broken by a stray bracket): close it after the last inner value that parses."""
    for end, closers in reversed(closings[-_SALVAGE_ATTEMPTS:]):
        value = _load(text[start:end] + closers)
        if value is not _UNREADABLE:
            return value
    return _UNREADABLE


def _outside_strings(text: str) -> Iterator[tuple[int, str, bool]]:
    """(index, char, inside a string literal) for each character of ``text``."""
    quote = ""
    escaped = False
    for i, char in enumerate(text):
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
                yield i, char, True
                continue
            yield i, char, True
            continue
        if char in "\"'":
            quote = char
            yield i, char, True
            continue
        yield i, char, False


def _strip_comments_and_trailing_commas(text: str) -> str:
    kept: list[str] = []
    inside = [False] * len(text)
    for i, _, in_string in _outside_strings(text):
        inside[i] = in_string
    i = 0
    while i < len(text):
        char = text[i]
        if not inside[i]:
            if text.startswith("//", i):
                newline = text.find("\n", i)
                i = len(text) if newline < 0 else newline
                continue
            if text.startswith("/*", i):
                close = text.find("*/", i + 2)
                i = len(text) if close < 0 else close + 2
                continue
            if char == ",":
                j = i + 1
                while j < len(text) and text[j].isspace():
                    j += 1
                if j < len(text) and text[j] in "}]" and not inside[j]:
                    i += 1
                    continue
        kept.append(char)
        i += 1
    return "".join(kept)


def _python_literals(text: str) -> str:
    """JSON's true/false/null outside strings as Python's True/False/None, for ``ast.literal_eval``."""
    inside = [in_string for _, _, in_string in _outside_strings(text)]
    out: list[str] = []
    for match in re.finditer(r"\b(true|false|null)\b|.", text, re.DOTALL):
        word = match.group(1)
        if word and not inside[match.start()]:
            out.append({"true": "True", "false": "False", "null": "None"}[word])
        else:
            out.append(match.group(0))
    return "".join(out)
