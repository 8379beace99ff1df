"""Task heads and models: maths of each head, losses/metrics, and get_config / .keras /
tf.saved_model round trips of every task model."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from scipy.special import erf, log_softmax

from bert_tf import testing
from bert_tf.modeling import heads, models
from bert_tf.modeling.encoder import build_encoder

pytestmark = pytest.mark.fast  # `make check` and CI's Bazel pass (tests/BUILD's fast)

# One layer keeps the six export round trips fast.
TINY = testing.tiny_config(vocab_size=100, num_hidden_layers=1, max_position_embeddings=16)
IDS = np.array([[2, 15, 27, 3, 0, 0], [2, 9, 33, 41, 8, 3]], dtype="int32")
FEATURES = {
    "input_word_ids": IDS,
    "input_mask": (IDS > 0).astype("int32"),
    "input_type_ids": np.zeros_like(IDS),
}
POSITIONS = np.array([[1, 2, 0], [4, 1, 3]], dtype="int32")


def _layer_norm(x, gamma, beta):
    mean = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-12) * gamma + beta


def test_pretrainer_matches_google_formulas():
    model = models.BertPretrainer(build_encoder(TINY))
    out = model({**FEATURES, "masked_lm_positions": POSITIONS})
    assert out["mlm_logits"].shape == (2, 3, 100) and out["nsp_logits"].shape == (2, 2)
    encoded = model.encoder(FEATURES)
    sequence = np.asarray(encoded["sequence_output"])
    gathered = np.take_along_axis(sequence, POSITIONS[..., None], axis=1)
    head = model.masked_lm_head
    x = gathered @ head._intermediate_dense.kernel.numpy() + head._intermediate_dense.bias.numpy()
    x = 0.5 * x * (1 + erf(x / np.sqrt(2)))  # exact-erf GELU
    norm = head._intermediate_layer_norm
    x = _layer_norm(x, norm.gamma.numpy(), norm.beta.numpy())
    # Output projection tied to the word embeddings.
    embeddings = model.encoder.word_embeddings.embeddings.numpy()
    expected = x @ embeddings.T + head._bias.numpy()
    np.testing.assert_allclose(out["mlm_logits"], expected, atol=1e-4)
    nsp = model.next_sentence_head
    np.testing.assert_allclose(
        out["nsp_logits"],
        np.asarray(encoded["pooled_output"]) @ nsp.kernel.numpy() + nsp.bias.numpy(),
        atol=1e-5,
    )


def test_masked_lm_loss_and_accuracy_match_numpy():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 3, 7)).astype("float32")
    labels = np.array([[1, 2, 3], [4, logits[1, 1].argmax(), 0]])
    weights = np.array([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]], dtype="float32")
    nll = -np.take_along_axis(log_softmax(logits, -1), labels[..., None], -1)[..., 0]
    expected_loss = (nll * weights).sum() / (weights.sum() + 1e-5)
    np.testing.assert_allclose(heads.masked_lm_loss(labels, logits, weights), expected_loss, 1e-5)
    correct = logits.argmax(-1) == labels
    np.testing.assert_allclose(
        heads.masked_lm_accuracy(labels, logits, weights),
        (correct * weights).sum() / weights.sum(),
    )
    assert float(heads.masked_lm_accuracy(labels, logits, 0 * weights)) == 0.0


def test_next_sentence_loss_and_accuracy_match_numpy():
    logits = np.array([[2.0, -1.0], [0.5, 1.5], [0.0, 3.0]], dtype="float32")
    labels = np.array([[0], [0], [1]])  # google-research feature shape [B, 1]
    expected = -log_softmax(logits, -1)[np.arange(3), labels[:, 0]].mean()
    np.testing.assert_allclose(heads.next_sentence_loss(labels, logits), expected, rtol=1e-5)
    np.testing.assert_allclose(heads.next_sentence_accuracy(labels, logits), 2 / 3)


def test_span_head_masks_padding():
    model = models.BertSpanLabeler(build_encoder(TINY))
    out = model(FEATURES)
    assert out["start_logits"].shape == out["end_logits"].shape == (2, 6)
    padding = FEATURES["input_mask"] == 0
    for key in ("start_logits", "end_logits"):
        logits = np.asarray(out[key])
        assert (logits[padding] < -9000).all() and (np.abs(logits[~padding]) < 100).all()
        assert (logits.argmax(-1) < FEATURES["input_mask"].sum(-1)).all()


def test_multiple_choice_scores_each_choice_independently():
    model = models.BertMultipleChoice(build_encoder(TINY), dropout=0.0)
    choices = {k: np.stack([v, v[::-1]], axis=1) for k, v in FEATURES.items()}  # [B, C=2, S]
    logits = np.asarray(model(choices))
    assert logits.shape == (2, 2)
    score = model.head.score.dense
    for choice in range(2):
        pooled = model.encoder({k: v[:, choice] for k, v in choices.items()})["pooled_output"]
        expected = np.asarray(pooled) @ score.kernel.numpy() + score.bias.numpy()
        np.testing.assert_allclose(logits[:, choice], expected[:, 0], atol=1e-5)


MC_FEATURES = {k: np.stack([v, v, v], axis=1) for k, v in FEATURES.items()}
PRETRAINING_FEATURES = {**FEATURES, "masked_lm_positions": POSITIONS}
# name -> (builder, inputs); builders so each test builds only the models it uses.
TASK_MODELS = {
    "pretrainer": (lambda: models.BertPretrainer(build_encoder(TINY)), PRETRAINING_FEATURES),
    "classifier": (lambda: models.BertClassifier(build_encoder(TINY), 3), FEATURES),
    "regression": (lambda: models.BertClassifier(build_encoder(TINY), 1), FEATURES),
    "token_classifier": (lambda: models.BertTokenClassifier(build_encoder(TINY), 5), FEATURES),
    "span_labeler": (lambda: models.BertSpanLabeler(build_encoder(TINY)), FEATURES),
    "multiple_choice": (lambda: models.BertMultipleChoice(build_encoder(TINY)), MC_FEATURES),
}


EXPECTED_SHAPES = {
    "pretrainer": {"mlm_logits": (2, 3, 100), "nsp_logits": (2, 2)},
    "classifier": (2, 3),
    "regression": (2, 1),
    "token_classifier": (2, 6, 5),
    "span_labeler": {"start_logits": (2, 6), "end_logits": (2, 6)},
    "multiple_choice": (2, 3),
}


def _assert_close(expected, actual):
    keras.tree.map_structure(
        lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5),
        expected,
        actual,
    )


@pytest.mark.parametrize("name", sorted(EXPECTED_SHAPES))
def test_task_model_round_trips(name, tmp_path):
    build, inputs = TASK_MODELS[name]
    model = build()
    expected = model(inputs)
    assert keras.tree.map_structure(lambda t: tuple(t.shape), expected) == EXPECTED_SHAPES[name]
    # get_config -> from_config rebuilds the same architecture.
    clone = type(model).from_config(model.get_config())
    assert clone.get_config() == model.get_config()
    assert len(clone.weights) == len(model.weights)
    # .keras: same outputs, same class; the MLM projection stays tied.
    path = tmp_path / f"{name}.keras"
    model.save(path)
    restored = keras.saving.load_model(path)
    assert type(restored) is type(model)
    _assert_close(expected, restored(inputs))
    if name == "pretrainer":
        assert restored.masked_lm_head.token_embedding is restored.encoder.word_embeddings
    # tf.saved_model (Keras export): same outputs from the reloaded graph.
    model.export(str(tmp_path / "saved"), format="tf_saved_model", verbose=False)
    reloaded = tf.saved_model.load(str(tmp_path / "saved"))  # keep a reference while calling
    _assert_close(expected, reloaded.serve(inputs))


def test_logits_are_float32_under_mixed_precision():
    keras.mixed_precision.set_dtype_policy("mixed_float16")
    try:
        built = [(build(), inputs) for build, inputs in TASK_MODELS.values()]
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    for model, inputs in built:
        for logits in keras.tree.flatten(model(inputs)):
            assert logits.dtype == "float32"
