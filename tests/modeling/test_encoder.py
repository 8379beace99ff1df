"""BertEncoder: structure, masking, real-weights parity (all-MiniLM-L6-v2), sizes, mixed
precision, and get_config / .keras / tf.saved_model round trips."""

import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf
from scipy.special import erf

from bert_tf import checkpoints, testing
from bert_tf.modeling.configs import BertConfig
from bert_tf.modeling.encoder import BertEncoder, build_encoder, flat_outputs
from bert_tf.modeling.layers import (
    BertAttention,
    FlatEinsumDense,
    _projection_dims,
    get_activation,
)

pytestmark = pytest.mark.fast  # `make check` and CI's Bazel pass (tests/BUILD's fast)

TINY = testing.tiny_config(vocab_size=100, max_position_embeddings=16)
IDS = np.array([[2, 15, 27, 3, 0, 0], [2, 9, 33, 41, 8, 3]], dtype="int32")
FEATURES = {
    "input_word_ids": IDS,
    "input_mask": (IDS > 0).astype("int32"),
    "input_type_ids": np.array([[0, 0, 1, 1, 0, 0], [0, 0, 0, 1, 1, 1]], dtype="int32"),
}


def _assert_outputs_close(expected, actual, atol=1e-6):
    keras.tree.map_structure(
        lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=atol),
        expected,
        actual,
    )


def test_outputs_structure_and_shapes():
    encoder = build_encoder(TINY)
    out = encoder(FEATURES)
    assert set(out) == {"sequence_output", "pooled_output", "encoder_outputs"}
    assert out["sequence_output"].shape == (2, 6, 32)
    assert out["pooled_output"].shape == (2, 32)
    assert len(out["encoder_outputs"]) == 2
    np.testing.assert_array_equal(out["encoder_outputs"][-1], out["sequence_output"])
    # pooled = tanh(dense([CLS])).
    dense = encoder.pooler_dense
    expected = np.tanh(
        np.asarray(out["sequence_output"])[:, 0] @ dense.kernel.numpy() + dense.bias.numpy()
    )
    np.testing.assert_allclose(out["pooled_output"], expected, atol=1e-5)


def test_padding_does_not_change_real_positions():
    encoder = build_encoder(TINY)
    short = {k: v[:1, :4] for k, v in FEATURES.items()}  # first row without its padding
    long = {k: v[:1] for k, v in FEATURES.items()}  # same row, 2 padding positions
    np.testing.assert_allclose(
        encoder(short)["sequence_output"], encoder(long)["sequence_output"][:, :4], atol=1e-5
    )
    # and the mask matters: attending to the padding changes the outputs.
    unmasked = {**long, "input_mask": np.ones_like(long["input_mask"])}
    assert not np.allclose(
        encoder(unmasked)["sequence_output"][:, :4], encoder(short)["sequence_output"], atol=1e-3
    )


