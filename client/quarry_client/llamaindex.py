"""A LlamaIndex retriever over Quarry (`pip install 'quarry-client[llamaindex]'`).

    from quarry_client.llamaindex import QuarryRetriever
    retriever = QuarryRetriever(base_url="http://127.0.0.1:8000", api_key=KEY)
    nodes = retriever.retrieve("What is the Q3 2025 budget for the payments platform?")

Each passage is a `NodeWithScore` (a `TextNode` with id = Quarry's chunk id, score = its
score) whose metadata carries Quarry's provenance under the answer shape's names (`doc_id`,
`chunk_id`, `title`, `source`, `date`, `offsets`, `score`, `retrievers`, `trust`). An evidence
gap returns no nodes: the app should say "not enough evidence" instead of generating. The
gap (reason, missing, detail) is handed to `on_gap` when one is set (a callback, not an
attribute, so one retriever can serve several threads).
"""

from __future__ import annotations

from typing import Any, Callable

from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from quarry_client.client import AsyncQuarry, Quarry
from quarry_client.models import Answer, Gap


class QuarryRetriever(BaseRetriever):
    """Quarry's loop (`POST /v1/query`) as a LlamaIndex retriever."""

    def __init__(self, base_url: str, api_key: str, *, k: int | None = None, max_attempts: int | None = None,
                 deadline_ms: int | None = None, filters: dict[str, Any] | None = None, timeout: float = 30.0,
                 max_retries: int = 3, on_gap: Callable[[Gap], None] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._base_url, self._api_key, self._timeout, self._max_retries = base_url, api_key, timeout, max_retries
        self._options = {"k": k, "max_attempts": max_attempts, "deadline_ms": deadline_ms, "filters": filters}
        self._on_gap = on_gap

    def _nodes(self, answer: Answer) -> list[NodeWithScore]:
        if answer.status == "evidence_gap":
            if answer.gap is not None and self._on_gap is not None:
                self._on_gap(answer.gap)
            return []
        return [NodeWithScore(node=TextNode(id_=item.chunk_id, text=item.text, metadata=item.provenance()), score=item.score)
                for item in answer.context]

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        with Quarry(self._base_url, self._api_key, self._timeout, max_retries=self._max_retries) as client:
            return self._nodes(client.query(query_bundle.query_str, **self._options))  # type: ignore[arg-type]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        async with AsyncQuarry(self._base_url, self._api_key, self._timeout, max_retries=self._max_retries) as client:
            return self._nodes(await client.query(query_bundle.query_str, **self._options))  # type: ignore[arg-type]
