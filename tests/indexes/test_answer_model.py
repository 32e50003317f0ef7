"""The bundled answer model: its checksum guards the weights, and a passage that answers a
question outscores one on the same topic that does not. The pairs below were written for
this test (not taken from any dataset); the fictional ones cannot be known from pretraining."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from indexes.answer_model import MODEL_FILE, SUMS_FILE, AnswerModel, default_path, read_checksums
from retrieval.errors import SnapshotError

# (question, a passage that answers it, a passage on the same topic that does not)
PAIRS = [
    ("How long is the warranty on the X200 kettle?",
     "The X200 kettle comes with a two-year warranty that covers the heating element and the lid hinge.",
     "The X200 kettle holds 1.7 litres of water and switches itself off when the water boils."),
    ("What year was the Marlow town library founded?",
     "The Marlow town library was founded in 1887 by a group of local teachers who donated their own books.",
     "The Marlow town library has a reading room on the second floor and offers free internet access to members."),
    ("Who designed the new railway station in Ostrava Nord?",
     ("The new railway station in Ostrava Nord was designed by the architect Maria Lindqvist, whose firm won the "
      "competition in 2019."),
     "The new railway station in Ostrava Nord has twelve platforms and serves about forty thousand passengers a day."),
    ("How often does the nightly backup job run?",
     "The backup job runs once a day at 2 a.m., after the database maintenance window has closed.",
     "The backup job writes its archives to the storage cluster in the second data centre and keeps them for a year."),
    ("Which river flows through the city of Daventor?",
     "The river Alm flows through Daventor, dividing the old town from the harbour district.",
     "Daventor is known for its cheese market, which has been held every Thursday since the Middle Ages."),
    ("What does error code E4012 mean in the payment service?",
     "Error code E4012 means that the payment gateway rejected the card because it has expired.",
     "Error codes in the payment service are grouped by their first digit, and the full list is in the operator manual."),
]


@pytest.fixture(scope="module")
def model() -> AnswerModel:
    return AnswerModel.load(threads=1)


def test_the_bundled_model_loads_with_its_recorded_checksum(model):
    assert model.checksum == read_checksums(default_path())[MODEL_FILE]
    assert len(model.checksum) == 64 and model.model_id


@pytest.mark.parametrize("question,answer,other", PAIRS, ids=[q for q, _, _ in PAIRS])
def test_an_answering_passage_outscores_an_on_topic_one_that_does_not_answer(model, question, answer, other):
    yes, no = model.score(question, [answer, other])
    assert yes > no


def test_scores_are_probabilities_in_input_order_and_deterministic(model):
    question, answer, other = PAIRS[0]
    passages = [other, answer, "", "kettle " * 400]  # an empty and an over-long passage too
    first = model.score(question, passages, batch_size=3)
    assert first.shape == (4,) and first.dtype == np.float32
    assert np.all((first >= 0) & (first <= 1))
    assert np.array_equal(first, model.score(question, passages, batch_size=3))


def test_one_pair_per_batch_scores_each_pair_alone(model):
    """int8 activation scales are computed per batch, so in a batch a score moves a little
    with its companions; at batch_size=1 it depends on the pair only."""
    question, answer, other = PAIRS[0]
    alone = model.score(question, [answer, other], batch_size=1)
    assert np.array_equal(alone[::-1], model.score(question, [other, answer], batch_size=1))
    assert np.array_equal(alone[:1], model.score(question, [answer], batch_size=1))
    assert np.allclose(alone, model.score(question, [answer, other, "kettle " * 400], batch_size=16)[:2], atol=0.05)


def test_an_overlong_question_is_clipped_not_rejected(model):
    scores = model.score("which kettle " * 200, [PAIRS[0][1]])
    assert scores.shape == (1,) and 0 <= scores[0] <= 1


def test_no_passages_give_no_scores(model):
    assert model.score("anything", []).shape == (0,)


def test_a_corrupted_model_file_is_refused(tmp_path):
    copy = tmp_path / "model"
    shutil.copytree(default_path(), copy)
    data = bytearray((copy / MODEL_FILE).read_bytes())
    data[len(data) // 2] ^= 0x01
    (copy / MODEL_FILE).write_bytes(bytes(data))
    with pytest.raises(SnapshotError, match="sha256"):
        AnswerModel.load(copy)


@pytest.mark.parametrize("name", ["tokenizer.json", "answer_config.json"])
def test_a_swapped_tokenizer_or_encoding_setting_is_refused(tmp_path, name):
    copy = tmp_path / "model"
    shutil.copytree(default_path(), copy)
    text = (copy / name).read_text(encoding="utf-8")
    (copy / name).write_text(text.replace('"max_length": 256', '"max_length": 128') if name == "answer_config.json"
                             else text.replace('"[UNK]"', '"[unk]"', 1), encoding="utf-8")
    assert (copy / name).read_text(encoding="utf-8") != text
    with pytest.raises(SnapshotError, match=f"{name} has sha256"):
        AnswerModel.load(copy)


def test_a_model_folder_without_checksums_is_refused(tmp_path):
    copy = tmp_path / "model"
    shutil.copytree(default_path(), copy)
    (copy / SUMS_FILE).unlink()
    with pytest.raises(SnapshotError, match=SUMS_FILE):
        AnswerModel.load(copy)
