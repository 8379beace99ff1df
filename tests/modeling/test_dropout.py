"""BertDropout: inverted dropout at the requested rate, from 16-bit draws, as keras.layers.Dropout."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf import testing
from bert_tf.modeling.encoder import build_encoder
from bert_tf.modeling.layers import BertDropout

TINY = testing.tiny_config(vocab_size=100, max_position_embeddings=16)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_drops_the_rate_and_scales_the_rest(dtype):
    rate = 0.1
    x = tf.ones([500, 1001], dtype)  # odd element count: the last draw's upper half is unused
    y = BertDropout(rate, seed=3, dtype=dtype)(x, training=True).numpy().astype(np.float64)
    dropped = y == 0
    # 500,500 draws: the fraction's standard deviation is 4e-4. Keras' bfloat16 uniform (7
    # mantissa bits) drops 10.13%, outside this bound.
    assert abs(dropped.mean() - rate) < 2e-3
    # Both 16-bit halves of each 32-bit draw are used, independently.
    flat = dropped.reshape(-1)
    for half in (flat[0::2], flat[1::2]):
        assert abs(half.mean() - rate) < 3e-3
    assert abs(np.mean(flat[0::2] & flat[1::2]) - rate**2) < 1e-3
    scale = tf.cast(1.0 / (1.0 - rate), dtype).numpy().astype(np.float64)
    np.testing.assert_array_equal(np.unique(y), [0.0, scale])


def test_inference_and_zero_rate_are_the_identity():
    x = tf.random.normal([4, 7, 8])
    np.testing.assert_array_equal(BertDropout(0.5)(x, training=False), x)
    np.testing.assert_array_equal(BertDropout(0.0)(x, training=True), x)


def test_gradient_is_the_mask_and_calls_draw_new_masks():
    x = tf.random.normal([8, 16, 32]) + 5.0  # no zeros of its own
    layer = BertDropout(0.3, seed=1)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True)
    grad = tape.gradient(y, x)
    np.testing.assert_allclose(grad, y / x, rtol=1e-6)
    assert not np.array_equal(layer(x, training=True) == 0, y.numpy() == 0)
    # Same seed, same masks (a resumed run restores the generator's state the same way).
    again = BertDropout(0.3, seed=1)(x, training=True)
    np.testing.assert_array_equal(again, y)


def test_same_state_and_config_as_keras_dropout():
    ours, theirs = BertDropout(0.1, seed=7), keras.layers.Dropout(0.1, seed=7)
    assert [v.shape for v in ours.variables] == [v.shape for v in theirs.variables]
    assert [v.name for v in ours.variables] == [v.name for v in theirs.variables]
    assert ours.get_config() == {**theirs.get_config(), "name": ours.name}
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(ours))
    assert isinstance(restored, BertDropout) and restored.rate == 0.1


def test_every_dropout_of_the_encoder_is_bert_dropout():
    encoder = build_encoder(TINY)
    dropouts = [
        layer
        for layer in encoder._flatten_layers(include_self=False, recursive=True)
        if isinstance(layer, keras.layers.Dropout)
    ]
    # Embeddings, then per layer the attention probabilities, attention output and FFN output.
    assert len(dropouts) == 1 + 3 * TINY.num_hidden_layers
    assert all(type(layer) is BertDropout for layer in dropouts)
