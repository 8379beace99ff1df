"""Sentence(-pair) classification and regression: the input pipeline, loss and evaluation that
`run_classifier` and the TFX classification Trainer share.

Example:

    from bert_tf.tasks import glue
    from bert_tf.tasks.classification import classification_loss_fn, evaluate, make_dataset

    processor = glue.get_processor("sst-2")
    examples = processor.get_train_examples("glue/SST-2")
    dataset = make_dataset(examples, preprocessor, processor.labels, 32, training=True)
    loss_fn = classification_loss_fn(num_classes=2)   # a `training.Trainer` hook
"""

from __future__ import annotations

from collections.abc import Sequence

import keras
import numpy as np
import tensorflow as tf

from bert_tf import training
from bert_tf.tasks import glue


def make_dataset(
    examples: Sequence[glue.InputExample],
    preprocessor,
    label_list: Sequence[str],
    batch_size: int,
    training: bool,
    seed: int | None = None,
) -> tf.data.Dataset:
    """Batches of (encoder inputs, label ids / float scores) tokenized in-graph.

    Training: shuffled each epoch (with `seed`), repeated, full batches only. The pipeline
    shuffles example indexes rather than texts, so its checkpointed state stays small.
    """
    if not examples:
        raise ValueError("no examples to batch")
    has_pair = examples[0].text_b is not None
    texts_a = tf.constant([e.text_a for e in examples])
    texts_b = tf.constant([e.text_b or "" for e in examples])
    if label_list:
        index = {label: i for i, label in enumerate(label_list)}
        labels = tf.constant([index.get(e.label, 0) for e in examples], tf.int32)
    else:
        labels = tf.constant([e.label or 0.0 for e in examples], tf.float32)
    dataset = tf.data.Dataset.range(len(examples))
    if training:
        dataset = dataset.shuffle(len(examples), seed=seed, reshuffle_each_iteration=True)
        dataset = dataset.repeat()
    dataset = dataset.batch(batch_size, drop_remainder=training)

    def features(ids):
        segments = (tf.gather(texts_a, ids), tf.gather(texts_b, ids))
        inputs = preprocessor(segments if has_pair else segments[0])
        # Static shapes (ragged tokenization loses the batch size) for XLA and the trainer.
        shape = [batch_size if training else None, preprocessor.seq_length]
        inputs = {k: tf.ensure_shape(v, shape) for k, v in inputs.items()}
        return inputs, tf.gather(labels, ids)

    return dataset.map(features, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def classification_loss_fn(num_classes: int) -> training.LossFn:
    """Mean cross-entropy and accuracy, or mean squared error for `num_classes=1`."""

    def loss_fn(model, batch):
        features, labels = batch
        logits = model(features, training=True)
        if num_classes == 1:
            return tf.reduce_mean(tf.square(logits[:, 0] - labels)), {}
        loss = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
        correct = tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), labels)
        return tf.reduce_mean(loss), {"accuracy": tf.reduce_mean(tf.cast(correct, tf.float32))}

    return loss_fn


def evaluate(
    task_name: str, logits: np.ndarray, examples: Sequence[glue.InputExample], label_list
) -> dict[str, float]:
    """`eval_loss` and the task's metrics, prefixed `eval_` as google-research writes them."""
    if label_list:
        labels = np.array([label_list.index(e.label) for e in examples])
        log_probs = logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)
        loss = -np.mean(log_probs[np.arange(len(labels)), labels])
        predictions = np.argmax(logits, axis=-1)
    else:
        labels = np.array([e.label for e in examples], dtype=np.float64)
        predictions = logits[:, 0]
        loss = np.mean(np.square(predictions - labels))
    metrics = glue.compute_metrics(task_name, predictions, labels)
    return {"eval_loss": float(loss), **{f"eval_{k}": v for k, v in metrics.items()}}
