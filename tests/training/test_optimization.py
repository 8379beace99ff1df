"""BERT's learning-rate schedule and AdamW/LAMB weight-decay exclusions."""

import keras
import numpy as np
import pytest

from bert_tf import testing
from bert_tf.modeling.encoder import build_encoder
from bert_tf.modeling.models import BertPretrainer
from bert_tf.training.optimization import WarmupLinearDecay, create_optimizer

pytestmark = pytest.mark.fast  # `make check` and CI's Bazel pass (tests/BUILD's fast)


def test_schedule_warmup_then_linear_decay():
    schedule = WarmupLinearDecay(1e-4, num_train_steps=100, num_warmup_steps=10)
    # google-research: warmup lr * step / warmup while step < warmup, then lr * (1 - step / total).
    expected = {0: 0.0, 5: 5e-5, 9: 9e-5, 10: 9e-5, 55: 4.5e-5, 99: 1e-6, 100: 0.0, 150: 0.0}
    for step, value in expected.items():
        assert float(schedule(step)) == pytest.approx(value, rel=1e-5, abs=1e-12), step
    no_warmup = WarmupLinearDecay(2e-5, num_train_steps=4)
    assert [float(no_warmup(s)) for s in range(5)] == pytest.approx([2e-5, 1.5e-5, 1e-5, 5e-6, 0])


def test_schedule_config_round_trip_and_validation():
    schedule = WarmupLinearDecay(3e-5, num_train_steps=50, num_warmup_steps=5)
    clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert clone.get_config() == schedule.get_config()
    # Negative only: warmup past num_train_steps is google-research's (tests/test_google_flags.py).
    with pytest.raises(ValueError, match="num_warmup_steps"):
        WarmupLinearDecay(1e-4, num_train_steps=10, num_warmup_steps=-1)
    with pytest.raises(ValueError, match="num_train_steps"):
        WarmupLinearDecay(1e-4, num_train_steps=0)
    with pytest.raises(ValueError, match="optimizer_type"):
        create_optimizer(1e-4, 10, 1, optimizer_type="sgd")


@pytest.mark.parametrize("optimizer_type", ["adamw", "lamb"])
def test_weight_decay_skips_layer_norm_and_biases(optimizer_type):
    config = testing.micro_config(40)
    model = BertPretrainer(build_encoder(config))
    optimizer = create_optimizer(
        0.1, num_train_steps=10, num_warmup_steps=0, optimizer_type=optimizer_type
    )
    assert (optimizer.beta_1, optimizer.beta_2, optimizer.epsilon) == (0.9, 0.999, 1e-6)
    assert (optimizer.weight_decay, optimizer.global_clipnorm) == (0.01, 1.0)
    variables = model.trainable_variables
    before = [v.numpy().copy() for v in variables]
    # Zero gradients: the Adam/LAMB update is 0, so only weight decay moves a variable.
    optimizer.apply([np.zeros(v.shape, "float32") for v in variables], variables)
    decayed, kept = set(), set()
    for variable, old in zip(variables, before, strict=True):
        if np.array_equal(variable.numpy(), old):
            kept.add(variable.path)
        else:
            np.testing.assert_allclose(variable.numpy(), old * (1 - 0.1 * 0.01), rtol=1e-6)
            decayed.add(variable.path)
    names = lambda paths: {p.rsplit("/", 1)[-1] for p in paths}  # noqa: E731
    assert names(decayed) == {"kernel", "embeddings"}
    assert names(kept) == {"gamma", "beta", "bias", "output_bias"}
    assert any("attention" in p for p in decayed) and any("layer_norm" in p for p in kept)


@pytest.mark.parametrize("optimizer_type", ["adamw", "lamb"])
def test_learning_rate_multiplier_scales_only_its_variables(optimizer_type):
    """Same gradients, same schedule: a variable with factor 10 moves 10x as far on the first
    step (Adam's first update is lr * sign(g), LAMB's is trust-ratio scaled by the same lr)."""
    import tensorflow as tf

    moves = {}
    for factor in (1.0, 10.0):
        a, b = tf.Variable([1.0, -2.0], name="a"), tf.Variable([0.5, 3.0], name="b")
        optimizer = create_optimizer(
            1e-3, 10, 0, optimizer_type, weight_decay=0.0, global_clipnorm=None
        )
        optimizer.build([a, b])
        optimizer.set_learning_rate_multiplier([b], factor)
        optimizer.apply([tf.constant([0.3, -0.1]), tf.constant([0.2, 0.4])], [a, b])
        moves[factor] = (a.numpy() - [1.0, -2.0], b.numpy() - [0.5, 3.0])
    np.testing.assert_allclose(moves[10.0][0], moves[1.0][0], rtol=1e-6)
    np.testing.assert_allclose(moves[10.0][1], 10 * moves[1.0][1], rtol=1e-4)  # float32 round-off
    assert np.all(moves[1.0][1] != 0)
