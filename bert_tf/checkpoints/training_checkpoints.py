"""The object-based `tf.train.Checkpoint`s of our training scripts (`ckpt-<step>` in an output
folder): what they hold, and restoring the newest one that reads.
"""

from __future__ import annotations

import json
import os

import keras
import tensorflow as tf
from absl import logging

from bert_tf.checkpoints.names import find_encoder

# The serialized Keras config of the checkpointed model, stored as a string variable: it rebuilds
# the exact model the object graph was written from, so the checkpoint needs no config file.
MODEL_CONFIG_KEY = "model_config"
MODEL_CONFIG_TENSOR = f"{MODEL_CONFIG_KEY}/.ATTRIBUTES/VARIABLE_VALUE"


def training_checkpoint(model: keras.Model, optimizer=None, **extra) -> tf.train.Checkpoint:
    """The object-based checkpoint our training scripts write: `load_pretrained` reads it back.

    Tracks `encoder` (the model's `BertEncoder`), `model`, `optimizer` (when given), the model's
    Keras config (`model_config`, a string variable) and any `extra` trackables (e.g. a step
    counter). Save it with `tf.train.CheckpointManager` or `.write(prefix)`.

    Example:

        step = tf.Variable(0, dtype=tf.int64)
        ckpt = training_checkpoint(model, optimizer, step=step)
        tf.train.CheckpointManager(ckpt, "/tmp/run", max_to_keep=3).save(checkpoint_number=step)
        load_pretrained(BertClassifier(build_encoder(config), 2), "/tmp/run")  # latest
    """
    reserved = {"encoder", "model", "optimizer", MODEL_CONFIG_KEY} & set(extra)
    if reserved:
        raise ValueError(f"training_checkpoint: extra names {sorted(reserved)} are reserved")
    config = json.dumps(keras.saving.serialize_keras_object(model))
    trackables = {
        "encoder": find_encoder(model),
        "model": model,
        MODEL_CONFIG_KEY: tf.Variable(config, trainable=False, dtype=tf.string),
        **extra,
    }
    if optimizer is not None:
        trackables["optimizer"] = optimizer
    return tf.train.Checkpoint(**trackables)


def restore_newest_readable(
    checkpoint: tf.train.Checkpoint, directory: str | os.PathLike, partial: bool = False
) -> str | None:
    """Restores the newest checkpoint in `directory` whose files read back; returns its path.

    The `checkpoint` state file only ever names complete checkpoints (TF updates it after the
    files are written), but files can still be damaged later (a half-copied folder, a full or
    faulty disk): such a checkpoint is skipped, with a warning, for the one before it, so a
    long run resumes instead of stopping. `partial` allows objects of the checkpoint that
    `checkpoint` lacks (e.g. no optimizer). None if the folder holds no checkpoint.
    """
    state = tf.train.get_checkpoint_state(str(directory))
    if state is None:
        return None
    paths = list(state.all_model_checkpoint_paths) or [state.model_checkpoint_path]
    for path in reversed(paths):
        try:
            status = checkpoint.restore(path)
        except (tf.errors.OpError, IndexError) as e:  # IndexError: a truncated data file
            logging.warning("skipping unreadable checkpoint %s: %s", path, e)
            continue
        if partial:
            status.expect_partial()
        else:
            status.assert_existing_objects_matched()
        return path
    raise ValueError(f"{directory}: none of its checkpoints is readable ({', '.join(paths)})")
