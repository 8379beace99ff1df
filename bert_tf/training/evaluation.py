"""Evaluation after training: `predict` runs a model over a finite dataset, and
`write_eval_results` writes google-research's `eval_results.txt`. (`checkpointing.restore_latest`
loads the weights to evaluate.)"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf import fileio

EVAL_RESULTS_FILE = "eval_results.txt"  # google-research's name and `key = value` format


def predict(
    model: keras.Model, dataset: Iterable, jit_compile: bool = False
) -> np.ndarray | dict[str, np.ndarray]:
    """Runs `model(batch, training=False)` over a finite dataset; concatenates the outputs."""
    forward = tf.function(lambda batch: model(batch, training=False), jit_compile=jit_compile)
    outputs = [tf.nest.map_structure(lambda t: t.numpy(), forward(batch)) for batch in dataset]
    if not outputs:
        raise ValueError("predict: the dataset is empty")
    return tf.nest.map_structure(lambda *parts: np.concatenate(parts), *outputs)


def write_eval_results(output_dir: str | os.PathLike, result: dict[str, Any]) -> None:
    """Writes `result` as google-research's `eval_results.txt` (`key = value` lines, sorted) in
    `output_dir`, atomically, and logs each line."""
    lines = [f"{key} = {result[key]}" for key in sorted(result)]
    fileio.atomic_write_text(
        os.path.join(output_dir, EVAL_RESULTS_FILE), "".join(f"{line}\n" for line in lines)
    )
    for line in lines:
        logging.info("eval %s", line)
