"""The shared training loop: accumulation, resume, NaN stop, checkpoint atomicity, logs."""

import json
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.checkpoint import checkpoint_management

from bert_tf import testing, training
from bert_tf.modeling.encoder import build_encoder
from bert_tf.modeling.models import BertClassifier
from bert_tf.training.optimization import create_optimizer

pytestmark = pytest.mark.fast  # `make check` and CI's Bazel pass (tests/BUILD's fast)

STEPS = 6


def _model(dropout: float) -> keras.Model:
    # A one-layer BERT regressor: embeddings (IndexedSlices gradients) and dropout (RNG state).
    config = testing.micro_config(
        20, hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout
    )
    return BertClassifier(build_encoder(config), num_classes=1)


def _dataset(batch_size: int = 8, poison_batch: int | None = None) -> tf.data.Dataset:
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 20, size=(32, 5)).astype("int32")
    y = rng.normal(size=(32,)).astype("float32")
    if poison_batch is not None:  # a NaN target in that (unshuffled) batch
        y[poison_batch * batch_size] = np.nan
    data = tf.data.Dataset.from_tensor_slices((ids, y))
    if poison_batch is None:
        data = data.shuffle(32, seed=3)
    return data.repeat().batch(batch_size, drop_remainder=True)


def _loss_fn(model, batch):
    ids, y = batch
    inputs = {"input_word_ids": ids, "input_mask": tf.ones_like(ids), "input_type_ids": ids * 0}
    error = model(inputs, training=True)[:, 0] - y
    loss = tf.reduce_mean(tf.square(error))
    return loss, {"mae": tf.reduce_mean(tf.abs(error))}


def _train(output_dir, steps, *, accumulation=1, dropout=0.0, batches=None, **kwargs):
    training.set_seed(7)
    model = _model(dropout)
    optimizer = create_optimizer(1e-2, num_train_steps=STEPS, num_warmup_steps=1)
    options = {"save_checkpoints_steps": 2, "log_steps": 2, "steps_per_loop": 2, **kwargs}
    trainer = training.Trainer(
        model,
        optimizer,
        _loss_fn,
        output_dir,
        gradient_accumulation_steps=accumulation,
        **options,
    )
    trainer.train(batches or _dataset(), steps)
    return model, trainer


def _assert_same_weights(a, b, atol=0.0, rtol=0.0):
    for x, y in zip(a.weights, b.weights, strict=True):
        np.testing.assert_allclose(x.numpy(), y.numpy(), atol=atol, rtol=rtol)


def test_gradient_accumulation_equals_one_big_batch(tmp_path):
    whole, _ = _train(tmp_path / "whole", 3)
    accumulated, trainer = _train(tmp_path / "acc", 3, accumulation=4)
    _assert_same_weights(whole, accumulated, atol=1e-6)
    assert int(trainer.global_step) == 3
    with pytest.raises(ValueError, match="must divide the per-replica batch size 8"):
        _train(tmp_path / "bad", 1, accumulation=3)


def _sequence_loss_fn(model, batch):
    """A loss of the encoder's sequence output only (like SQuAD's): the pooler gets no gradient."""
    ids, y = batch
    inputs = {"input_word_ids": ids, "input_mask": tf.ones_like(ids), "input_type_ids": ids * 0}
    sequence = model.encoder(inputs, training=True)["sequence_output"]
    loss = tf.reduce_mean(tf.square(tf.reduce_mean(sequence, axis=[1, 2]) - y))
    return loss, {}


