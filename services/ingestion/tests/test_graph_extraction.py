"""Graph extraction as the graph stage sees it: batches, prompts, messy model replies and merged facts."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from knowsphere_contracts.vocabulary import MAX_ENTITY_NAME_CHARS, normalise_entity_name
from knowsphere_ingestion.domain.chunking import HeuristicTokenCounter
from knowsphere_ingestion.domain.graph import (
    DEFAULT_ENTITY_TYPES,
    ChunkText,
    ExtractedEntity,
    ExtractedRelation,
    ExtractionOutputError,
    GraphExtraction,
    batch_chunks,
    build_extraction_messages,
    merge_extractions,
    parse_extraction,
)

EN_BATCH = [
    ChunkText(
        "3f1c0a9e5b7d4c2a8e6f1b3d5a7c9e0f",
        "OpenAI released GPT-4 in March 2023. The model was trained on Microsoft Azure supercomputers.",
        ("Company history", "Products"),
    ),
    ChunkText(
        "8a2b4c6d8e0f1a3b5c7d9e1f3a5b7c9d",
        "Microsoft invested $10 billion in OpenAI. Satya Nadella is the CEO of Microsoft.",
        ("Company history", "Funding"),
    ),
]
ID1, ID2 = EN_BATCH[0].id, EN_BATCH[1].id

ZH_BATCH = [
    ChunkText("zh-chunk-0001", "华为技术有限公司总部位于深圳，由任正非于1987年创立。", ("公司概况",)),
    ChunkText("zh-chunk-0002", "华为发布了鸿蒙操作系统（HarmonyOS），用于手机和物联网设备。", ("产品",)),
    ChunkText("zh-chunk-0003", "2019年，美国商务部将华为列入实体清单。", ("事件",)),
]
Z1, Z2, Z3 = (chunk.id for chunk in ZH_BATCH)

EN_REPLY = """Here is the extracted knowledge graph:

```json
{
  "entities": [
    {"name": "OpenAI", "type": "organization", "description": "AI company that released GPT-4.",
     "aliases": ["Open AI"], "chunks": ["C1", "C2"]},
    {"name": "GPT-4", "type": "product", "description": "Large language model released in March 2023.",
     "aliases": [], "chunks": ["C1"]},
    {"name": "Microsoft", "type": "organization", "description": "Invested $10 billion in OpenAI.",
     "aliases": ["MSFT"], "chunks": ["C1", "C2"]},
    {"name": "Satya Nadella", "type": "person", "description": "CEO of Microsoft.", "chunks": ["C2"]},
    {"name": "Microsoft Azure", "type": "technology", "description": "Cloud used to train GPT-4.",
     "chunks": ["C1"]},
  ],
  "relations": [
    {"source": "OpenAI", "target": "GPT-4", "type": "develops", "description": "OpenAI released GPT-4.",
     "weight": 0.95, "chunks": ["C1"]},
    {"source": "Microsoft", "target": "OpenAI", "type": "invests_in",
     "description": "Microsoft invested $10 billion in OpenAI.", "weight": 0.9, "chunks": ["C2"]},
    {"source": "Satya Nadella", "target": "Microsoft", "type": "works_for", "description": "CEO.",
     "weight": 0.9, "chunks": ["C2"]},
  ]
}
```

