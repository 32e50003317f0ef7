"""A LangChain retriever over Quarry (`pip install 'quarry-client[langchain]'`).

    from quarry_client.langchain import QuarryRetriever
    retriever = QuarryRetriever(base_url="http://127.0.0.1:8000", api_key=KEY)
    docs = retriever.invoke("What is the Q3 2025 budget for the payments platform?")

Each passage of the answer context is a `Document` whose metadata carries Quarry's
provenance under the answer shape's names (`doc_id`, `chunk_id`, `title`, `source`, `date`,
`offsets`, `score`, `retrievers`, `trust`). An evidence gap returns no documents: the app
should say "not enough evidence" instead of generating. The gap itself (reason, missing,
detail) goes to the callbacks as the custom event `quarry_evidence_gap`, and to `on_gap`
when one is set.

Credentials: exactly one of `api_key` (a key or a token, kept as a `SecretStr`) and
`token_provider` (a zero-argument callable returning a token, called before every request,
so a refreshed token is used). An app whose credential holds the `act_as` right answers for
its end users: give the user's token per call,

    docs = retriever.invoke(question, user_token=user_jwt)     # or await retriever.ainvoke(...)

or a `user_token_provider` (for instance reading a contextvar the app sets per request) when
the retriever runs inside a chain, where `invoke` keyword arguments do not reach it. A
per-call token wins over the provider. The user token is neither stored on the retriever nor
handed to the run's callbacks (`invoke` passes its keyword arguments to the retrieval alone).
"""

from __future__ import annotations

from typing import Any, Callable

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.callbacks.manager import adispatch_custom_event, dispatch_custom_event
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, SecretStr, model_validator

from quarry_client.client import AsyncQuarry, Quarry
from quarry_client.models import Answer, Gap

GAP_EVENT = "quarry_evidence_gap"


def _dispatch(name: str, data: Any, run_manager: CallbackManagerForRetrieverRun) -> None:
    """A custom event to the callbacks of this retriever run (its children's manager)."""
    try:
        dispatch_custom_event(name, data, config={"callbacks": run_manager.get_child()})
    except RuntimeError:  # no run to report to
        pass


class QuarryRetriever(BaseRetriever):
    """Quarry's loop (`POST /v1/query`) as a LangChain retriever."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    base_url: str
    api_key: SecretStr | None = None
    token_provider: Callable[[], str] | None = Field(default=None, exclude=True,
                                                     description="called before every request for the bearer token")
    user_token_provider: Callable[[], str] | None = Field(default=None, exclude=True,
                                                          description="the end user's token, for an app with act_as")
    k: int | None = Field(default=None, description="passages in the answer context (server default: 8)")
    max_attempts: int | None = None
    deadline_ms: int | None = None
    filters: dict[str, Any] | None = None
    timeout: float = 30.0
    max_retries: int = 3
    on_gap: Callable[[Gap], None] | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _one_credential(self) -> "QuarryRetriever":
        if (self.api_key is None) == (self.token_provider is None):
            raise ValueError("give exactly one of api_key and token_provider")
        return self

    def _credential(self) -> str | Callable[[], str]:
        if self.token_provider is not None:
            return self.token_provider
        assert self.api_key is not None  # the validator holds one of them
        return self.api_key.get_secret_value()

    @staticmethod
    def _documents(answer: Answer) -> list[Document]:
        if answer.status == "evidence_gap":
            return []
        return [Document(page_content=item.text, metadata=item.provenance(), id=item.chunk_id) for item in answer.context]

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun,
                                user_token: str | None = None) -> list[Document]:
        with Quarry(self.base_url, self._credential(), self.timeout, max_retries=self.max_retries,
                    user_token=self.user_token_provider) as client:
            answer = client.query(query, k=self.k, max_attempts=self.max_attempts, deadline_ms=self.deadline_ms,
                                  filters=self.filters, user_token=user_token)
        if answer.gap is not None and answer.status == "evidence_gap":
            _dispatch(GAP_EVENT, answer.gap.model_dump(), run_manager)
            if self.on_gap is not None:
                self.on_gap(answer.gap)
        return self._documents(answer)

    async def _aget_relevant_documents(self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun,
                                       user_token: str | None = None) -> list[Document]:
        async with AsyncQuarry(self.base_url, self._credential(), self.timeout, max_retries=self.max_retries,
                               user_token=self.user_token_provider) as client:
            answer = await client.query(query, k=self.k, max_attempts=self.max_attempts, deadline_ms=self.deadline_ms,
                                        filters=self.filters, user_token=user_token)
        if answer.gap is not None and answer.status == "evidence_gap":
            try:
                await adispatch_custom_event(GAP_EVENT, answer.gap.model_dump(), config={"callbacks": run_manager.get_child()})
            except RuntimeError:  # called outside a run: no callbacks to tell
                pass
            if self.on_gap is not None:
                self.on_gap(answer.gap)
        return self._documents(answer)
