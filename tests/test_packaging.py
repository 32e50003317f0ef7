"""The wheel built from pyproject.toml: serving code and the shipped model, nothing else."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile

import pytest

from tests.conftest import PATIENCE_S, ROOT

pytestmark = pytest.mark.slow  # builds the wheel (a few seconds, 18 MB with the answer model)

LEFT_OUT = ("training/", "benchmarks/", "tests/")
# What the build makes or never reads: copying it would be slow, and a stale build/ would leak
# into the wheel (setuptools packs whatever build/lib holds).
NOT_COPIED = shutil.ignore_patterns(".git", ".venv", "build", "var", "*.egg-info", "__pycache__", ".*_cache",
                                    ".hypothesis")


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Build the wheel offline from a copy of the tree (so the build leaves nothing in the
    checkout) and return the paths inside it."""
    tmp = tmp_path_factory.mktemp("wheel")
    source, out = tmp / "source", tmp / "dist"
    shutil.copytree(ROOT, source, ignore=NOT_COPIED)
    assert all((source / folder).is_dir() for folder in LEFT_OUT), "the copy lacks a folder the wheel must leave out"
    subprocess.run([sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation", "--no-index",
                    "-q", "-w", str(out)], cwd=source, check=True, capture_output=True, timeout=PATIENCE_S)
    (wheel,) = out.glob("quarry-*.whl")
    with zipfile.ZipFile(wheel) as z:
        return z.namelist()


def test_wheel_leaves_out_training_benchmarks_and_tests(wheel_names: list[str]) -> None:
    shipped = [name for name in wheel_names if name.startswith(LEFT_OUT)]
    assert shipped == []


def test_wheel_holds_only_the_serving_packages(wheel_names: list[str]) -> None:
    tops = {name.split("/")[0] for name in wheel_names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"retrieval", "indexes", "routes", "auth"}


def test_wheel_holds_the_answer_model_and_its_loader(wheel_names: list[str]) -> None:
    assert "indexes/answer_model.py" in wheel_names
    assert {"indexes/extract/pdf_text.py", "indexes/extract/docx_text.py", "indexes/extract/html_text.py"} <= set(wheel_names)
    assert "indexes/models/answer-minilm-l6/model.int8.onnx" in wheel_names
    assert "indexes/models/answer-minilm-l6/SHA256SUMS" in wheel_names
