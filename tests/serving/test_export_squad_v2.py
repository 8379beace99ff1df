"""SQuAD v2.0 exports: `serving_default` applies run_squad's null rule ("" = no answer)."""

import json
import os
import stat
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf import testing, training
from bert_tf.modeling.encoder import build_encoder
from bert_tf.modeling.models import BertSpanLabeler
from bert_tf.tasks import squad
from bert_tf.text.tokenization import BertPreprocessor
from serving import export_lib
from serving.signatures import read_signature_defs

SQUAD_V2 = Path(__file__).parents[1] / "testdata" / "squad_v2.0.json"
# 64-token windows 24 tokens apart: every context (80-120 tokens) spans several windows, so
# the null score is a minimum over windows and spans compete across them.
WINDOWS = {"doc_stride": 24, "max_query_length": 16, "max_answer_length": 30}
SEQ_LENGTH = 64


@pytest.fixture(scope="module")
def span_model(minilm_dir):
    """A tiny random `BertSpanLabeler` on MiniLM's vocab and its preprocessor."""
    preprocessor = BertPreprocessor(minilm_dir / "vocab.txt", seq_length=SEQ_LENGTH)
    config = testing.tiny_config(
        vocab_size=preprocessor.tokenizer.vocabulary_size, max_position_embeddings=SEQ_LENGTH
    )
    keras.utils.set_random_seed(3)
    return BertSpanLabeler(build_encoder(config)), preprocessor


@pytest.fixture(scope="module")
def run_squad_decode(span_model):
    """`decode(threshold)`: run_squad's (predictions, nbest, null_odds) for the v2.0 test
    questions (its predictions.json, nbest_predictions.json and null_odds.json)."""
    model, preprocessor = span_model
    examples = squad.read_squad_examples(SQUAD_V2, training=False, version_2_with_negative=True)
    features = squad.convert_examples_to_features(
        examples,
        preprocessor.tokenizer,
        SEQ_LENGTH,
        WINDOWS["doc_stride"],
        WINDOWS["max_query_length"],
        training=False,
    )
    dataset = squad.features_to_dataset(features, SEQ_LENGTH, batch_size=64, training=False)
    logits = training.predict(model, dataset)

    def decode(threshold):
        return squad.compute_predictions(
            examples,
            features,
            logits["start_logits"],
            logits["end_logits"],
            lower_case=True,
            n_best_size=20,  # as the export's default
            max_answer_length=WINDOWS["max_answer_length"],
            version_2_with_negative=True,
            null_score_diff_threshold=threshold,
        )

    return decode


def _questions() -> tuple[list[str], list[str], list[str]]:
    ids, questions, contexts = [], [], []
    for article in squad.read_squad_json(SQUAD_V2):
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                ids.append(qa["id"])
                questions.append(qa["question"])
                contexts.append(paragraph["context"])
    return ids, questions, contexts


def _assert_same_answers(out, ids: list[str], predictions: dict, nbest: dict) -> None:
    """The export answers run_squad's text (so "" exactly where it does), with its best span's
    start + end logit as the score."""
    answers = [a.decode() for a in out["answer_text"].numpy()]
    assert answers == [predictions[i] for i in ids]
    for i, qas_id in enumerate(ids):
        expected = predictions[qas_id]
        if expected:
            best = next(c for c in nbest[qas_id] if c["text"] == expected)
            assert float(out["score"][i]) == pytest.approx(best["start_logit"] + best["end_logit"])


