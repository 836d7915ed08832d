"""Merging extractions, within a batch and across a document's batches, by retrieval's keys.

Merging uses retrieval's keys: entities by ``normalise_entity_name`` (the shared vocabulary's merge
key), relations by (source, type, target). It unions chunk ids and aliases (sorted), keeps the longest
description, the highest weight, the first-seen name, and the most frequent type other than the
fallback. Relation endpoints take the merged entity's name, also when they cite an alias another batch
gave; self-relations are dropped. Output is sorted by key, so the same replies always give
byte-identical requests.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import replace

from knowsphere_contracts.vocabulary import normalise_entity_name
from knowsphere_ingestion.domain.graph.records import (
    FALLBACK_ENTITY_TYPE,
    ExtractedEntity,
    ExtractedRelation,
    GraphExtraction,
)


def merge_extractions(extractions: Iterable[GraphExtraction]) -> GraphExtraction:
    """One extraction for a document: duplicates merged by retrieval's keys, sorted by key."""
    extractions = list(extractions)
    entity_groups: dict[str, list[ExtractedEntity]] = {}
    for extraction in extractions:
        for entity in extraction.entities:
            entity_groups.setdefault(normalise_entity_name(entity.name), []).append(entity)
    entities = {key: _merge_entities(group) for key, group in entity_groups.items()}
    # Endpoints take the merged entity's name, also when they cite an alias another batch gave.
    names = name_index(entities.values())

    relation_groups: dict[tuple[str, str, str], list[ExtractedRelation]] = {}
    for extraction in extractions:
        for relation in extraction.relations:
            source = names.get(normalise_entity_name(relation.source_name), relation.source_name)
            target = names.get(normalise_entity_name(relation.target_name), relation.target_name)
            if normalise_entity_name(source) == normalise_entity_name(target):
                continue
            renamed = replace(relation, source_name=source, target_name=target)
            relation_groups.setdefault(relation_key(renamed), []).append(renamed)
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
        aliases=sorted_unique(
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


def relation_key(relation: ExtractedRelation) -> tuple[str, str, str]:
    """The (source, type, target) key retrieval merges relations by, each part normalised."""
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


def sorted_unique(names: Iterable[str]) -> tuple[str, ...]:
    """Names deduplicated by normalised form (first spelling kept), sorted by that form."""
    unique: dict[str, str] = {}
    for name in names:
        unique.setdefault(normalise_entity_name(name), name)
    return tuple(unique[k] for k in sorted(unique))


def name_index(entities: Iterable[ExtractedEntity]) -> dict[str, str]:
    """Normalised name or alias → entity name; names win over another entity's alias."""
    index: dict[str, str] = {}
    entities = list(entities)
    for entity in entities:
        for alias in entity.aliases:
            index.setdefault(normalise_entity_name(alias), entity.name)
    for entity in entities:
        index[normalise_entity_name(entity.name)] = entity.name
    return index
