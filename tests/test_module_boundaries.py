"""Modules meet through public names: no module of the service imports a private (`_name`) name
of another. A private name shared across modules is a second, unwritten interface (the sharded
build once imported five of the single-node builder's), so what two modules share is public
and documented where it is defined."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("auth", "indexes", "retrieval", "routes", "client/quarry_client")
OWN = {"auth", "indexes", "retrieval", "routes", "quarry_client"}  # a library's private names are another matter


def private_imports() -> list[str]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and \
                        node.module.split(".")[0] in OWN:
                    for alias in node.names:
                        if alias.name.startswith("_") and not alias.name.startswith("__"):
                            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.module}.{alias.name}")
    return found


def test_no_module_imports_another_modules_private_name():
    assert private_imports() == []
