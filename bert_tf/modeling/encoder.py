"""The BERT encoder as a Keras 3 functional model (numerically google-research/bert's `BertModel`).

Inputs (int32 `[batch, seq]`): `input_word_ids`, `input_mask` (1 = real token), `input_type_ids`.
Outputs (dict): `sequence_output` `[batch, seq, H]` (last layer), `pooled_output` `[batch, H]`
(tanh dense on the [CLS] position) and `encoder_outputs` (list of all L layer outputs).

Layer names follow the google-research variable scopes (see `bert_tf.checkpoints` for the table):
`word_embeddings`, `token_type_embeddings`, `position_embeddings`, `embeddings_layer_norm`,
`transformer_layer_{i}` (`attention`, `attention_layer_norm`, `intermediate_dense`,
`output_dense`, `output_layer_norm`) and `pooler_dense`.

Example:

```python
import numpy as np
from bert_tf.modeling.configs import BertConfig
from bert_tf.modeling.encoder import build_encoder

encoder = build_encoder(BertConfig.from_preset("tiny"))
ids = np.array([[101, 1037, 2158, 102, 0]], dtype="int32")
outputs = encoder(
    {"input_word_ids": ids, "input_mask": np.int32(ids > 0), "input_type_ids": np.zeros_like(ids)}
)
outputs["sequence_output"].shape  # (1, 5, 128)
```
"""

from __future__ import annotations

import keras
from keras_nlp.layers import PositionEmbedding

from bert_tf.modeling.configs import LAYER_NORM_EPSILON, BertConfig
from bert_tf.modeling.layers import BertDropout, TransformerLayer, WordEmbedding, truncated_normal

INPUT_NAMES = ("input_word_ids", "input_mask", "input_type_ids")


def encoder_inputs(name_prefix: str = "") -> dict[str, keras.KerasTensor]:
    """The three int32 `[batch, seq]` encoder inputs, keyed by their names."""
    return {
        name: keras.Input(shape=(None,), dtype="int32", name=name_prefix + name)
        for name in INPUT_NAMES
    }


@keras.saving.register_keras_serializable(package="bert_tf")
class BertEncoder(keras.Model):
    """BERT encoder; constructor args are the `BertConfig` fields.

    The word embedding layer is a keras-nlp `ReversibleEmbedding`
    (`bert_tf.modeling.layers.WordEmbedding`), so the masked-LM head can reuse it as its (tied)
    output projection.
    """

    def __init__(
        self,
        vocab_size: int,
        hidden_size: int = 768,
        num_hidden_layers: int = 12,
        num_attention_heads: int = 12,
        intermediate_size: int = 3072,
        hidden_act: str = "gelu",
        hidden_dropout_prob: float = 0.1,
        attention_probs_dropout_prob: float = 0.1,
        max_position_embeddings: int = 512,
        type_vocab_size: int = 2,
        initializer_range: float = 0.02,
        **kwargs,
    ):
        config = BertConfig(
            vocab_size=vocab_size,
            hidden_size=hidden_size,
            num_hidden_layers=num_hidden_layers,
            num_attention_heads=num_attention_heads,
            intermediate_size=intermediate_size,
            hidden_act=hidden_act,
            hidden_dropout_prob=hidden_dropout_prob,
            attention_probs_dropout_prob=attention_probs_dropout_prob,
            max_position_embeddings=max_position_embeddings,
            type_vocab_size=type_vocab_size,
            initializer_range=initializer_range,
        )
        word_embeddings = WordEmbedding(
            vocab_size,
            hidden_size,
            embeddings_initializer=truncated_normal(initializer_range),
            name="word_embeddings",
        )
        token_type_embeddings = keras.layers.Embedding(
            type_vocab_size,
            hidden_size,
            embeddings_initializer=truncated_normal(initializer_range),
            name="token_type_embeddings",
        )
        position_embeddings = PositionEmbedding(
            max_position_embeddings,
            initializer=truncated_normal(initializer_range),
            name="position_embeddings",
        )
        embeddings_layer_norm = keras.layers.LayerNormalization(
            epsilon=LAYER_NORM_EPSILON, name="embeddings_layer_norm"
        )
        transformer_layers = [
            TransformerLayer(
                num_attention_heads=num_attention_heads,
                intermediate_size=intermediate_size,
                hidden_act=hidden_act,
                hidden_dropout_prob=hidden_dropout_prob,
                attention_probs_dropout_prob=attention_probs_dropout_prob,
                initializer_range=initializer_range,
                name=f"transformer_layer_{i}",
            )
            for i in range(num_hidden_layers)
        ]
        pooler_dense = keras.layers.Dense(
            hidden_size,
            activation="tanh",
            kernel_initializer=truncated_normal(initializer_range),
            name="pooler_dense",
        )

        inputs = encoder_inputs()
        word = word_embeddings(inputs["input_word_ids"])
        # Summed in google-research's order: word + token type + position.
        x = keras.layers.Add(name="embeddings_add")(
            [word, token_type_embeddings(inputs["input_type_ids"]), position_embeddings(word)]
        )
        x = embeddings_layer_norm(x)
        x = BertDropout(hidden_dropout_prob, name="embeddings_dropout")(x)
        encoder_outputs = []
        for layer in transformer_layers:
            x = layer(x, padding_mask=inputs["input_mask"])
            encoder_outputs.append(x)
        pooled = pooler_dense(x[:, 0, :])
        super().__init__(
            inputs=inputs,
            outputs={
                "sequence_output": x,
                "pooled_output": pooled,
                "encoder_outputs": encoder_outputs,
            },
            **kwargs,
        )
        self.bert_config = config
        self.word_embeddings = word_embeddings
        self.token_type_embeddings = token_type_embeddings
        self.position_embeddings = position_embeddings
        self.embeddings_layer_norm = embeddings_layer_norm
        self.transformer_layers = transformer_layers
        self.pooler_dense = pooler_dense

    def get_config(self):
        return {"name": self.name, "trainable": self.trainable, **self.bert_config.to_dict()}


def flat_outputs(outputs: dict) -> dict:
    """Encoder outputs with `encoder_outputs` split into `encoder_output_{i}` keys.

    SavedModel signatures only return flat dicts of tensors; use this in serving functions.
    """
    outputs = dict(outputs)
    layers = outputs.pop("encoder_outputs")
    return {**outputs, **{f"encoder_output_{i}": x for i, x in enumerate(layers)}}


def build_encoder(config: BertConfig, name: str = "bert_encoder") -> BertEncoder:
    """Builds the functional BERT encoder for `config` (dtype from the global Keras policy)."""
    return BertEncoder(**config.to_dict(), name=name)
