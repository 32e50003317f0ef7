"""Typed client for the Quarry retrieval service (`Quarry`, `AsyncQuarry`), its wire models
(`quarry_client.models`) and errors (`quarry_client.errors`); LangChain and LlamaIndex
retrievers in `quarry_client.langchain` and `quarry_client.llamaindex` (optional extras)."""

from quarry_client.client import AsyncQuarry, Quarry
from quarry_client.errors import (Conflict, Forbidden, InvalidRequest, NotFound, PayloadTooLarge, QuarryError, RateLimited,
                                  RetrievalTimeout, RetrievalUnavailable, ServerError, SqlRejected, TransportError,
                                  Unauthenticated)
from quarry_client.models import Answer, ContextItem, DocumentOut, Gap, SearchOut, SqlOut, ToolCallOut, WriteOut

__all__ = ["Answer", "AsyncQuarry", "Conflict", "ContextItem", "DocumentOut", "Forbidden", "Gap", "InvalidRequest",
           "NotFound", "PayloadTooLarge", "Quarry", "QuarryError", "RateLimited", "RetrievalTimeout",
           "RetrievalUnavailable", "SearchOut", "ServerError", "SqlOut", "SqlRejected", "ToolCallOut", "TransportError",
           "Unauthenticated", "WriteOut"]
