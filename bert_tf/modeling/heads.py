"""Task heads on top of the BERT encoder, and the pre-training losses and metrics.

- Pre-training: keras-nlp `MaskedLMHead` (gather at `masked_lm_positions`, dense + activation +
  LayerNorm, output projection tied to the word embeddings, output bias), exactly google-research's
  `cls/predictions`; the NSP head is a plain `Dense(2)` (`cls/seq_relationship`).
- Fine-tuning: `ClassificationHead` (GLUE classification/regression on the pooled output, NER on
  every token), `SpanHead` (SQuAD start/end logits, padding masked), `MultipleChoiceHead` (SWAG).

All logits are float32, also under mixed precision, so losses and softmax are computed in float32.

The loss/metric functions take plain tensors, for `model.compile` wrappers or a custom loop:

```python
import numpy as np
from bert_tf.modeling import heads

labels = np.array([[5, 7]])
logits = np.random.rand(1, 2, 10).astype("float32")
weights = np.array([[1.0, 0.0]], dtype="float32")  # second prediction is padding
loss = heads.masked_lm_loss(labels, logits, weights)
accuracy = heads.masked_lm_accuracy(labels, logits, weights)
```
"""

from __future__ import annotations

import keras
from keras import ops

from bert_tf.modeling.layers import BertDropout, truncated_normal

# Added to the span logits of padding positions (same constant as the attention mask).
_MASK_ADDER = -10000.0


@keras.saving.register_keras_serializable(package="bert_tf")
class ClassificationHead(keras.layers.Layer):
    """Dropout then `Dense(num_classes)`; float32 logits. `num_classes=1` gives regression.

    Applied to the pooled output it is the GLUE head of google-research `run_classifier.py`;
    applied to the sequence output it is a per-token (NER) head.
    """

    def __init__(
        self,
        num_classes: int,
        dropout: float = 0.1,
        initializer_range: float = 0.02,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if num_classes < 1:
            raise ValueError(f"num_classes must be >= 1, got {num_classes}")
        self.num_classes = num_classes
        self.dropout = dropout
        self.initializer_range = initializer_range
        self._dropout = BertDropout(dropout, name="dropout")
        # float32 policy: the logits feed softmax/MSE losses.
        self.dense = keras.layers.Dense(
            num_classes,
            kernel_initializer=truncated_normal(initializer_range),
            dtype="float32",
            name="logits",
        )

    def build(self, inputs_shape):
        self.dense.build(inputs_shape)
        self.built = True

    def call(self, inputs, training=None):
        return self.dense(self._dropout(inputs, training=training))

    def compute_output_shape(self, inputs_shape):
        return (*inputs_shape[:-1], self.num_classes)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_classes": self.num_classes,
                "dropout": self.dropout,
                "initializer_range": self.initializer_range,
            }
        )
        return config


@keras.saving.register_keras_serializable(package="bert_tf")
class SpanHead(keras.layers.Layer):
    """SQuAD head: `Dense(2)` over the sequence -> (start_logits, end_logits), `[batch, seq]`.

    Padding positions (`input_mask == 0`) get -10000 so they are never predicted; [CLS] (position
    0) stays allowed, it is the "no answer" span of SQuAD v2.0.
    """

    def __init__(self, initializer_range: float = 0.02, **kwargs):
        super().__init__(**kwargs)
        self.initializer_range = initializer_range
        self.dense = keras.layers.Dense(
            2,
            kernel_initializer=truncated_normal(initializer_range),
            dtype="float32",
            name="logits",
        )

    def build(self, inputs_shape, input_mask_shape=None):
        self.dense.build(inputs_shape)
        self.built = True

    def call(self, inputs, input_mask):
        logits = self.dense(inputs)
        logits = logits + (1.0 - ops.cast(input_mask, "float32"))[..., None] * _MASK_ADDER
        return logits[..., 0], logits[..., 1]

    def compute_output_shape(self, inputs_shape, input_mask_shape=None):
        return tuple(inputs_shape[:-1]), tuple(inputs_shape[:-1])

    def get_config(self):
        config = super().get_config()
        config["initializer_range"] = self.initializer_range
        return config


@keras.saving.register_keras_serializable(package="bert_tf")
class MultipleChoiceHead(keras.layers.Layer):
    """SWAG head: one score per (example, choice) from the pooled output.

    Call args: `pooled` `[batch * num_choices, H]` and the unflattened `choice_ids`
    `[batch, num_choices, seq]` (only its shape is used); returns `[batch, num_choices]`.
    """

    def __init__(self, dropout: float = 0.1, initializer_range: float = 0.02, **kwargs):
        super().__init__(**kwargs)
        self.dropout = dropout
        self.initializer_range = initializer_range
        self.score = ClassificationHead(1, dropout, initializer_range, name="score")

    def build(self, pooled_shape, choice_ids_shape=None):
        self.score.build(pooled_shape)
        self.built = True

    def call(self, pooled, choice_ids, training=None):
        scores = self.score(pooled, training=training)
        return ops.reshape(scores, ops.shape(choice_ids)[:2])

    def compute_output_shape(self, pooled_shape, choice_ids_shape):
        return tuple(choice_ids_shape[:2])

    def get_config(self):
        config = super().get_config()
        config.update({"dropout": self.dropout, "initializer_range": self.initializer_range})
        return config


def masked_lm_loss(labels, logits, weights):
    """google-research's MLM loss: weighted mean cross-entropy over the predicted positions.

    labels `[B, P]` int, logits `[B, P, V]`, weights `[B, P]` (0 for padding predictions).
    """
    weights = ops.cast(weights, "float32")
    per_position = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    # The 1e-5 keeps a batch with no predictions finite, as in google-research run_pretraining.py.
    return ops.sum(per_position * weights) / (ops.sum(weights) + 1e-5)


def next_sentence_loss(labels, logits):
    """Mean cross-entropy of the NSP logits `[B, 2]`; labels `[B]` or `[B, 1]` (0 = IsNext)."""
    labels = ops.reshape(labels, (-1,))
    return ops.mean(keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True))


def masked_lm_accuracy(labels, logits, weights):
    """Weighted accuracy of the MLM predictions (0 when all weights are 0)."""
    weights = ops.cast(weights, "float32")
    return ops.divide_no_nan(ops.sum(_correct(labels, logits) * weights), ops.sum(weights))


def next_sentence_accuracy(labels, logits):
    """Accuracy of the NSP logits `[B, 2]`; labels `[B]` or `[B, 1]`."""
    return ops.mean(_correct(ops.reshape(labels, (-1,)), logits))


def _correct(labels, logits):
    predictions = ops.cast(ops.argmax(logits, axis=-1), "int32")
    return ops.cast(ops.equal(predictions, ops.cast(labels, "int32")), "float32")
