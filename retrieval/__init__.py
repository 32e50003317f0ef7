"""Query-time core of Quarry: types, retrievers, fusion, routing, grading and the loop.

Nothing here reads the environment or speaks HTTP; index objects arrive through constructors.
"""
