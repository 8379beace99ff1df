"""The checkpoint name table: every BERT variable once, with its google-research name, its HF
name, where it lives in our Keras model and how the array layouts differ (see `bert_tf.checkpoints`
for the layouts). Reading google and HF checkpoints and writing google ones all go through it.
"""

from __future__ import annotations

import dataclasses
import math
import re

import keras
import numpy as np

from bert_tf.modeling.encoder import BertEncoder
from bert_tf.modeling.heads import ClassificationHead

SAME, HEADS_IN, HEADS_OUT, TRANSPOSED = "same", "heads_in", "heads_out", "transposed"
CHECKPOINT_NAME = "bert_model.ckpt"
CONFIG_NAME = "bert_config.json"
VOCAB_NAME = "vocab.txt"
TASK_INFO_NAME = "task_info.json"
# `task_info.json`'s "task" values: serving.export's --task names of the fine-tuned models.
TASK_INFO_TASKS = ("classifier", "squad")
HF_WEIGHTS_NAME = "model.safetensors"

# Checkpoint entries that are not model weights: optimizer slots, step counter (google), and
# HF buffers / tied copies (position_ids; the MLM decoder weight and bias duplicate the word
# embeddings and cls.predictions.bias).
GOOGLE_IGNORED = re.compile(r"(/adam_[mv]$|^global_step$)")
HF_IGNORED = re.compile(r"(position_ids$|^cls\.predictions\.decoder\.(weight|bias)$)")
# Old HF/PyTorch exports name LayerNorm parameters gamma/beta.
HF_RENAMES = ((".gamma", ".weight"), (".beta", ".bias"))

# Config fields that must agree between a model and the checkpoint's own config: heads and the
# activation do not show in any variable shape, so a mismatch there would load silently wrong.
ARCHITECTURE_FIELDS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "hidden_act",
    "max_position_embeddings",
    "type_vocab_size",
)


@dataclasses.dataclass(frozen=True)
class Row:
    google: str  # google-research variable name
    hf: str  # HF name (without the "bert." prefix of HF task models)
    keras: str  # attribute path from the encoder ("encoder" scope) or the pretrainer
    layout: str
    hf_transposed: bool
    scope: str  # "encoder" or "pretraining"


def _dense(google: str, hf: str, keras_path: str, scope: str, kernel=SAME, bias=SAME):
    return [
        Row(f"{google}/kernel", f"{hf}.weight", f"{keras_path}.kernel", kernel, True, scope),
        Row(f"{google}/bias", f"{hf}.bias", f"{keras_path}.bias", bias, False, scope),
    ]


def _norm(google: str, hf: str, keras_path: str, scope: str):
    return [
        Row(f"{google}/gamma", f"{hf}.weight", f"{keras_path}.gamma", SAME, False, scope),
        Row(f"{google}/beta", f"{hf}.bias", f"{keras_path}.beta", SAME, False, scope),
    ]


def table(num_layers: int) -> list[Row]:
    """Every BERT variable of an `num_layers`-layer model with its pre-training heads."""
    enc = "encoder"
    rows = [
        Row(
            "bert/embeddings/word_embeddings",
            "embeddings.word_embeddings.weight",
            "word_embeddings.embeddings",
            SAME,
            False,
            enc,
        ),
        Row(
            "bert/embeddings/token_type_embeddings",
            "embeddings.token_type_embeddings.weight",
            "token_type_embeddings.embeddings",
            SAME,
            False,
            enc,
        ),
        Row(
            "bert/embeddings/position_embeddings",
            "embeddings.position_embeddings.weight",
            "position_embeddings.position_embeddings",
            SAME,
            False,
            enc,
        ),
        *_norm("bert/embeddings/LayerNorm", "embeddings.LayerNorm", "embeddings_layer_norm", enc),
    ]
    for i in range(num_layers):
        g, h, k = f"bert/encoder/layer_{i}", f"encoder.layer.{i}", f"transformer_layers.{i}"
        # Keras MultiHeadAttention keeps its projections in private attributes.
        for part in ("query", "key", "value"):
            rows += _dense(
                f"{g}/attention/self/{part}",
                f"{h}.attention.self.{part}",
                f"{k}.attention._{part}_dense",
                enc,
                kernel=HEADS_IN,
                bias=HEADS_IN,
            )
        rows += _dense(
            f"{g}/attention/output/dense",
            f"{h}.attention.output.dense",
            f"{k}.attention._output_dense",
            enc,
            kernel=HEADS_OUT,
        )
        rows += _norm(
            f"{g}/attention/output/LayerNorm",
            f"{h}.attention.output.LayerNorm",
            f"{k}.attention_layer_norm",
            enc,
        )
        rows += _dense(
            f"{g}/intermediate/dense", f"{h}.intermediate.dense", f"{k}.intermediate_dense", enc
        )
        rows += _dense(f"{g}/output/dense", f"{h}.output.dense", f"{k}.output_dense", enc)
        rows += _norm(
            f"{g}/output/LayerNorm", f"{h}.output.LayerNorm", f"{k}.output_layer_norm", enc
        )
    rows += _dense("bert/pooler/dense", "pooler.dense", "pooler_dense", enc)
    pre = "pretraining"
    # keras-nlp MaskedLMHead keeps its transform layers and bias in private attributes.
    rows += _dense(
        "cls/predictions/transform/dense",
        "cls.predictions.transform.dense",
        "masked_lm_head._intermediate_dense",
        pre,
    )
    rows += _norm(
        "cls/predictions/transform/LayerNorm",
        "cls.predictions.transform.LayerNorm",
        "masked_lm_head._intermediate_layer_norm",
        pre,
    )
    rows += [
        Row(
            "cls/predictions/output_bias",
            "cls.predictions.bias",
            "masked_lm_head._bias",
            SAME,
            False,
            pre,
        ),
        Row(
            "cls/seq_relationship/output_weights",
            "cls.seq_relationship.weight",
            "next_sentence_head.kernel",
            TRANSPOSED,
            False,  # HF's (out, in) is already google's [2, H]
            pre,
        ),
        Row(
            "cls/seq_relationship/output_bias",
            "cls.seq_relationship.bias",
            "next_sentence_head.bias",
            SAME,
            False,
            pre,
        ),
    ]
    return rows


