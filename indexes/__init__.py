"""Build and load index snapshots: corpus loading, chunking, the DuckDB catalog, BM25, FAISS."""
