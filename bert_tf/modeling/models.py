"""BERT task models: pre-training, GLUE classification/regression, SQuAD, NER, SWAG.

Each model is a functional `keras.Model` that owns a `BertEncoder` (attribute `encoder`) and is
rebuilt from `get_config` by calling its constructor, as keras-nlp tasks are; this keeps the
masked-LM output projection tied to the word embeddings after `.keras` reloads.

| model                   | extra inputs                         | outputs                             |
|-------------------------|--------------------------------------|-------------------------------------|
| `BertPretrainer`        | `masked_lm_positions` `[B, P]` int32 | `mlm_logits` `[B, P, V]`, `nsp_logits` `[B, 2]` |
| `BertClassifier`        |                                      | logits `[B, num_classes]`           |
| `BertSpanLabeler`       |                                      | `start_logits`, `end_logits` `[B, S]` |
| `BertTokenClassifier`   |                                      | logits `[B, S, num_classes]`        |
| `BertMultipleChoice`    | (inputs are `[B, num_choices, S]`)   | logits `[B, num_choices]`           |

All take `input_word_ids`, `input_mask`, `input_type_ids` (int32) and return float32 logits.

Example:

```python
import numpy as np
from bert_tf.modeling.configs import BertConfig
from bert_tf.modeling.encoder import build_encoder
from bert_tf.modeling.models import BertPretrainer

model = BertPretrainer(build_encoder(BertConfig.from_preset("tiny")))
ids = np.array([[101, 103, 2158, 102]], dtype="int32")
out = model(
    {
        "input_word_ids": ids,
        "input_mask": np.ones_like(ids),
        "input_type_ids": np.zeros_like(ids),
        "masked_lm_positions": np.array([[1]], dtype="int32"),
    }
)
out["mlm_logits"].shape, out["nsp_logits"].shape  # (1, 1, 30522), (1, 2)
```
"""

from __future__ import annotations

import keras
from keras_nlp.layers import MaskedLMHead

from bert_tf.modeling.configs import LAYER_NORM_EPSILON
from bert_tf.modeling.encoder import INPUT_NAMES, BertEncoder, encoder_inputs
from bert_tf.modeling.heads import ClassificationHead, MultipleChoiceHead, SpanHead
from bert_tf.modeling.layers import FlattenChoices, get_activation, truncated_normal


class _TaskModel(keras.Model):
    """Shared config handling: the encoder is serialized inside the task's config."""

    def _finish(self, encoder: BertEncoder, inputs, outputs, task_args: dict, **kwargs) -> None:
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.encoder = encoder
        self._task_args = task_args

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "encoder": keras.saving.serialize_keras_object(self.encoder),
            **self._task_args,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
        return cls(**config)


def _dropout_or_default(encoder: BertEncoder, dropout: float | None) -> float:
    # google-research's fine-tuning heads use the encoder's hidden dropout (0.1).
    return encoder.bert_config.hidden_dropout_prob if dropout is None else dropout


@keras.saving.register_keras_serializable(package="bert_tf")
class BertPretrainer(_TaskModel):
    """Masked LM + next sentence prediction (google-research `run_pretraining.py` heads)."""

    def __init__(self, encoder: BertEncoder, **kwargs):
        config = encoder.bert_config
        inputs = {
            **encoder_inputs(),
            "masked_lm_positions": keras.Input(
                shape=(None,), dtype="int32", name="masked_lm_positions"
            ),
        }
        outputs = encoder({name: inputs[name] for name in INPUT_NAMES})
        masked_lm_head = MaskedLMHead(
            token_embedding=encoder.word_embeddings,
            intermediate_activation=get_activation(config.hidden_act),
            layer_norm_epsilon=LAYER_NORM_EPSILON,
            kernel_initializer=truncated_normal(config.initializer_range),
            # float32: its output bias is not autocast (keras-nlp 0.15 fails under
            # mixed_float16 otherwise) and the logits feed the loss. The tied vocabulary
            # projection still runs in the embedding layer's compute dtype.
            dtype="float32",
            name="masked_lm_head",
        )
        next_sentence_head = keras.layers.Dense(
            2,
            kernel_initializer=truncated_normal(config.initializer_range),
            dtype="float32",
            name="next_sentence_head",
        )
        self._finish(
            encoder,
            inputs,
            {
                "mlm_logits": masked_lm_head(
                    outputs["sequence_output"], mask_positions=inputs["masked_lm_positions"]
                ),
                "nsp_logits": next_sentence_head(outputs["pooled_output"]),
            },
            {},
            **kwargs,
        )
        self.masked_lm_head = masked_lm_head
        self.next_sentence_head = next_sentence_head


class _EncoderOutputClassifier(_TaskModel):
    """A `ClassificationHead` (dropout, dense) on one of the encoder's outputs: `OUTPUT`."""

    OUTPUT = ""  # "pooled_output" or "sequence_output"
    HEAD_NAME = ""

    def __init__(
        self, encoder: BertEncoder, num_classes: int, dropout: float | None = None, **kwargs
    ):
        dropout = _dropout_or_default(encoder, dropout)
        inputs = encoder_inputs()
        head = ClassificationHead(
            num_classes, dropout, encoder.bert_config.initializer_range, name=self.HEAD_NAME
        )
        logits = head(encoder(inputs)[self.OUTPUT])
        self._finish(
            encoder, inputs, logits, {"num_classes": num_classes, "dropout": dropout}, **kwargs
        )
        self.head = head


@keras.saving.register_keras_serializable(package="bert_tf")
class BertClassifier(_EncoderOutputClassifier):
    """Sentence(-pair) classification on the pooled output; `num_classes=1` for regression."""

    OUTPUT, HEAD_NAME = "pooled_output", "classifier"


@keras.saving.register_keras_serializable(package="bert_tf")
class BertTokenClassifier(_EncoderOutputClassifier):
    """Per-token classification (NER) on the sequence output."""

    OUTPUT, HEAD_NAME = "sequence_output", "token_classifier"


@keras.saving.register_keras_serializable(package="bert_tf")
class BertSpanLabeler(_TaskModel):
    """SQuAD v1.1/v2.0 answer-span start/end logits (google-research `run_squad.py` head)."""

    def __init__(self, encoder: BertEncoder, **kwargs):
        inputs = encoder_inputs()
        head = SpanHead(encoder.bert_config.initializer_range, name="span_head")
        start, end = head(encoder(inputs)["sequence_output"], input_mask=inputs["input_mask"])
        self._finish(encoder, inputs, {"start_logits": start, "end_logits": end}, {}, **kwargs)
        self.head = head


@keras.saving.register_keras_serializable(package="bert_tf")
class BertMultipleChoice(_TaskModel):
    """SWAG-style multiple choice: inputs `[B, num_choices, S]`, one logit per choice."""

    def __init__(self, encoder: BertEncoder, dropout: float | None = None, **kwargs):
        dropout = _dropout_or_default(encoder, dropout)
        inputs = {
            name: keras.Input(shape=(None, None), dtype="int32", name=name) for name in INPUT_NAMES
        }
        flat = {name: FlattenChoices(name=f"flatten_{name}")(x) for name, x in inputs.items()}
        head = MultipleChoiceHead(
            dropout, encoder.bert_config.initializer_range, name="multiple_choice_head"
        )
        logits = head(encoder(flat)["pooled_output"], choice_ids=inputs["input_word_ids"])
        self._finish(encoder, inputs, logits, {"dropout": dropout}, **kwargs)
        self.head = head