Let me know if you need anything else."""

ZH_REPLY = """```json
{
  "entities": [
    {"name": "华为技术有限公司", "type": "组织", "description": "总部位于深圳的科技公司。",
     "aliases": ["华为"], "chunks": ["C1", "C2", "C3"]},
    {"name": "深圳", "type": "地点", "description": "华为总部所在地。", "chunks": ["C1"]},
    {"name": "任正非", "type": "人物", "description": "华为创始人。", "chunks": ["C1"]},
    {"name": "鸿蒙操作系统", "type": "产品", "description": "华为发布的操作系统。",
     "aliases": ["HarmonyOS"], "chunks": ["C2"]},
    {"name": "实体清单", "type": "概念", "description": "美国商务部的出口管制名单。", "chunks": ["C3"]}
  ],
  "relations": [
    {"source": "华为", "target": "深圳", "type": "located_in", "description": "华为总部位于深圳。",
     "weight": "0.9", "chunks": ["C1"]},
    {"source": "任正非", "target": "华为技术有限公司", "type": "founded", "description": "1987年创立华为。",
     "weight": 9, "chunks": ["C1"]},
    {"source": "华为技术有限公司", "target": "鸿蒙操作系统", "type": "develops", "description": "发布鸿蒙。",
     "weight": "高", "chunks": "C2"},
    {"source": "美国商务部", "target": "华为技术有限公司", "type": "sanctions",
     "description": "将华为列入实体清单。", "weight": 0.8, "chunks": ["C3"]}
  ]
}
```"""


def entity_names(extraction: GraphExtraction) -> list[str]:
    return [entity.name for entity in extraction.entities]


def by_name(extraction: GraphExtraction) -> dict[str, ExtractedEntity]:
    return {entity.name: entity for entity in extraction.entities}


def triples(extraction: GraphExtraction) -> list[tuple[str, str, str]]:
    return [(r.source_name, r.type, r.target_name) for r in extraction.relations]


def envelope(entities: Sequence[object], relations: Sequence[object] = ()) -> str:
    return json.dumps({"entities": list(entities), "relations": list(relations)}, ensure_ascii=False)


# --- batching -------------------------------------------------------------------------------------


def test_batches_group_consecutive_chunks_up_to_the_budget() -> None:
    chunks = [ChunkText(f"c{i}", " ".join(["word"] * 40)) for i in range(5)]
    batches = batch_chunks(chunks, max_tokens=100)
    assert [[c.id for c in batch] for batch in batches] == [["c0", "c1"], ["c2", "c3"], ["c4"]]


def test_batch_budget_counts_heading_path_tokens_too() -> None:
    counter = HeuristicTokenCounter()
    chunks = [ChunkText(f"c{i}", " ".join(["word"] * 48), ("Install", "Linux", "Debian")) for i in range(2)]
    assert counter.count(chunks[0].text) * 2 <= 100  # the bodies alone would fit one batch
    assert [len(batch) for batch in batch_chunks(chunks, max_tokens=100)] == [1, 1]


def test_oversized_chunk_is_its_own_batch_and_blank_chunks_are_skipped() -> None:
    chunks = [
        ChunkText("small-1", "short text"),
        ChunkText("huge", " ".join(["token"] * 500)),
        ChunkText("blank", "   \n "),
        ChunkText("small-2", "another short text"),
    ]
    batches = batch_chunks(chunks, max_tokens=50)
    assert [[c.id for c in batch] for batch in batches] == [["small-1"], ["huge"], ["small-2"]]


def test_chinese_chunks_are_counted_per_character() -> None:
    chunks = [ChunkText(f"z{i}", "这是一个测试句子" * 5) for i in range(3)]  # 40 tokens each
    assert [len(b) for b in batch_chunks(chunks, max_tokens=80)] == [2, 1]


def test_batching_rejects_a_non_positive_budget() -> None:
    with pytest.raises(ValueError, match=r"max_tokens must be > 0, got 0"):
        batch_chunks(EN_BATCH, max_tokens=0)


def test_no_chunks_no_batches() -> None:
    assert batch_chunks([], max_tokens=100) == []


# --- prompt ---------------------------------------------------------------------------------------


def test_english_prompt_lists_every_chunk_under_its_label_with_text_and_section() -> None:
    system, user = build_extraction_messages(EN_BATCH, "en")
    assert (system["role"], user["role"]) == ("system", "user")
    assert "[C1] (section: Company history > Products)\n" + EN_BATCH[0].text in user["content"]
    assert "[C2] (section: Company history > Funding)\n" + EN_BATCH[1].text in user["content"]
    assert user["content"].index("[C1]") < user["content"].index("[C2]")
    assert "[C3]" not in user["content"]
    assert ID1 not in user["content"] and ID2 not in user["content"]  # labels, not long ids


def test_english_prompt_asks_for_json_only_with_the_schema_and_types() -> None:
    system = build_extraction_messages(EN_BATCH, "en")[0]["content"]
    assert "Return ONLY one JSON object" in system
    assert '"entities": [{"name"' in system and '"relations": [{"source"' in system
    assert '"chunks": ["C1"]' in system
    assert "person, organization, location, product, technology, concept, event, date" in system
    assert "At most 50 entities and 80 relations" in system


def test_chinese_language_switches_the_instructions_but_keeps_the_schema() -> None:
    system, user = build_extraction_messages(ZH_BATCH, "zh")
    assert "只返回一个 JSON 对象" in system["content"]
    assert "Return ONLY" not in system["content"]
    assert '"relations": [{"source"' in system["content"]
    assert ", ".join(DEFAULT_ENTITY_TYPES) in system["content"]
    assert user["content"].startswith("请从以下 3 个片段中抽取实体和关系。")
    for label, chunk in zip(("C1", "C2", "C3"), ZH_BATCH, strict=True):
        assert f"[{label}] (章节: {chunk.heading_path[0]})\n{chunk.text}" in user["content"]


@pytest.mark.parametrize("language", ["zh-CN", "ZH", "zh_Hant"])
def test_chinese_variants_get_chinese_instructions(language: str) -> None:
    assert "只返回一个 JSON 对象" in build_extraction_messages(ZH_BATCH, language)[0]["content"]


@pytest.mark.parametrize("language", ["en", "de", ""])
def test_other_languages_get_english_instructions(language: str) -> None:
    assert "Return ONLY one JSON object" in build_extraction_messages(ZH_BATCH, language)[0]["content"]


def test_prompt_uses_custom_types_and_caps_and_omits_empty_section() -> None:
    system, user = build_extraction_messages(
        [ChunkText("x", "Aspirin treats headaches.")],
        "en",
        entity_types=("drug", "disease"),
        max_entities=5,
        max_relations=7,
    )
    assert "use exactly one of these English labels): drug, disease." in system["content"]
    assert "At most 5 entities and 7 relations" in system["content"]
    assert "[C1]\nAspirin treats headaches." in user["content"]


def test_prompt_for_an_empty_batch_is_an_error() -> None:
    with pytest.raises(ValueError, match="batch must hold at least one chunk"):
        build_extraction_messages([], "en")


# --- parsing realistic replies --------------------------------------------------------------------


def test_english_reply_with_fence_prose_and_trailing_commas() -> None:
    result = parse_extraction(EN_REPLY, EN_BATCH)
    assert entity_names(result) == ["GPT-4", "Microsoft", "Microsoft Azure", "OpenAI", "Satya Nadella"]
    assert by_name(result)["OpenAI"] == ExtractedEntity(
        name="OpenAI",
        type="organization",
        description="AI company that released GPT-4.",
        aliases=("Open AI",),
        source_chunk_ids=tuple(sorted((ID1, ID2))),
    )
    assert by_name(result)["Satya Nadella"].type == "person"
    assert by_name(result)["Satya Nadella"].source_chunk_ids == (ID2,)
    assert triples(result) == [
        ("Microsoft", "invests_in", "OpenAI"),
        ("OpenAI", "develops", "GPT-4"),
        ("Satya Nadella", "works_for", "Microsoft"),
    ]
    invests = result.relations[0]
    assert (invests.weight, invests.source_chunk_ids) == (0.9, (ID2,))
    assert invests.description == "Microsoft invested $10 billion in OpenAI."


def test_chinese_reply_maps_chinese_types_aliases_and_weights() -> None:
    result = parse_extraction(ZH_REPLY, ZH_BATCH)
    types = {entity.name: entity.type for entity in result.entities}
    assert types == {
        "华为技术有限公司": "organization",
        "深圳": "location",
        "任正非": "person",
        "鸿蒙操作系统": "product",
        "实体清单": "concept",
    }
    assert by_name(result)["鸿蒙操作系统"].aliases == ("HarmonyOS",)
    assert by_name(result)["华为技术有限公司"].source_chunk_ids == (Z1, Z2, Z3)
    relations = {(r.source_name, r.type, r.target_name): r for r in result.relations}
    # "华为" is an alias of 华为技术有限公司, so the relation lands on that entity.
    located = relations[("华为技术有限公司", "located_in", "深圳")]
    assert (located.weight, located.source_chunk_ids) == (0.9, (Z1,))
    assert relations[("任正非", "founded", "华为技术有限公司")].weight == 0.9  # 9 on a 1–10 scale
    assert relations[("华为技术有限公司", "develops", "鸿蒙操作系统")].weight == 0.9  # "高"
    assert relations[("华为技术有限公司", "develops", "鸿蒙操作系统")].source_chunk_ids == (Z2,)
    # 美国商务部 is not among the entities: the relation is kept, no placeholder entity is added.
    assert ("美国商务部", "sanctions", "华为技术有限公司") in relations
    assert "美国商务部" not in types


def test_think_block_and_braces_in_prose_are_ignored() -> None:
    raw = (
        '<think>The user wants {entities}. Maybe {"name": "Wrong"} first?</think>\n'
        "Output format is {json}. Result:\n" + envelope([{"name": "Right", "type": "concept"}])
    )
    assert entity_names(parse_extraction(raw, EN_BATCH)) == ["Right"]


def test_reply_without_any_json_raises_a_readable_error() -> None:
    with pytest.raises(ExtractionOutputError, match=r"no JSON object.*I cannot extract entities"):
        parse_extraction("I cannot extract entities from this text.", EN_BATCH)
    with pytest.raises(ExtractionOutputError, match=r"\(empty\)"):
        parse_extraction("   ", EN_BATCH)
    assert issubclass(ExtractionOutputError, ValueError)


def test_empty_envelope_is_an_empty_extraction_not_an_error() -> None:
    assert parse_extraction('{"entities": [], "relations": []}', EN_BATCH) == GraphExtraction()


def test_single_entity_object_instead_of_the_envelope() -> None:
    result = parse_extraction('{"name": "GPT-4", "type": "product", "chunks": ["C1"]}', EN_BATCH)
    assert result.entities == (ExtractedEntity("GPT-4", "product", "", (), (ID1,)),)


def test_bare_list_mixing_entities_and_relations() -> None:
    raw = (
        '[{"name": "OpenAI", "type": "organization"}, '
        '{"source": "OpenAI", "target": "GPT-4", "type": "builds"}]'
    )
    result = parse_extraction(raw, EN_BATCH)
    assert entity_names(result) == ["OpenAI"]
    assert triples(result) == [("OpenAI", "builds", "GPT-4")]


def test_alternative_keys_wrappers_and_single_objects_in_place_of_lists() -> None:
    raw = json.dumps(
        {
            "result": {
                "entities": {"entity_name": "Azure", "entity_type": "Technology", "desc": "Cloud."},
                "relationships": [{"src": "Azure", "tgt": "GPT-4", "relation": "trains", "strength": 7}],
            }
        }
    )
    result = parse_extraction(raw, EN_BATCH)
    assert result.entities == (ExtractedEntity("Azure", "technology", "Cloud.", (), (ID1, ID2)),)
    assert result.relations == (ExtractedRelation("Azure", "GPT-4", "trains", "", 0.7, (ID1, ID2)),)


def test_missing_optional_fields_get_defaults() -> None:
    result = parse_extraction(
        '{"entities": [{"name": "Bare"}], "relations": [{"source": "Bare", "target": "X"}]}', EN_BATCH
    )
    assert result.entities == (ExtractedEntity("Bare", "concept", "", (), (ID1, ID2)),)
    assert result.relations == (ExtractedRelation("Bare", "X", "related_to", "", 0.0, (ID1, ID2)),)


def test_bare_list_of_names_under_entities() -> None:
    result = parse_extraction('{"entities": ["OpenAI", "GPT-4"]}', EN_BATCH)
    assert [(e.name, e.type) for e in result.entities] == [("GPT-4", "concept"), ("OpenAI", "concept")]


def test_python_style_literals_and_comments_are_accepted() -> None:
    python_dict = "{'entities': [{'name': 'Microsoft', 'type': 'organization', 'aliases': None}]}"
    assert entity_names(parse_extraction(python_dict, EN_BATCH)) == ["Microsoft"]
    mixed = "{'entities': [{'name': 'Azure', 'type': 'technology', 'primary': true, 'aliases': null}]}"
    assert entity_names(parse_extraction(mixed, EN_BATCH)) == ["Azure"]
    commented = """{
      // entities found
      "entities": [{"name": "GPT-4", "type": "product", "verified": true}], /* none */ "relations": []
    }"""
    assert entity_names(parse_extraction(commented, EN_BATCH)) == ["GPT-4"]


def test_reply_cut_off_mid_item_keeps_the_complete_items() -> None:
    raw = (
        '{"entities": [{"name": "OpenAI", "type": "organization", "chunks": ["C1"]}, '
        '{"name": "GPT-4", "type": "product", "chunks": ["C1"]}, {"name": "Micro'
    )
    assert entity_names(parse_extraction(raw, EN_BATCH)) == ["GPT-4", "OpenAI"]
    cut_in_relations = (
        '{"entities": [{"name": "A"}, {"name": "B"}], "relations": [{"source": "A", "target": "B", '
        '"type": "uses"}, {"source": "B", "tar'
    )
    result = parse_extraction(cut_in_relations, EN_BATCH)
    assert (entity_names(result), triples(result)) == (["A", "B"], [("A", "uses", "B")])


def test_one_broken_item_does_not_lose_the_intact_list() -> None:
    raw = (
        '{"entities": [{"name": "Kept", "type": "person"}], "relations": [{"source": "Kept" "target": "X"}]}'
    )
    assert entity_names(parse_extraction(raw, EN_BATCH)) == ["Kept"]


@pytest.mark.parametrize(
    ("weight", "expected"),
    [
        (0.75, 0.75),
        ("0.6", 0.6),
        ("80%", 0.8),
        (7, 0.7),
        ("85", 0.85),
        (1, 1.0),
        (250, 1.0),
        ("medium", 0.6),
        ("低", 0.3),
        (-1, 0.0),
        ("strongly", 0.0),
        (None, 0.0),
        (True, 0.0),
    ],
)
def test_weights_are_read_into_zero_to_one(weight: object, expected: float) -> None:
    raw = json.dumps({"relations": [{"source": "A", "target": "B", "type": "t", "weight": weight}]})
    assert parse_extraction(raw, EN_BATCH).relations[0].weight == pytest.approx(expected)


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        (["C2"], (ID2,)),
        ("C1, C2", (ID1, ID2)),
        (["[C2]", "c1"], (ID1, ID2)),
        ([2], (ID2,)),
        ("1，2", (ID1, ID2)),
        (["C2", "C7"], (ID2,)),  # unknown label dropped
        (["C7", "C0"], (ID1, ID2)),  # nothing valid: every chunk of the batch
        ([], (ID1, ID2)),
        ([ID2], (ID2,)),  # the model echoed a real id
    ],
)
def test_chunk_labels_map_back_to_chunk_ids(chunks: object, expected: tuple[str, ...]) -> None:
    raw = envelope([{"name": "OpenAI", "chunks": chunks}], [{"source": "A", "target": "B", "chunks": chunks}])
    result = parse_extraction(raw, EN_BATCH)
    assert result.entities[0].source_chunk_ids == expected
    assert result.relations[0].source_chunk_ids == expected


def test_names_are_trimmed_collapsed_and_empty_or_oversized_names_dropped() -> None:
    raw = envelope(
        [
            {"name": "  Satya \n  Nadella ", "type": "person"},
            {"name": "   ", "type": "person"},
            {"name": "", "type": "person"},
            {"name": None, "type": "person"},
            {"name": "x" * (MAX_ENTITY_NAME_CHARS + 1), "type": "concept"},
            {"name": 2023, "type": "date"},
        ],
        [
            {"source": " ", "target": "Microsoft", "type": "leads"},
            {"source": "Satya  Nadella", "target": "Microsoft", "type": "leads"},
        ],
    )
    result = parse_extraction(raw, EN_BATCH)
    assert entity_names(result) == ["2023", "Satya Nadella"]
    assert triples(result) == [("Satya Nadella", "leads", "Microsoft")]


def test_a_name_is_dropped_when_its_merge_key_is_over_retrievals_limit() -> None:
    # "ß" case-folds to "ss": 300 characters as written, 600 as retrieval's merge key.
    long_key = "ß" * 300
    at_limit = "A" * MAX_ENTITY_NAME_CHARS
    raw = envelope([{"name": long_key, "type": "concept"}, {"name": at_limit, "type": "concept"}], [])
    assert len(normalise_entity_name(long_key)) > MAX_ENTITY_NAME_CHARS
    assert entity_names(parse_extraction(raw, EN_BATCH)) == [at_limit]


def test_duplicates_within_a_reply_merge_and_self_relations_are_dropped() -> None:
    raw = envelope(
        [
            {"name": "OpenAI", "type": "organization", "description": "Lab.", "chunks": ["C1"]},
            {"name": "openai", "type": "organization", "description": "AI research lab.", "chunks": ["C2"]},
        ],
        [
            {"source": "OpenAI", "target": "OPENAI", "type": "is"},
            {"source": "OpenAI", "target": "Open AI", "type": "same_as"},
        ],
    )
    result = parse_extraction(raw, EN_BATCH)
    assert result.entities == (ExtractedEntity("OpenAI", "organization", "AI research lab.", (), (ID1, ID2)),)
    assert triples(result) == [("OpenAI", "same_as", "Open AI")]


def test_types_are_normalised_to_the_fixed_labels() -> None:
    raw = envelope(
        [
            {"name": "A", "type": "Organisation"},
            {"name": "B", "type": "PERSON"},
            {"name": "C", "type": "Company"},
            {"name": "D", "type": "Locations"},
            {"name": "E", "type": "weird-thing"},
            {"name": "F", "type": 42},
        ]
    )
    types = [e.type for e in parse_extraction(raw, EN_BATCH).entities]
    assert types == ["organization", "person", "organization", "location", "concept", "concept"]


def test_custom_entity_types_are_honoured() -> None:
    raw = envelope([{"name": "Aspirin", "type": "Drug"}, {"name": "Bob", "type": "person"}])
    result = parse_extraction(raw, EN_BATCH, entity_types=("drug", "disease"))
    assert [(e.name, e.type) for e in result.entities] == [("Aspirin", "drug"), ("Bob", "concept")]


def test_relation_types_become_snake_case() -> None:
    raw = json.dumps(
        {
            "relations": [
                {"source": "A", "target": "B", "type": "Works For"},
                {"source": "A", "target": "C", "type": "part-of"},
                {"source": "A", "target": "D", "type": "位于"},
                {"source": "A", "target": "E", "type": "x" * 80},
            ]
        },
        ensure_ascii=False,
    )
    types = {r.target_name: r.type for r in parse_extraction(raw, EN_BATCH).relations}
    assert types == {"B": "works_for", "C": "part_of", "D": "位于", "E": "related_to"}


def test_aliases_from_a_string_are_split_deduplicated_and_exclude_the_name() -> None:
    raw = envelope([{"name": "OpenAI", "aliases": "OAI；Open AI、openai | oai"}])
    assert parse_extraction(raw, EN_BATCH).entities[0].aliases == ("OAI", "Open AI")


def test_caps_bound_a_runaway_reply() -> None:
    raw = envelope(
        [{"name": f"Entity {i}"} for i in range(10)] + [{"name": "entity 0", "description": "longer"}],
        [{"source": f"Entity {i}", "target": "Hub", "type": "links"} for i in range(10)],
    )
    result = parse_extraction(raw, EN_BATCH, max_entities=3, max_relations=4)
    assert entity_names(result) == ["Entity 0", "Entity 1", "Entity 2"]
    assert by_name(result)["Entity 0"].description == "longer"  # a duplicate of a kept one still merges
    assert [r.source_name for r in result.relations] == ["Entity 0", "Entity 1", "Entity 2", "Entity 3"]


def test_long_descriptions_are_truncated() -> None:
    raw = envelope([{"name": "A", "description": "word " * 1000}])
    description = parse_extraction(raw, EN_BATCH).entities[0].description
    assert len(description) == 999  # cut at 1000 characters, then the trailing space trimmed
    assert description.startswith("word word")


# --- merging --------------------------------------------------------------------------------------


def test_merge_across_batches_unions_chunks_aliases_and_keeps_longest_description_and_max_weight() -> None:
    first = GraphExtraction(
        entities=(ExtractedEntity("OpenAI", "organization", "AI lab.", ("OAI",), ("c3", "c1")),),
        relations=(ExtractedRelation("Microsoft", "OpenAI", "invests_in", "Invested.", 0.6, ("c1",)),),
    )
    second = GraphExtraction(
        entities=(
            ExtractedEntity(
                "ＯｐｅｎＡＩ", "concept", "An AI research company.", ("Open AI", "oai"), ("c2",)
            ),
            ExtractedEntity("Microsoft", "organization", "", (), ("c2",)),
        ),
        relations=(
            ExtractedRelation("microsoft", "OAI", "Invests_In", "Invested $10B in 2023.", 0.9, ("c2",)),
        ),
    )
    merged = merge_extractions([first, second])
    assert merged.entities == (
        ExtractedEntity("Microsoft", "organization", "", (), ("c2",)),
        ExtractedEntity(
            "OpenAI", "organization", "An AI research company.", ("OAI", "Open AI"), ("c1", "c2", "c3")
        ),
    )
    # The alias "OAI" resolves to OpenAI, so both relations are one.
    assert merged.relations == (
        ExtractedRelation("Microsoft", "OpenAI", "invests_in", "Invested $10B in 2023.", 0.9, ("c1", "c2")),
    )


def test_merge_keeps_relation_direction_and_type_apart() -> None:
    merged = merge_extractions(
        [
            GraphExtraction(relations=(ExtractedRelation("A", "B", "uses", "", 0.5, ("c1",)),)),
            GraphExtraction(
                relations=(
                    ExtractedRelation("B", "A", "uses", "", 0.5, ("c2",)),
                    ExtractedRelation("A", "B", "owns", "", 0.5, ("c2",)),
                )
            ),
        ]
    )
    assert triples(merged) == [("A", "owns", "B"), ("A", "uses", "B"), ("B", "uses", "A")]


def test_entity_type_majority_with_fallback_losing() -> None:
    def extraction(kind: str) -> GraphExtraction:
        return GraphExtraction(entities=(ExtractedEntity("Apple", kind, "", (), ("c",)),))

    votes = ["concept", "concept", "product", "organization", "organization"]
    assert merge_extractions([extraction(k) for k in votes]).entities[0].type == "organization"
    assert merge_extractions([extraction(k) for k in ["concept", "concept"]]).entities[0].type == "concept"


def test_merge_output_is_sorted_and_independent_of_batch_order() -> None:
    first = parse_extraction(EN_REPLY, EN_BATCH)
    second = parse_extraction(ZH_REPLY, ZH_BATCH)
    forward = merge_extractions([first, second])
    backward = merge_extractions([second, first])
    assert forward == backward
    assert [normalise_entity_name(e.name) for e in forward.entities] == sorted(
        normalise_entity_name(e.name) for e in forward.entities
    )
    assert merge_extractions([first, second]) == forward  # re-runs give identical requests


def test_parsing_the_same_reply_twice_gives_identical_results() -> None:
    assert parse_extraction(ZH_REPLY, ZH_BATCH) == parse_extraction(ZH_REPLY, ZH_BATCH)
    shuffled = json.loads(ZH_REPLY.strip("`json\n"))
    shuffled["entities"].reverse()
    shuffled["relations"].reverse()
    assert parse_extraction(json.dumps(shuffled, ensure_ascii=False), ZH_BATCH) == parse_extraction(
        ZH_REPLY, ZH_BATCH
    )


def test_merge_of_nothing_is_empty() -> None:
    assert merge_extractions([]) == GraphExtraction()


def test_end_to_end_batches_prompt_parse_merge() -> None:
    # 21 + 19 tokens for the English chunks, 29 + 28 + 20 for the Chinese ones.
    mixed = batch_chunks([*EN_BATCH, *ZH_BATCH], max_tokens=80)
    assert [[c.id for c in b] for b in mixed] == [[ID1, ID2, Z1], [Z2, Z3]]
    batches = [*batch_chunks(EN_BATCH, max_tokens=80), *batch_chunks(ZH_BATCH, max_tokens=80)]
    assert [[c.id for c in b] for b in batches] == [[ID1, ID2], [Z1, Z2, Z3]]
    replies = {ID1: EN_REPLY, Z1: ZH_REPLY}
    for batch in batches:
        assert all(
            f"[C{i + 1}]" in build_extraction_messages(batch, "en")[1]["content"] for i in range(len(batch))
        )
    merged = merge_extractions(parse_extraction(replies[b[0].id], b) for b in batches)
    assert len(merged.entities) == 10
    assert len(merged.relations) == 7
    assert {c for e in merged.entities for c in e.source_chunk_ids} == {ID1, ID2, Z1, Z2, Z3}


def test_brackets_quotes_and_escapes_inside_strings_do_not_confuse_the_scanner() -> None:
    raw = (
        'Result: {"entities": [{"name": "O\'Reilly Media", "type": "organization", '
        '"description": "Publishes \\"Learning {Python}\\" [2nd ed.] \\\\ more."}]} trailing } ]'
    )
    (entity,) = parse_extraction(raw, EN_BATCH).entities
    assert (entity.name, entity.description) == (
        "O'Reilly Media",
        'Publishes "Learning {Python}" [2nd ed.] \\ more.',
    )


def test_long_prose_full_of_unclosed_brackets_is_an_error_not_a_hang() -> None:
    with pytest.raises(ExtractionOutputError):
        parse_extraction("I could not { find anything [ in it's text " * 500, EN_BATCH)