def test_minilm_parity(minilm_dir, minilm_reference):
    """Real weights: HF all-MiniLM-L6-v2 reference values for "A man is eating food."."""
    reference = minilm_reference["outputs"]["A man is eating food."]
    encoder = build_encoder(BertConfig.from_hf_json_file(minilm_dir / "config.json"))
    checkpoints.load_pretrained(encoder, minilm_dir)
    ids = np.array([reference["input_ids"]], dtype="int32")
    mask = np.ones_like(ids)
    out = encoder({"input_word_ids": ids, "input_mask": mask, "input_type_ids": 0 * ids})
    sequence = np.asarray(out["sequence_output"])
    np.testing.assert_allclose(sequence[0, 0, :5], reference["cls_sequence_output"][:5], atol=1e-4)
    pooled = (sequence * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
    pooled /= np.linalg.norm(pooled, axis=-1, keepdims=True)
    np.testing.assert_allclose(pooled[0, :5], reference["embedding"][:5], atol=1e-4)


def _parameter_count(c: BertConfig) -> int:
    h, i = c.hidden_size, c.intermediate_size
    embeddings = (c.vocab_size + c.max_position_embeddings + c.type_vocab_size) * h + 2 * h
    layer = 4 * (h * h + h) + (h * i + i) + (i * h + h) + 2 * 2 * h
    return embeddings + c.num_hidden_layers * layer + h * h + h


def test_parameter_counts_match_the_paper():
    # The formula is checked against a built model, then used for the big presets.
    assert build_encoder(TINY).count_params() == _parameter_count(TINY)
    base = _parameter_count(BertConfig.from_preset("base"))
    large = _parameter_count(BertConfig.from_preset("large"))
    assert abs(base / 110e6 - 1) < 0.03, base  # 109.5M
    assert abs(large / 340e6 - 1) < 0.03, large  # 335.1M


# Stated tolerance: with the same weights, mixed-precision outputs (unit-scale after LayerNorm)
# stay within 0.02 (float16) / 0.1 (bfloat16, 8-bit mantissa) of float32.
@pytest.mark.parametrize(("policy", "atol"), [("mixed_float16", 0.02), ("mixed_bfloat16", 0.1)])
def test_mixed_precision_close_to_float32(policy, atol):
    reference = build_encoder(TINY)
    expected = reference(FEATURES)
    keras.mixed_precision.set_dtype_policy(policy)
    encoder = build_encoder(TINY)
    encoder.set_weights(reference.get_weights())
    assert {v.dtype for v in encoder.weights} == {"float32"}
    out = encoder(FEATURES)
    assert out["sequence_output"].dtype == policy.removeprefix("mixed_")
    mask = FEATURES["input_mask"][..., None].astype(bool)
    diff = np.abs(np.asarray(out["sequence_output"], "float32") - expected["sequence_output"])
    assert diff[np.broadcast_to(mask, diff.shape)].max() < atol
    np.testing.assert_allclose(
        np.asarray(out["pooled_output"], "float32"), expected["pooled_output"], atol=atol
    )
    # Attention probabilities (the softmax) come out in float32.
    attention = BertAttention(num_heads=2, key_dim=8)
    x = np.random.rand(1, 3, 16).astype("float32")
    _, probs = attention(x, x, return_attention_scores=True)
    assert probs.dtype == "float32"
    np.testing.assert_allclose(np.sum(probs, axis=-1), 1.0, atol=1e-6)


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_one_sequence_at_inference_gives_the_batched_numbers(policy):
    """Inference on one sequence takes the transpose-free attention (eager, and via `cond` when
    the batch size is unknown); its outputs are the batched attention's, padding included."""
    keras.mixed_precision.set_dtype_policy(policy)
    encoder = build_encoder(TINY)
    # bfloat16 keeps 8 significant bits: the graph (grappler-fused) and eager orders differ by up
    # to ~4% of an output's magnitude (measured over 30 initialisations), a wrong mask by ~100%.
    rtol, atol = (1e-6, 1e-6) if policy == "float32" else (0.08, 0.02)
    batched = encoder(FEATURES, training=False)
    serve = tf.function(lambda features: encoder(features, training=False))
    for row in range(len(IDS)):
        one = {k: v[row : row + 1] for k, v in FEATURES.items()}
        for outputs in (encoder(one, training=False), serve(one)):
            for name in ("sequence_output", "pooled_output"):
                np.testing.assert_allclose(
                    np.asarray(outputs[name], "float32"),
                    np.asarray(batched[name][row : row + 1], "float32"),
                    rtol=rtol,
                    atol=atol,
                )
    graph = serve.get_concrete_function(
        {k: tf.TensorSpec([None, None], tf.int32) for k in FEATURES}
    ).graph
    assert any(op.type in ("If", "StatelessIf") for op in graph.get_operations())


def test_bert_attention_equals_keras_multi_head_attention():
    """BertAttention's explicit head layout (no einsum) gives Keras MultiHeadAttention's outputs,
    probabilities and gradients on a padded batch; other attention axes are refused."""
    x = tf.constant(np.random.default_rng(0).normal(size=(3, 5, 16)).astype("float32"))
    mask = tf.constant(np.array([[1] * 5, [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]], bool))
    mask = mask[:, None, :] & tf.ones((3, 5, 1), bool)  # [B, T, S]
    reference = keras.layers.MultiHeadAttention(num_heads=2, key_dim=8)
    reference.build(x.shape, x.shape)
    weights = [
        np.random.default_rng(i).normal(size=w.shape) for i, w in enumerate(reference.weights)
    ]
    reference.set_weights(weights)
    attention = BertAttention(num_heads=2, key_dim=8)
    attention.build(x.shape, x.shape)
    attention.set_weights(weights)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        outputs = [
            layer(x, x, attention_mask=mask, return_attention_scores=True, training=True)
            for layer in (reference, attention)
        ]
        weight = tf.constant(np.random.default_rng(9).normal(size=(3, 5, 16)), "float32")
        losses = [tf.reduce_sum(y * weight) for y, _ in outputs]
    (expected, expected_probs), (actual, actual_probs) = outputs
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(actual_probs, expected_probs, atol=1e-6)
    expected_grads, actual_grads = [
        tape.gradient(loss, [x, *layer.weights])
        for layer, loss in zip((reference, attention), losses, strict=True)
    ]
    for a, b in zip(actual_grads, expected_grads, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="attends over axis 1"):
        BertAttention(num_heads=2, key_dim=8, attention_axes=(1, 2)).build(
            (3, 4, 5, 16), (3, 4, 5, 16)
        )


@pytest.mark.parametrize(
    "equation, output_shape, bias_axes, input_shape",
    [
        ("abc,cde->abde", (None, 2, 8), "de", (3, 5, 16)),  # attention query/key/value
        ("abcd,cde->abe", (None, 16), "e", (3, 5, 2, 8)),  # attention output
        ("abc,dc->abd", (None, 4), None, (3, 5, 16)),  # not a projection: plain einsum
    ],
)
def test_flat_einsum_dense_equals_einsum_dense(equation, output_shape, bias_axes, input_shape):
    """The attention projections' 2-D MatMul gives EinsumDense's numbers, variables and
    gradients; an equation that is not a projection falls back to the einsum."""
    dense = keras.layers.EinsumDense(equation, output_shape, bias_axes=bias_axes)
    x = tf.constant(np.random.default_rng(0).normal(size=input_shape).astype("float32"))
    dense.build(input_shape)
    if bias_axes:
        dense.bias.assign(np.random.default_rng(1).normal(size=dense.bias.shape))
    flat = FlatEinsumDense(equation, output_shape, bias_axes=bias_axes)
    flat.build(input_shape)
    flat.set_weights(dense.get_weights())
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        expected, actual = dense(x), flat(x)
        weight = tf.constant(np.random.default_rng(2).normal(size=expected.shape), "float32")
        expected_loss, actual_loss = [tf.reduce_sum(y * weight) for y in (expected, actual)]
    np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-6)
    expected_grads = tape.gradient(expected_loss, [x, *dense.weights])
    actual_grads = tape.gradient(actual_loss, [x, *flat.weights])
    for a, b in zip(actual_grads, expected_grads, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    assert _projection_dims(equation) == {"abc,cde->abde": 1, "abcd,cde->abe": 2}.get(equation)
    attention = BertAttention(num_heads=2, key_dim=8)
    attention.build((3, 5, 16), (3, 5, 16))
    assert type(attention._query_dense) is FlatEinsumDense
    assert type(attention._output_dense) is FlatEinsumDense


def test_get_config_and_keras_file_round_trip(tmp_path):
    encoder = build_encoder(TINY, name="my_encoder")
    clone = BertEncoder.from_config(encoder.get_config())
    assert clone.bert_config == TINY and clone.name == "my_encoder"
    path = tmp_path / "encoder.keras"
    encoder.save(path)
    restored = keras.saving.load_model(path)
    assert isinstance(restored, BertEncoder) and restored.bert_config == TINY
    _assert_outputs_close(encoder(FEATURES), restored(FEATURES))


def test_tf_saved_model_round_trip(tmp_path):
    encoder = build_encoder(TINY)
    archive = keras.export.ExportArchive()
    archive.track(encoder)
    archive.add_endpoint(
        "serve",
        lambda inputs: flat_outputs(encoder(inputs)),
        input_signature=[{k: tf.TensorSpec([None, None], tf.int32, name=k) for k in FEATURES}],
    )
    archive.write_out(str(tmp_path / "saved"), verbose=False)
    restored = tf.saved_model.load(str(tmp_path / "saved"))
    _assert_outputs_close(flat_outputs(encoder(FEATURES)), restored.serve(FEATURES))


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def _gelu_erf(x):
    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


@pytest.mark.parametrize(
    ("name", "formula"),
    [
        ("gelu", _gelu_erf),
        ("gelu_python", _gelu_erf),
        ("gelu_new", _gelu_tanh),
        ("gelu_tanh", _gelu_tanh),
        ("gelu_approximate", _gelu_tanh),
        ("gelu_fast", _gelu_tanh),
        ("gelu_pytorch_tanh", _gelu_tanh),
    ],
)
def test_gelu_names_follow_hf(name, formula):
    # google-research's current modeling.gelu is the tanh form; the 2018 checkpoints, HF's and
    # our "gelu" the erf form. The two differ by up to ~5e-4 around |x| ~ 2.
    x = np.linspace(-6, 6, 2001, dtype="float64")
    got = np.asarray(get_activation(name)(tf.constant(x, tf.float32)))
    np.testing.assert_allclose(got, formula(x), atol=2e-6)
    other = _gelu_erf if formula is _gelu_tanh else _gelu_tanh
    assert np.abs(got - other(x)).max() > 1e-4


def test_tanh_gelu_config_changes_the_encoder_and_loads_google_names(tmp_path):
    # A model trained with google-research's current code (tanh GELU) loads exactly when its
    # config says "gelu_tanh": same weights, outputs equal to the "gelu_new" model's, and
    # different from the erf model's.
    # Large initial weights put the FFN inputs where the two GELUs differ most.
    erf_config = dataclasses.replace(TINY, initializer_range=0.5)
    erf = build_encoder(erf_config)
    tanh = build_encoder(dataclasses.replace(erf_config, hidden_act="gelu_tanh"))
    tanh.set_weights(erf.get_weights())
    prefix = checkpoints.save_google_checkpoint(tanh, tmp_path)
    loaded = build_encoder(dataclasses.replace(erf_config, hidden_act="gelu_new"))
    checkpoints.load_pretrained(loaded, prefix)
    _assert_outputs_close(tanh(FEATURES), loaded(FEATURES), atol=1e-6)
    diff = np.abs(
        np.asarray(tanh(FEATURES)["sequence_output"]) - np.asarray(erf(FEATURES)["sequence_output"])
    )
    assert diff.max() > 1e-4
