"""The `Trainer`'s checkpoints: `output_dir/ckpt-<step>`, what they hold, how a run starts from
them, and `restore_latest` for evaluation.

- `training_state`: the checkpoint (`bert_tf.checkpoints.training_checkpoint`: model, optimizer,
  step counter, dropout RNG states) and the `tf.train.CheckpointManager` that saves it every
  `save_checkpoints_steps`. The manager writes the `checkpoint` state file only after the
  checkpoint's data and index are complete, so a crash mid-write leaves `latest` on the previous
  one; a latest checkpoint damaged afterwards is skipped for the one before it
  (`checkpoints.restore_newest_readable`);
- `init_checkpoint` only initialises weights (any format `load_pretrained` reads), and
  `scale_fresh_learning_rates` gives the variables it lacks (task heads) their own rate;
- `restore_latest`: a model's weights from the latest checkpoint of a training folder.
"""

from __future__ import annotations

import os

import keras
import tensorflow as tf
from absl import logging

from bert_tf import checkpoints


def training_state(
    model: keras.Model,
    optimizer: keras.optimizers.Optimizer,
    global_step: tf.Variable,
    save_dir: str,
    max_to_keep: int,
) -> tuple[tf.train.Checkpoint, tf.train.CheckpointManager]:
    """The training checkpoint of `model`, `optimizer` and `global_step`, and the manager that
    saves it as `save_dir/ckpt-<step>`, keeping `max_to_keep`."""
    checkpoint = checkpoints.training_checkpoint(
        model,
        optimizer,
        step=global_step,
        # Keras does not make its dropout seed-generator states checkpoint dependencies of
        # the model; without them a resumed run would draw different dropout masks.
        non_trainable=list(model.non_trainable_variables),
    )
    manager = tf.train.CheckpointManager(
        checkpoint, save_dir, max_to_keep=max_to_keep, step_counter=global_step
    )
    return checkpoint, manager


def scale_fresh_learning_rates(
    model: keras.Model,
    optimizer: keras.optimizers.Optimizer,
    init_checkpoint: str | os.PathLike,
    multiplier: float,
) -> None:
    """The variables `init_checkpoint` lacks learn at `multiplier` x the rate (call it before the
    step is traced, so the compiled update uses it)."""
    fresh = checkpoints.fresh_variables(model, init_checkpoint)
    if not fresh:
        return
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    if not hasattr(inner, "set_learning_rate_multiplier"):
        raise ValueError(
            f"head_learning_rate_multiplier={multiplier} needs an "
            f"optimizer with per-variable rates (BertAdamW, BertLamb), not "
            f"{type(inner).__name__}"
        )
    inner.set_learning_rate_multiplier(fresh, multiplier)
    logging.info(
        "learning rate x%g for the %d variables %s lacks: %s",
        multiplier,
        len(fresh),
        init_checkpoint,
        ", ".join(v.path for v in fresh),
    )


def restore_latest(model: keras.Model, output_dir: str | os.PathLike) -> str | None:
    """Restores `model` from the latest training checkpoint in `output_dir`; returns its path."""
    checkpoint = checkpoints.training_checkpoint(model)
    return checkpoints.restore_newest_readable(checkpoint, output_dir, partial=True)