@pytest.mark.parametrize("accumulation", [1, 2])
def test_variables_without_gradients_stay_unchanged_without_warnings(
    tmp_path, accumulation, caplog
):
    """google's optimizer skips a variable the loss does not reach; Keras warned "Gradients do
    not exist" each step, and gradient accumulation failed on the missing gradient."""
    training.set_seed(7)
    model = _model(0.0)
    pooler = {w.path for w in model.trainable_weights if "pooler" in w.path}
    assert pooler
    before = {w.path: w.numpy().copy() for w in model.trainable_weights}
    trainer = training.Trainer(
        model,
        create_optimizer(1e-2, num_train_steps=STEPS, num_warmup_steps=1),
        _sequence_loss_fn,
        tmp_path,
        gradient_accumulation_steps=accumulation,
        steps_per_loop=2,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Keras's "Gradients do not exist" is a UserWarning
        trainer.train(_dataset(), 2)
    for w in model.trainable_weights:
        moved = not np.array_equal(w.numpy(), before[w.path])
        assert moved == (w.path not in pooler and "classifier" not in w.path), w.path


def test_non_finite_loss_stops_before_checkpointing(tmp_path):
    with pytest.raises(FloatingPointError, match=r"steps 3\.\.4.*ckpt-2"):
        _train(tmp_path, STEPS, batches=_dataset(poison_batch=3))
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("ckpt-2")
    assert not list(tmp_path.glob("ckpt-4*"))


def test_resume_continues_step_and_matches_uninterrupted_run(tmp_path, monkeypatch):
    # Record, each time the `checkpoint` state file is updated, whether the checkpoint it names
    # is complete: a crash while writing must leave the state on the previous checkpoint.
    states = []
    update_state = checkpoint_management.update_checkpoint_state_internal

    def record(save_dir, model_checkpoint_path, **kwargs):
        complete = tf.io.gfile.exists(model_checkpoint_path + ".index") and bool(
            tf.io.gfile.glob(model_checkpoint_path + ".data-*")
        )
        states.append((model_checkpoint_path.rsplit("-", 1)[1], complete))
        update_state(save_dir, model_checkpoint_path, **kwargs)

    monkeypatch.setattr(checkpoint_management, "update_checkpoint_state_internal", record)
    uninterrupted, _ = _train(tmp_path / "full", STEPS, dropout=0.3)
    out = tmp_path / "resumed"
    _train(out, STEPS // 2, dropout=0.3)  # "interrupted" after step 3 ...
    (out / "ckpt-4.index").write_bytes(b"half-written")  # ... while writing ckpt-4
    resumed, trainer = _train(out, STEPS, dropout=0.3)
    assert int(trainer.global_step) == STEPS
    # Same as the run that was never stopped, up to float rounding (in optimizer moments ~1e-12).
    _assert_same_weights(uninterrupted, resumed, atol=1e-8, rtol=1e-5)
    assert [step for step, _ in states][::2] == ["2", "4", "6", "2", "3", "4", "6"]
    assert all(complete for _, complete in states)
    assert tf.train.latest_checkpoint(str(out)).endswith(f"ckpt-{STEPS}")
    log = json.loads((out / training.LOG_FILE).read_text())
    # The interrupted run logged its last step (3); the intervals ending at 2 and 6 are the same.
    assert [e["step"] for e in log["history"]] == [2, 3, 4, 6]
    full_log = json.loads((tmp_path / "full" / training.LOG_FILE).read_text())
    assert [e["step"] for e in full_log["history"]] == [2, 4, 6]
    losses = lambda log: {e["step"]: e["loss"] for e in log["history"] if e["step"] in (2, 6)}  # noqa: E731
    assert losses(log) == pytest.approx(losses(full_log), rel=1e-5)
    assert {"learning_rate", "loss", "mae", "examples_per_sec"} <= set(log["history"][0])
    assert (out / training.CURVE_FILE).read_bytes()[:4] == b"\x89PNG"
    assert list(out.glob("events.out.tfevents.*"))
    # Already finished: a rerun trains nothing and keeps the step and weights.
    again, trainer = _train(out, STEPS, dropout=0.3)
    assert int(trainer.global_step) == STEPS
    _assert_same_weights(resumed, again)


def test_flag_values_are_checked():
    with pytest.raises(ValueError, match="distribution_strategy"):
        training.get_strategy("parameter_server")
    with pytest.raises(ValueError, match="mixed_float16"):
        training.set_precision("float8")
    with pytest.raises(ValueError, match="steps_per_loop"):
        training.Trainer(_model(0.0), keras.optimizers.SGD(), _loss_fn, "/tmp", steps_per_loop=0)


def test_mixed_float16_uses_loss_scaling(tmp_path):
    training.set_precision("mixed_float16")
    try:
        model, trainer = _train(tmp_path, 2, accumulation=2)
    finally:
        training.set_precision("float32")
    assert isinstance(trainer.optimizer, keras.optimizers.LossScaleOptimizer)
    assert model.encoder.compute_dtype == "float16"
    assert all(v.dtype == "float32" for v in model.trainable_variables)
    log = json.loads((tmp_path / training.LOG_FILE).read_text())
    assert np.isfinite(log["history"][-1]["loss"])
