"""Masked LM + next sentence pre-training: the loss, the input pipeline and the evaluation
(see `bert_tf.tasks.pretraining`).

- `pretraining_loss(model, batch)`: google-research `run_pretraining.py`'s total loss (masked-LM
  weighted cross-entropy + NSP cross-entropy) and both accuracies, in the
  `bert_tf.training.Trainer` loss-function form.
- `pretraining_dataset(...)`: batches of `bert_tf.tasks.pretraining.records` records for training
  (shuffled, repeated, full batches) or evaluation (in file order, once). With a `masker`,
  training batches are re-masked on every read (RoBERTa's dynamic masking): the stored
  predictions are put back (`masking.restore_original_ids`) and the row is masked afresh with
  a new seed pair; evaluation always keeps the stored (static) masks, so it stays comparable.
- `evaluate(model, dataset)`: google-research's `eval_results.txt` metrics.

See `bert_tf.tasks.pretraining` for an example.
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

from bert_tf.modeling import heads
from bert_tf.tasks.pretraining.reader import read_pretraining_dataset
from bert_tf.text.masking import MaskedLmMasker, restore_original_ids

MODEL_INPUTS = ("input_word_ids", "input_mask", "input_type_ids", "masked_lm_positions")
EVAL_KEYS = (
    "loss",
    "masked_lm_accuracy",
    "masked_lm_loss",
    "next_sentence_accuracy",
    "next_sentence_loss",
)


def pretraining_loss(model, batch):
    """google-research's total loss (MLM + NSP) and the two accuracies."""
    outputs = model({name: batch[name] for name in MODEL_INPUTS}, training=True)
    labels, weights = batch["masked_lm_ids"], batch["masked_lm_weights"]
    nsp_labels = batch["next_sentence_labels"]
    loss = heads.masked_lm_loss(labels, outputs["mlm_logits"], weights) + heads.next_sentence_loss(
        nsp_labels, outputs["nsp_logits"]
    )
    return loss, {
        "masked_lm_accuracy": heads.masked_lm_accuracy(labels, outputs["mlm_logits"], weights),
        "next_sentence_accuracy": heads.next_sentence_accuracy(nsp_labels, outputs["nsp_logits"]),
    }


def remask(batch: dict[str, tf.Tensor], seeds: tf.Tensor, masker: MaskedLmMasker) -> dict:
    """A batch with its stored masks undone and fresh ones drawn with `seeds` `[batch, 2]`."""
    original = restore_original_ids(
        batch["input_word_ids"],
        batch["masked_lm_positions"],
        batch["masked_lm_ids"],
        batch["masked_lm_weights"],
    )
    masked = masker(original, seeds)
    return {
        **batch,
        "input_word_ids": masked["input_ids"],
        "masked_lm_positions": masked["masked_lm_positions"],
        "masked_lm_ids": masked["masked_lm_ids"],
        "masked_lm_weights": masked["masked_lm_weights"],
    }


def pretraining_dataset(
    input_files: str | Sequence[str],
    max_seq_length: int,
    max_predictions_per_seq: int,
    batch_size: int,
    training: bool,
    seed: int | None = None,
    masker: MaskedLmMasker | None = None,
) -> tf.data.Dataset:
    """Batches of pretraining records (see the module docstring).

    Training: files and records shuffled with `seed`, repeated, `drop_remainder` batches (the
    order, and the dynamic-masking seeds, are the same on every run given `seed`, so a resumed
    `Trainer` continues where it stopped); re-masked per read if `masker` is given.
    Evaluation: one pass in file order, the stored masks, a last partial batch kept.
    """
    if masker is not None and masker.max_predictions != max_predictions_per_seq:
        raise ValueError(
            f"masker predicts {masker.max_predictions} positions per sequence, the records "
            f"hold {max_predictions_per_seq}"
        )
    examples = read_pretraining_dataset(
        input_files, max_seq_length, max_predictions_per_seq, shuffle=training, seed=seed
    )
    if not training:
        return examples.batch(batch_size).prefetch(tf.data.AUTOTUNE)
    batches = examples.repeat().batch(batch_size, drop_remainder=True)
    if masker is not None:
        # One seed pair per example read: a record gets a new mask on each epoch.
        seeds = tf.data.Dataset.random(seed=seed).batch(2).batch(batch_size)
        batches = tf.data.Dataset.zip(batches, seeds).map(
            lambda batch, s: remask(batch, s, masker), num_parallel_calls=tf.data.AUTOTUNE
        )
    return batches.prefetch(tf.data.AUTOTUNE)


def evaluate(
    model,
    dataset: tf.data.Dataset,
    max_steps: int | None = None,
    jit_compile: bool = False,
    with_count: bool = False,
) -> dict[str, float]:
    """`EVAL_KEYS` over `dataset` (at most `max_steps` batches), as google-research computes
    them: masked-LM loss and accuracy weighted over all predictions, NSP ones over examples,
    `loss` their sum; with `with_count`, `num_examples` too. `model`: a `BertPretrainer` or any
    `model(inputs, training=False) -> {"mlm_logits", "nsp_logits"}` (an exported signature)."""
    if max_steps is not None:
        dataset = dataset.take(max_steps)

    @tf.function(jit_compile=jit_compile)
    def sums(batch):
        outputs = model({name: batch[name] for name in MODEL_INPUTS}, training=False)
        labels, weights = batch["masked_lm_ids"], batch["masked_lm_weights"]
        nsp_labels = batch["next_sentence_labels"]
        num_weights = tf.reduce_sum(weights)
        num_examples = tf.cast(tf.shape(nsp_labels)[0], tf.float32)
        mlm_loss = heads.masked_lm_loss(labels, outputs["mlm_logits"], weights)
        # masked_lm_loss divides by (sum of weights + 1e-5): undo it exactly for the total.
        return {
            "mlm_loss": mlm_loss * (num_weights + 1e-5),
            "mlm_correct": heads.masked_lm_accuracy(labels, outputs["mlm_logits"], weights)
            * num_weights,
            "weights": num_weights,
            "nsp_loss": heads.next_sentence_loss(nsp_labels, outputs["nsp_logits"]) * num_examples,
            "nsp_correct": heads.next_sentence_accuracy(nsp_labels, outputs["nsp_logits"])
            * num_examples,
            "examples": num_examples,
        }

    totals: dict[str, float] = {}
    for batch in dataset:
        for key, value in sums(batch).items():
            totals[key] = totals.get(key, 0.0) + float(value)
    if not totals.get("examples"):
        raise ValueError("evaluate: the dataset is empty")
    if with_count:
        return {**_metrics(totals), "num_examples": totals["examples"]}
    return _metrics(totals)


def _metrics(totals: dict[str, float]) -> dict[str, float]:
    weights = max(totals["weights"], 1e-5)
    result = {
        "masked_lm_accuracy": totals["mlm_correct"] / weights,
        "masked_lm_loss": totals["mlm_loss"] / weights,
        "next_sentence_accuracy": totals["nsp_correct"] / totals["examples"],
        "next_sentence_loss": totals["nsp_loss"] / totals["examples"],
    }
    result["loss"] = result["masked_lm_loss"] + result["next_sentence_loss"]
    return result
