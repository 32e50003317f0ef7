"""The LangChain and LlamaIndex retrievers, with the real `langchain-core` and
`llama-index-core`, against a real server: documents and provenance metadata, a gap returns
nothing and is reported, and two principals never see each other's documents."""

from __future__ import annotations

import asyncio
import json

import httpx
from langchain_core.callbacks import BaseCallbackHandler

from quarry_client.langchain import GAP_EVENT
from quarry_client.langchain import QuarryRetriever as LangChainRetriever
from quarry_client.llamaindex import QuarryRetriever as LlamaIndexRetriever
from tests.conftest import DEMO

BUDGET = "What is the Q3 2025 budget for the payments platform?"
FINANCE_DOC = "note-finance-q3-2025-budget"
METADATA = {"doc_id", "chunk_id", "title", "source", "date", "offsets", "page", "section", "score", "retrievers", "trust"}


class Events(BaseCallbackHandler):
    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []

    def on_custom_event(self, name, data, *, run_id, tags=None, metadata=None, **kwargs) -> None:
        self.events.append((name, data))


def _questions(n: int = 12) -> list[str]:
    lines = (DEMO / "questions.jsonl").read_text().splitlines()
    return [json.loads(line)["question"] for line in lines[:n]]


def _readable(live, who: str, doc_id: str) -> bool:
    r = httpx.get(f"{live.url}/v1/documents/{doc_id}", headers={"Authorization": f"Bearer {live.keys[who]}"}, timeout=30)
    return r.status_code == 200


def test_langchain_documents_carry_provenance_and_a_gap_returns_none(live):
    bob = LangChainRetriever(base_url=live.url, api_key=live.keys["bob"])
    docs = bob.invoke(BUDGET)
    assert docs and docs[0].metadata["doc_id"] == FINANCE_DOC
    assert all(set(d.metadata) == METADATA and d.metadata["trust"] == "untrusted_evidence" for d in docs)
    assert all(d.id == d.metadata["chunk_id"] and d.page_content for d in docs)
    assert docs[0].metadata["offsets"]["end"] > docs[0].metadata["offsets"]["start"]
    events, gaps = Events(), []
    alice = LangChainRetriever(base_url=live.url, api_key=live.keys["alice"], on_gap=gaps.append)
    assert alice.invoke(BUDGET, config={"callbacks": [events]}) == []
    assert [name for name, _ in events.events] == [GAP_EVENT]
    reported = events.events[0][1]
    assert reported["reason"] in {"insufficient_evidence", "no_authorized_evidence", "constraint_unmet"}
    assert gaps and gaps[0].reason == reported["reason"]
    assert asyncio.run(bob.ainvoke(BUDGET))[0].metadata["doc_id"] == FINANCE_DOC
    async_events = Events()
    assert asyncio.run(alice.ainvoke(BUDGET, config={"callbacks": [async_events]})) == []
    assert [name for name, _ in async_events.events] == [GAP_EVENT]


def test_llamaindex_nodes_carry_provenance_and_a_gap_returns_none(live):
    from llama_index.core.schema import NodeWithScore

    bob = LlamaIndexRetriever(live.url, live.keys["bob"])
    nodes = bob.retrieve(BUDGET)
    assert nodes and all(isinstance(n, NodeWithScore) for n in nodes)
    assert nodes[0].node.metadata["doc_id"] == FINANCE_DOC and nodes[0].node.node_id == nodes[0].node.metadata["chunk_id"]
    assert all(set(n.node.metadata) == METADATA and n.score == n.node.metadata["score"] for n in nodes)
    gaps = []
    alice = LlamaIndexRetriever(live.url, live.keys["alice"], on_gap=gaps.append)
    assert alice.retrieve(BUDGET) == [] and gaps and gaps[0].missing is not None
    assert asyncio.run(bob.aretrieve(BUDGET))[0].node.metadata["doc_id"] == FINANCE_DOC
    assert asyncio.run(alice.aretrieve(BUDGET)) == []


def test_two_principals_see_different_documents_and_never_each_others(live):
    questions = _questions()
    seen = {}
    for who in ("alice", "bob"):
        lc = LangChainRetriever(base_url=live.url, api_key=live.keys[who])
        li = LlamaIndexRetriever(live.url, live.keys[who])
        ids = set()
        for q in questions:
            lc_ids = [d.metadata["doc_id"] for d in lc.invoke(q)]
            li_ids = [n.node.metadata["doc_id"] for n in li.retrieve(q)]
            assert lc_ids == li_ids, q  # both adapters read the same answer
            ids.update(lc_ids)
        seen[who] = ids
    assert seen["alice"] != seen["bob"]
    for who, other in (("alice", "bob"), ("bob", "alice")):
        only_other = {d for d in seen[other] if not _readable(live, who, d)}
        assert not (seen[who] & only_other), (who, seen[who] & only_other)
        assert all(_readable(live, who, d) for d in seen[who])
    assert any(not _readable(live, "alice", d) for d in seen["bob"])  # bob really sees something alice cannot