def test_v2_export_answers_like_run_squad_predictions(span_model, run_squad_decode, tmp_path):
    model, preprocessor = span_model
    _, _, null_odds = run_squad_decode(0.0)
    # Half-way between the two middle odds: about half the questions get "" and no odds lie
    # near the threshold, where float rounding could decide.
    odds = sorted(null_odds.values())
    threshold = (odds[len(odds) // 2 - 1] + odds[len(odds) // 2]) / 2
    predictions, nbest, null_odds = run_squad_decode(threshold)
    assert 0 < list(predictions.values()).count("") < len(predictions)

    path = export_lib.export_squad(
        model,
        preprocessor,
        tmp_path / "squad_v2",
        version_2_with_negative=True,
        null_score_diff_threshold=threshold,
        **WINDOWS,
    )
    options = json.loads((Path(path) / export_lib.SQUAD_OPTIONS_ASSET).read_text())
    assert options["version_2_with_negative"] is True
    assert options["null_score_diff_threshold"] == threshold
    serve = tf.saved_model.load(path).signatures["serving_default"]
    ids, questions, contexts = _questions()
    out = serve(question=tf.constant(questions), context=tf.constant(contexts))
    _assert_same_answers(out, ids, predictions, nbest)
    np.testing.assert_allclose(out["null_score_diff"], [null_odds[i] for i in ids], atol=1e-4)
    for i, answer in enumerate(a.decode() for a in out["answer_text"].numpy()):
        start, end = int(out["start_char"][i]), int(out["end_char"][i])
        assert (start, end) == ((0, 0) if answer == "" else (start, start + len(answer)))
        assert contexts[i][start:end] == answer


def test_v1_export_keeps_its_outputs_and_never_abstains(span_model, run_squad_decode, tmp_path):
    model, preprocessor = span_model
    v1 = export_lib.export_squad(model, preprocessor, tmp_path / "v1", **WINDOWS)
    outputs = read_signature_defs(v1)["serving_default"].outputs
    assert {name: tensor.dtype for name, tensor in outputs.items()} == {
        "answer_text": tf.string.as_datatype_enum,
        "start_char": tf.int32.as_datatype_enum,
        "end_char": tf.int32.as_datatype_enum,
        "score": tf.float32.as_datatype_enum,
    }
    options = json.loads((Path(v1) / export_lib.SQUAD_OPTIONS_ASSET).read_text())
    assert (options["version_2_with_negative"], options["null_score_diff_threshold"]) == (False, 0)
    # A threshold above every null odds: v2.0 answers like v1.1 (its best span everywhere).
    predictions, nbest, _ = run_squad_decode(1e9)
    assert all(predictions.values())
    ids, questions, contexts = _questions()
    out = tf.saved_model.load(v1).signatures["serving_default"](
        question=tf.constant(questions), context=tf.constant(contexts)
    )
    _assert_same_answers(out, ids, predictions, nbest)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"null_score_diff_threshold": 1.0}, "null_score_diff_threshold=1.0 needs version_2"),
        (
            {"version_2_with_negative": True, "null_score_diff_threshold": float("nan")},
            "null_score_diff_threshold must be a finite number",
        ),
    ],
)
def test_bad_null_options_are_clear_errors(span_model, tmp_path, kwargs, message):
    model, preprocessor = span_model
    with pytest.raises(ValueError, match=message):
        export_lib.export_squad(model, preprocessor, tmp_path / "squad", **WINDOWS, **kwargs)
    assert not (tmp_path / "squad").exists()


@pytest.mark.parametrize("mask", [0o022, 0o027])
def test_export_permissions_follow_the_umask(span_model, tmp_path, mask):
    # Regression: version folders were drwx------ (mkdtemp's mode), unreadable to a TF Serving
    # container running as another user (Kubernetes runAsNonRoot).
    model, preprocessor = span_model
    old = os.umask(mask)
    try:
        version = Path(export_lib.export_squad(model, preprocessor, tmp_path / "squad", **WINDOWS))
    finally:
        os.umask(old)
    modes = {
        p.relative_to(version): stat.S_IMODE(p.stat().st_mode)
        for p in [version, *version.rglob("*")]
    }
    assert {m for p, m in modes.items() if (version / p).is_dir()} == {0o777 & ~mask}, modes
    assert {m for p, m in modes.items() if (version / p).is_file()} == {0o666 & ~mask}, modes


def test_a_short_context_answers_as_when_batched_with_a_long_one(span_model, tmp_path):
    """Alone, a short context's window is far shorter than seq_length and the model runs on it
    only (`trim_to_longest`); beside a long context every window is full length. The answers
    and scores must not change."""
    model, preprocessor = span_model
    path = export_lib.export_squad(
        model, preprocessor, tmp_path / "squad", version_2_with_negative=True, **WINDOWS
    )
    serve = tf.saved_model.load(path).signatures["serving_default"]
    _, questions, contexts = _questions()
    longest = max(range(len(contexts)), key=lambda i: len(contexts[i]))
    question, context = "Who wrote it?", "The book was written by Jane Austen in 1813."
    alone = serve(question=tf.constant([question]), context=tf.constant([context]))
    batched = serve(
        question=tf.constant([question, questions[longest]]),
        context=tf.constant([context, contexts[longest]]),
    )
    for name in ("answer_text", "start_char", "end_char"):
        assert alone[name].numpy()[0] == batched[name].numpy()[0], name
    for name in ("score", "null_score_diff"):
        np.testing.assert_allclose(alone[name].numpy()[0], batched[name].numpy()[0], atol=1e-5)