def google_shape(shape: tuple[int, ...], layout: str) -> tuple[int, ...]:
    shape = tuple(shape)
    if layout == HEADS_IN:
        return (shape[0], math.prod(shape[1:])) if len(shape) == 3 else (math.prod(shape),)
    if layout == HEADS_OUT:
        return (math.prod(shape[:-1]), shape[-1])
    if layout == TRANSPOSED:
        return shape[::-1]
    return shape


def to_google(value: np.ndarray, layout: str) -> np.ndarray:
    return value.T if layout == TRANSPOSED else value.reshape(google_shape(value.shape, layout))


def from_google(array: np.ndarray, layout: str, keras_shape: tuple[int, ...]) -> np.ndarray:
    return array.T if layout == TRANSPOSED else array.reshape(keras_shape)


def _resolve(root, path: str):
    for part in path.split("."):
        root = root[int(part)] if part.isdigit() else getattr(root, part)
    return root


def find_encoder(model: keras.Model) -> BertEncoder:
    """The `BertEncoder` itself, or the `encoder` of a task model from `bert_tf.modeling.models`."""
    if isinstance(model, BertEncoder):
        return model
    encoder = getattr(model, "encoder", None)
    if not isinstance(encoder, BertEncoder):
        raise TypeError(
            f"expected a BertEncoder or a bert_tf.modeling.models task model, got {model!r}"
        )
    return encoder


def has_pretraining_heads(model: keras.Model) -> bool:
    return hasattr(model, "masked_lm_head") and hasattr(model, "next_sentence_head")


def model_weights(model: keras.Model) -> dict[str, tuple[Row, keras.Variable]]:
    """google name -> (row, variable) for every table variable `model` has."""
    encoder = find_encoder(model)
    roots = {"encoder": encoder}
    if has_pretraining_heads(model):
        roots["pretraining"] = model
    return {
        row.google: (row, _resolve(roots[row.scope], row.keras))
        for row in table(encoder.bert_config.num_hidden_layers)
        if row.scope in roots
    }


def get_google_weights(model: keras.Model) -> dict[str, np.ndarray]:
    """The model's BERT weights as numpy arrays keyed and laid out as google-research's."""
    return {
        name: to_google(keras.ops.convert_to_numpy(variable), row.layout)
        for name, (row, variable) in model_weights(model).items()
    }


def get_hf_weights(model: keras.Model) -> dict[str, np.ndarray]:
    """The model's weights keyed and laid out as HF transformers' (`nn.Linear` weights
    `(out, in)`): `BertModel` names for a `BertEncoder`; for a task model, those with the `bert.`
    prefix of HF task models, plus the pre-training heads' `cls.*` when it has them and the
    `classifier.weight` `(num_classes, H)` / `classifier.bias` of a `ClassificationHead`
    (`BertClassifier`, `BertTokenClassifier`: HF's `BertFor{Sequence,Token}Classification`).
    The tied MLM decoder weight is left out, as HF's own `save_pretrained` does."""
    prefix = "" if isinstance(model, BertEncoder) else "bert."
    weights = {}
    for row, variable in model_weights(model).values():
        array = to_google(keras.ops.convert_to_numpy(variable), row.layout)
        name = row.hf if row.scope == "pretraining" else prefix + row.hf
        weights[name] = array.T if row.hf_transposed else array
    head = getattr(model, "head", None)
    if isinstance(head, ClassificationHead):
        weights["classifier.weight"] = keras.ops.convert_to_numpy(head.dense.kernel).T
        weights["classifier.bias"] = keras.ops.convert_to_numpy(head.dense.bias)
    return weights
