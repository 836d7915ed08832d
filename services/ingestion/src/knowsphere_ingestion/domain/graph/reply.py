"""Reading one model reply into the entities and relations of its batch.

* Parsing is tolerant of real model output: ``<think>`` blocks, code fences, prose around the JSON,
  trailing commas, ``//`` comments, Python-style literals, output cut off mid-JSON (the complete items
  before the cut are kept), a bare list or a single entity/relation object instead of the envelope,
  alternative key names (``relationships``, ``entity_name``, ``src``/``tgt`` …), types in Chinese, and
  weights as strings, percentages, 1–10 or 1–100 scores, or high/medium/low. It raises
  ``ExtractionOutputError`` only when the reply holds no JSON object or array at all. (Finding the JSON
  values in the reply is :mod:`.json_salvage`; reading their items is this module.)
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
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any, Final

from knowsphere_contracts.vocabulary import MAX_ENTITY_NAME_CHARS, normalise_entity_name
from knowsphere_ingestion.domain.graph.json_salvage import json_values
from knowsphere_ingestion.domain.graph.merge import merge_extractions, name_index, relation_key, sorted_unique
from knowsphere_ingestion.domain.graph.records import (
    CHUNK_LABEL_PREFIX,
    DEFAULT_ENTITY_TYPES,
    DEFAULT_MAX_ENTITIES_PER_BATCH,
    DEFAULT_MAX_RELATIONS_PER_BATCH,
    DEFAULT_RELATION_TYPE,
    FALLBACK_ENTITY_TYPE,
    MAX_ALIASES_PER_ENTITY,
    MAX_DESCRIPTION_CHARS,
    MAX_RELATION_TYPE_CHARS,
    ChunkText,
    ExtractedEntity,
    ExtractedRelation,
    GraphExtraction,
)

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
_LABEL: Final = re.compile(rf"(?i)\b{CHUNK_LABEL_PREFIX}\s*(\d+)\b")
_BARE_NUMBERS: Final = re.compile(r"^[\d\s,，;；、]+$")
_ALIAS_SEPARATORS: Final = re.compile(r"[;；、|]")
_RELATION_TYPE_JUNK: Final = re.compile(r"[^\w]+")
_PERCENT: Final = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*%\s*$")
_EXCERPT_CHARS: Final = 200


class ExtractionOutputError(ValueError):
    """The model's reply holds no JSON object or array to read entities and relations from."""


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
    values = json_values(raw)
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

    names = name_index(entities)
    relations: list[ExtractedRelation] = []
    relation_keys: set[tuple[str, str, str]] = set()
    for item in relation_items:
        relation = _relation(item, chunk_ids, names)
        if relation is None:
            continue
        merge_key = relation_key(relation)
        if merge_key in relation_keys or len(relation_keys) < max_relations:
            relation_keys.add(merge_key)
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
        aliases=sorted_unique(aliases),
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
