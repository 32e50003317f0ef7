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

Credentials: exactly one of `api_key` (a key or a token) and `token_provider` (a zero-argument
callable returning a token, called before every request). An app whose credential holds the
`act_as` right answers for its end users through `user_token_provider`: LlamaIndex's
`retrieve()` takes no extra arguments, so the user comes from the provider, typically reading
a contextvar the app sets for each request:

    from contextvars import ContextVar
    current_user_token: ContextVar[str] = ContextVar("current_user_token")

    retriever = QuarryRetriever(URL, token_provider=idp.app_token,
                                user_token_provider=current_user_token.get)

    def handle(request):                        # each request, each thread or task
        current_user_token.set(request.user_jwt)
        return query_engine.query(request.question)

A contextvar is per thread and per asyncio task (a task copies its creator's), so concurrent
requests each send their own user; code that hands retrieval to a plain thread pool must copy
the context (`contextvars.copy_context().run`). An unset contextvar raises `LookupError`, so a
request without a user fails instead of running as the app.
"""

from __future__ import annotations

from typing import Any, Callable

from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from quarry_client.client import AsyncQuarry, Quarry
from quarry_client.models import Answer, Gap


class QuarryRetriever(BaseRetriever):
    """Quarry's loop (`POST /v1/query`) as a LlamaIndex retriever."""

    def __init__(self, base_url: str, api_key: str | None = None, *, token_provider: Callable[[], str] | None = None,
                 user_token_provider: Callable[[], str] | None = None, k: int | None = None,
                 max_attempts: int | None = None, deadline_ms: int | None = None, filters: dict[str, Any] | None = None,
                 timeout: float = 30.0, max_retries: int = 3, on_gap: Callable[[Gap], None] | None = None,
                 **kwargs: Any) -> None:
        if (api_key is None) == (token_provider is None):
            raise ValueError("give exactly one of api_key and token_provider")
        super().__init__(**kwargs)
        credential = token_provider if token_provider is not None else api_key
        assert credential is not None  # checked above: exactly one of them
        self._credential: str | Callable[[], str] = credential
        self._user_token = user_token_provider
        self._base_url, self._timeout, self._max_retries = base_url, timeout, max_retries
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
        with Quarry(self._base_url, self._credential, self._timeout, max_retries=self._max_retries,
                    user_token=self._user_token) as client:
            return self._nodes(client.query(query_bundle.query_str, **self._options))  # type: ignore[arg-type]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        async with AsyncQuarry(self._base_url, self._credential, self._timeout, max_retries=self._max_retries,
                               user_token=self._user_token) as client:
            return self._nodes(await client.query(query_bundle.query_str, **self._options))  # type: ignore[arg-type]
