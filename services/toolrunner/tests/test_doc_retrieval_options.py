"""doc_retrieval's search options: what the model asks for reaches retrieval's SearchOptions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from knowsphere.retrieval.v1 import retrieval_pb2 as rpb
from knowsphere_toolrunner.domain.sources import SourceBook
from knowsphere_toolrunner.domain.tools.base import ToolContext, TurnSwitches
from knowsphere_toolrunner.domain.tools.knowledge.search import DocRetrieval


class RecordingReader:
    """A retrieval reader that answers one hit and keeps the options of each search."""

    def __init__(self) -> None:
        self.options: list[rpb.SearchOptions | None] = []

    async def search(
        self,
        query: str,
        knowledge_base_ids: Sequence[str],
        *,
        top_k: int = 0,
        document_ids: Sequence[str] = (),
        options: rpb.SearchOptions | None = None,
    ) -> rpb.SearchResponse:
        self.options.append(options)
        hit = rpb.SearchResult(handle="h1", chunk_id="c1", document_id="d1", file_name="a.pdf", text="found")
        return rpb.SearchResponse(results=[hit])

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"doc_retrieval called {name}")


def context() -> ToolContext:
    return ToolContext("acme", "u1", "s1", "t1", TurnSwitches(knowledge_base_ids=("kb",)), SourceBook())


async def test_second_hop_is_passed_to_retrieval_as_the_model_set_it():
    reader = RecordingReader()
    tool = DocRetrieval(reader, default_top_k=8, max_top_k=50, timeout=10)  # type: ignore[arg-type]
    assert tool.spec.parameters["properties"]["second_hop"]["type"] == "boolean"
    assert "bridge" in tool.spec.parameters["properties"]["second_hop"]["description"]

    await tool.run({"query": "the university where X's advisor studied", "second_hop": True}, context())
    await tool.run({"query": "annual leave", "second_hop": False}, context())
    await tool.run({"query": "annual leave"}, context())

    asked, refused, unset = reader.options
    assert asked is not None and asked.HasField("second_hop") and asked.second_hop
    assert refused is not None and refused.HasField("second_hop") and not refused.second_hop
    assert unset is None  # the server's default applies
