"""Checkpoint interop: google-research TF1 checkpoints, HF safetensors, our google-named export and
the object-based `tf.train.Checkpoint`s of our training scripts (`training_checkpoint`).

One table (`_table`) lists every BERT variable once with its google-research name, its HF name,
where it lives in our Keras model and how the array layouts differ; reading google checkpoints,
reading HF weights and writing google checkpoints all go through it.

Layouts (Keras variable vs google-research array):
- `same`: identical arrays.
- `heads_in`: attention query/key/value kernel `[H, heads, head_size]` vs `[H, H]`, bias
  `[heads, head_size]` vs `[H]` (reshape).
- `heads_out`: attention output kernel `[heads, head_size, H]` vs `[H, H]` (reshape).
- `transposed`: NSP kernel `[H, 2]` vs `cls/seq_relationship/output_weights` `[2, H]`.
HF stores every `nn.Linear` weight as `(out, in)`, the transpose of google's `kernel`.

Example:

```python
from bert_tf import checkpoints
from bert_tf.configs import BertConfig
from bert_tf.data import fetch
from bert_tf.encoder import build_encoder

minilm = fetch.fetch("minilm")  # HF folder: config.json, model.safetensors, vocab.txt
encoder = build_encoder(BertConfig.from_hf_json_file(minilm / "config.json"))
checkpoints.load_pretrained(encoder, minilm)  # auto-detects HF / google / ours
prefix = checkpoints.save_google_checkpoint(encoder, "/tmp/minilm_google")
# /tmp/minilm_google/{bert_model.ckpt.index, bert_model.ckpt.data-00000-of-00001, checkpoint,
#  bert_config.json}; readable by google-research/bert's run_classifier.py --init_checkpoint.
```

Training output folders (`run_classifier`, `run_squad`) are self-contained: beside the
`ckpt-<step>` files, `write_model_files` puts `bert_config.json`, `vocab.txt` and
`task_info.json` (`TASK_INFO_NAME`: what `serving.export` needs besides the weights; see
`write_model_files`), so `serving.export --init_checkpoint=<output_dir>` needs no other flag.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from absl import logging
from safetensors.numpy import load_file

from bert_tf import fileio
from bert_tf.configs import BertConfig, canonical_activation
from bert_tf.encoder import BertEncoder

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
_GOOGLE_IGNORED = re.compile(r"(/adam_[mv]$|^global_step$)")
_HF_IGNORED = re.compile(r"(position_ids$|^cls\.predictions\.decoder\.(weight|bias)$)")
# Old HF/PyTorch exports name LayerNorm parameters gamma/beta.
_HF_RENAMES = ((".gamma", ".weight"), (".beta", ".bias"))

# Config fields that must agree between a model and the checkpoint's own config: heads and the
# activation do not show in any variable shape, so a mismatch there would load silently wrong.
_ARCHITECTURE_FIELDS = (
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
class _Row:
    google: str  # google-research variable name
    hf: str  # HF name (without the "bert." prefix of HF task models)
    keras: str  # attribute path from the encoder ("encoder" scope) or the pretrainer
    layout: str
    hf_transposed: bool
    scope: str  # "encoder" or "pretraining"


def _dense(google: str, hf: str, keras_path: str, scope: str, kernel=SAME, bias=SAME):
    return [
        _Row(f"{google}/kernel", f"{hf}.weight", f"{keras_path}.kernel", kernel, True, scope),
        _Row(f"{google}/bias", f"{hf}.bias", f"{keras_path}.bias", bias, False, scope),
    ]


def _norm(google: str, hf: str, keras_path: str, scope: str):
    return [
        _Row(f"{google}/gamma", f"{hf}.weight", f"{keras_path}.gamma", SAME, False, scope),
        _Row(f"{google}/beta", f"{hf}.bias", f"{keras_path}.beta", SAME, False, scope),
    ]


def _table(num_layers: int) -> list[_Row]:
    """Every BERT variable of an `num_layers`-layer model with its pre-training heads."""
    enc = "encoder"
    rows = [
        _Row(
            "bert/embeddings/word_embeddings",
            "embeddings.word_embeddings.weight",
            "word_embeddings.embeddings",
            SAME,
            False,
            enc,
        ),
        _Row(
            "bert/embeddings/token_type_embeddings",
            "embeddings.token_type_embeddings.weight",
            "token_type_embeddings.embeddings",
            SAME,
            False,
            enc,
        ),
        _Row(
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
        _Row(
            "cls/predictions/output_bias",
            "cls.predictions.bias",
            "masked_lm_head._bias",
            SAME,
            False,
            pre,
        ),
        _Row(
            "cls/seq_relationship/output_weights",
            "cls.seq_relationship.weight",
            "next_sentence_head.kernel",
            TRANSPOSED,
            False,  # HF's (out, in) is already google's [2, H]
            pre,
        ),
        _Row(
            "cls/seq_relationship/output_bias",
            "cls.seq_relationship.bias",
            "next_sentence_head.bias",
            SAME,
            False,
            pre,
        ),
    ]
    return rows


def _google_shape(shape: tuple[int, ...], layout: str) -> tuple[int, ...]:
    shape = tuple(shape)
    if layout == HEADS_IN:
        return (shape[0], math.prod(shape[1:])) if len(shape) == 3 else (math.prod(shape),)
    if layout == HEADS_OUT:
        return (math.prod(shape[:-1]), shape[-1])
    if layout == TRANSPOSED:
        return shape[::-1]
    return shape


def _to_google(value: np.ndarray, layout: str) -> np.ndarray:
    return value.T if layout == TRANSPOSED else value.reshape(_google_shape(value.shape, layout))


def _from_google(array: np.ndarray, layout: str, keras_shape: tuple[int, ...]) -> np.ndarray:
    return array.T if layout == TRANSPOSED else array.reshape(keras_shape)


def _resolve(root, path: str):
    for part in path.split("."):
        root = root[int(part)] if part.isdigit() else getattr(root, part)
    return root


def find_encoder(model: keras.Model) -> BertEncoder:
    """The `BertEncoder` itself, or the `encoder` of a task model from `bert_tf.models`."""
    if isinstance(model, BertEncoder):
        return model
    encoder = getattr(model, "encoder", None)
    if not isinstance(encoder, BertEncoder):
        raise TypeError(f"expected a BertEncoder or a bert_tf.models task model, got {model!r}")
    return encoder


def has_pretraining_heads(model: keras.Model) -> bool:
    return hasattr(model, "masked_lm_head") and hasattr(model, "next_sentence_head")


def _model_weights(model: keras.Model) -> dict[str, tuple[_Row, keras.Variable]]:
    """google name -> (row, variable) for every table variable `model` has."""
    encoder = find_encoder(model)
    roots = {"encoder": encoder}
    if has_pretraining_heads(model):
        roots["pretraining"] = model
    return {
        row.google: (row, _resolve(roots[row.scope], row.keras))
        for row in _table(encoder.bert_config.num_hidden_layers)
        if row.scope in roots
    }


def get_google_weights(model: keras.Model) -> dict[str, np.ndarray]:
    """The model's BERT weights as numpy arrays keyed and laid out as google-research's."""
    return {
        name: _to_google(keras.ops.convert_to_numpy(variable), row.layout)
        for name, (row, variable) in _model_weights(model).items()
    }


# --- Reading checkpoints ----------------------------------------------------------------------


@dataclasses.dataclass
class CheckpointSource:
    """A checkpoint seen in google naming: shapes and loaders, plus names it could not map."""

    path: str
    shapes: dict[str, tuple[int, ...]]
    load: Callable[[str], np.ndarray]
    unmapped: list[str]  # names in the checkpoint's own naming with no google equivalent
    config: BertConfig | None  # the checkpoint's own config, when one lies beside it
    model: keras.Model | None = None  # the whole restored task model (object-based checkpoints)

    @property
    def has_masked_lm_head(self) -> bool:
        """Whether the checkpoint holds the masked-LM head (a pretraining checkpoint)."""
        return "cls/predictions/output_bias" in self.shapes


class CheckpointMismatchError(ValueError):
    """A checkpoint's variables do not match the model's; the message lists every difference."""


def _read_google(path: str) -> CheckpointSource:
    reader = tf.train.load_checkpoint(path)
    shapes = {
        name: tuple(shape)
        for name, shape in reader.get_variable_to_shape_map().items()
        if not _GOOGLE_IGNORED.search(name)
    }
    config_file = Path(path if os.path.isdir(path) else os.path.dirname(path)) / CONFIG_NAME
    config = BertConfig.from_json_file(config_file) if config_file.exists() else None
    return CheckpointSource(str(path), shapes, reader.get_tensor, [], config)


def _read_hf(path: str) -> CheckpointSource:
    weights_file = Path(path) / HF_WEIGHTS_NAME if os.path.isdir(path) else Path(path)
    tensors = load_file(weights_file)
    by_hf = {row.hf: row for row in _table(_count_hf_layers(tensors))}
    arrays: dict[str, np.ndarray] = {}
    unmapped = []
    for hf_name, array in tensors.items():
        name = hf_name.removeprefix("bert.")
        for old, new in _HF_RENAMES:
            if "LayerNorm" in name and name.endswith(old):
                name = name[: -len(old)] + new
        if _HF_IGNORED.search(name):
            continue
        row = by_hf.get(name)
        if row is None:
            unmapped.append(hf_name)
        else:
            arrays[row.google] = array.T if row.hf_transposed else array
    config_file = weights_file.parent / "config.json"
    config = BertConfig.from_hf_json_file(config_file) if config_file.exists() else None
    return CheckpointSource(
        str(path), {k: v.shape for k, v in arrays.items()}, arrays.__getitem__, unmapped, config
    )


def _count_hf_layers(tensors: dict[str, np.ndarray]) -> int:
    indices = [int(m.group(1)) for k in tensors if (m := re.search(r"encoder\.layer\.(\d+)\.", k))]
    return max(indices, default=-1) + 1


# --- Object-based checkpoints of our training scripts ---------------------------------------

# The serialized Keras config of the checkpointed model, stored as a string variable: it rebuilds
# the exact model the object graph was written from, so the checkpoint needs no config file.
MODEL_CONFIG_KEY = "model_config"
_MODEL_CONFIG_TENSOR = f"{MODEL_CONFIG_KEY}/.ATTRIBUTES/VARIABLE_VALUE"


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


def _read_object(path: str) -> CheckpointSource:
    """Rebuilds the checkpointed model from its stored config and restores it by object graph."""
    reader = tf.train.load_checkpoint(path)
    if not reader.has_tensor(_MODEL_CONFIG_TENSOR):
        raise ValueError(
            f"{path}: object-based checkpoint without '{MODEL_CONFIG_KEY}': not written by "
            "bert_tf.checkpoints.training_checkpoint"
        )
    config = json.loads(reader.get_tensor(_MODEL_CONFIG_TENSOR).decode("utf-8"))
    # The task model classes register themselves for deserialization when bert_tf.models is
    # imported; a caller that only built an encoder may not have imported it yet.
    from bert_tf import models  # noqa: F401

    model = keras.saving.deserialize_keras_object(config)
    prefix = tf.train.latest_checkpoint(path) if os.path.isdir(path) else path
    # Same class and config as the writer, so every model variable must be found; optimizer
    # slots and extra trackables in the file are not needed here (expect_partial).
    status = tf.train.Checkpoint(encoder=find_encoder(model), model=model).read(prefix)
    status.expect_partial().assert_existing_objects_matched()
    arrays = get_google_weights(model)
    return CheckpointSource(
        str(path),
        {k: v.shape for k, v in arrays.items()},
        arrays.__getitem__,
        [],
        find_encoder(model).bert_config,
        model,
    )


# Format name -> reader.
_READERS: dict[str, Callable[[str], CheckpointSource]] = {
    "google": _read_google,
    "hf": _read_hf,
    "object": _read_object,
}


def detect_format(path: str | os.PathLike) -> str:
    """ "hf" (HF folder or .safetensors), "google" (google-named TF checkpoint prefix/dir) or
    "object" (a `training_checkpoint` prefix/dir)."""
    path = str(path)
    if os.path.isdir(path):
        if os.path.exists(os.path.join(path, HF_WEIGHTS_NAME)):
            return "hf"
        if tf.train.latest_checkpoint(path) is None:
            raise ValueError(
                f"{path}: folder has neither {HF_WEIGHTS_NAME} nor a TF 'checkpoint' state file"
            )
        path = tf.train.latest_checkpoint(path)
    elif path.endswith(".safetensors"):
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path}: no such safetensors file")
        return "hf"
    elif not tf.io.gfile.exists(path + ".index"):
        raise FileNotFoundError(
            f"{path}: not a checkpoint prefix (no {path}.index), HF folder or .safetensors file"
        )
    names = tf.train.load_checkpoint(path).get_variable_to_shape_map()
    if any(name.startswith("bert/") for name in names):
        return "google"
    if "_CHECKPOINTABLE_OBJECT_GRAPH" in names:
        return "object"
    raise ValueError(f"{path}: TF checkpoint without any google-research 'bert/...' variable")


def read_checkpoint(path: str | os.PathLike) -> CheckpointSource:
    """Opens any supported checkpoint as google-named arrays (see `detect_format`)."""
    return _READERS[detect_format(path)](str(path))


def _config_diffs(model_config: BertConfig, checkpoint_config: BertConfig) -> list[str]:
    def value(config: BertConfig, field: str):
        # Aliases of one activation ("gelu_tanh" = "gelu_new") are the same architecture.
        raw = getattr(config, field)
        return canonical_activation(raw) if field == "hidden_act" else raw

    return [
        f"{field}: model {getattr(model_config, field)!r} vs checkpoint "
        f"{getattr(checkpoint_config, field)!r}"
        for field in _ARCHITECTURE_FIELDS
        if value(model_config, field) != value(checkpoint_config, field)
    ]


def _check_config(model_config: BertConfig, source: CheckpointSource) -> None:
    if source.config is None:
        return
    if diffs := _config_diffs(model_config, source.config):
        raise ValueError(f"{source.path}: config differs from the model's: " + "; ".join(diffs))


def check_output_dir(output_dir: str | os.PathLike, config: BertConfig) -> None:
    """Raises ValueError if `output_dir` holds training checkpoints of another architecture.

    Judged by the `bert_config.json` the training scripts write beside their checkpoints:
    resuming would fail on the first mismatched variable, and writing the new config there
    would mislabel the checkpoints already in it.
    """
    config_file = Path(output_dir) / CONFIG_NAME
    if not (tf.train.latest_checkpoint(str(output_dir)) and config_file.exists()):
        return
    if diffs := _config_diffs(config, BertConfig.from_json_file(config_file)):
        raise ValueError(
            f"{output_dir} holds training checkpoints of another model ({'; '.join(diffs)}, "
            f"per its {CONFIG_NAME}): resume with the same config, or use a new output folder"
        )


def load_pretrained(
    model: keras.Model,
    init_checkpoint: str | os.PathLike,
    allow_missing: bool = False,
    allow_unexpected: bool = False,
    skip_mismatch: bool = False,
) -> list[str]:
    """Loads BERT weights into a `BertEncoder` or task model; returns the loaded google names.

    `init_checkpoint` is a google-research checkpoint prefix or folder (ours are the same
    format), an HF folder (config.json + model.safetensors), a `.safetensors` file, or a
    `training_checkpoint` prefix or folder (latest checkpoint). The pre-training heads are
    loaded when `model` has them (`BertPretrainer`); a checkpoint's heads that the model lacks
    are skipped and logged, as are task heads the table does not cover, except that a
    `training_checkpoint` of the same task model class also restores its task heads.

    Raises `CheckpointMismatchError` listing every variable missing in the checkpoint, every
    checkpoint variable the model cannot take, and every shape mismatch (checkpoint vs model),
    unless the matching `allow_missing` / `allow_unexpected` / `skip_mismatch` is set, in which
    case those variables are skipped and logged. Raises ValueError when the checkpoint's own
    config (bert_config.json / config.json beside it, or the one a training checkpoint stores)
    differs in architecture.
    """
    source = read_checkpoint(init_checkpoint)
    encoder = find_encoder(model)
    _check_config(encoder.bert_config, source)
    weights = _model_weights(model)
    known = {row.google for row in _table(encoder.bert_config.num_hidden_layers)}
    missing = sorted(set(weights) - set(source.shapes))
    unused = sorted((set(source.shapes) & known) - set(weights))
    unexpected = sorted(source.unmapped + list(set(source.shapes) - known))
    mismatched = {}  # name -> "checkpoint <shape> vs model <shape>"
    for name in sorted(set(weights) & set(source.shapes)):
        row, variable = weights[name]
        expected = _google_shape(variable.shape, row.layout)
        if tuple(source.shapes[name]) != expected:
            mismatched[name] = (
                f"{name}: checkpoint {tuple(source.shapes[name])} vs model {expected}"
            )
    task_heads = _task_head_pairs(model, source, weights, missing, mismatched)
    problems = []
    for items, allowed, what, flag in (
        (missing, allow_missing, "missing in checkpoint", "allow_missing"),
        (unexpected, allow_unexpected, "unexpected in checkpoint", "allow_unexpected"),
        (list(mismatched.values()), skip_mismatch, "shape mismatch", "skip_mismatch"),
    ):
        if not items:
            continue
        listing = f"{what} ({len(items)}):\n    " + "\n    ".join(items)
        if allowed:
            logging.warning("%s: skipping (%s=True) %s", source.path, flag, listing)
        else:
            problems.append(f"  {listing}\n  (pass {flag}=True to skip these)")
    if problems:
        raise CheckpointMismatchError(
            f"checkpoint {source.path} does not match the model:\n" + "\n".join(problems)
        )
    if unused:
        logging.info(
            "%s: %d variables not used by this model: %s", source.path, len(unused), unused
        )
    untouched = {id(v) for v in model.weights} - {id(v) for _, v in weights.values()}
    untouched -= {id(v) for v, _ in task_heads.values()}
    if untouched:
        logging.info(
            "%s: %d model variables are task heads kept as initialised", source.path, len(untouched)
        )
    loaded = []
    for name, (row, variable) in weights.items():
        if name in source.shapes and name not in mismatched:
            array = _from_google(source.load(name), row.layout, tuple(variable.shape))
            variable.assign(array.astype(variable.dtype))
            loaded.append(name)
    for path, (variable, saved) in task_heads.items():
        if path not in mismatched:
            variable.assign(saved)
            loaded.append(path)
    return loaded


def _task_head_pairs(
    model: keras.Model,
    source: CheckpointSource,
    weights: dict[str, tuple[_Row, keras.Variable]],
    missing: list[str],
    mismatched: dict[str, str],
) -> dict[str, tuple[keras.Variable, keras.Variable]]:
    """Variable path -> (model variable, checkpoint variable) of the task heads outside the table.

    Only a restored model of the same class (object-based checkpoints) has them; variables are
    matched by Keras path, which layer names fix. Adds to `missing` / `mismatched` in place.
    """
    if source.model is None or type(source.model) is not type(model):
        return {}
    saved = {v.path: v for v in source.model.weights}
    in_table = {id(v) for _, v in weights.values()}
    pairs = {}
    for variable in model.weights:
        if id(variable) in in_table:
            continue
        other = saved.get(variable.path)
        if other is None:
            missing.append(variable.path)
            continue
        if tuple(other.shape) != tuple(variable.shape):
            mismatched[variable.path] = (
                f"{variable.path}: checkpoint {tuple(other.shape)} vs model {tuple(variable.shape)}"
            )
        pairs[variable.path] = (variable, other)
    return pairs


# --- Writing google-research checkpoints ------------------------------------------------------


def save_google_checkpoint(
    model: keras.Model, output_dir: str | os.PathLike, name: str = CHECKPOINT_NAME
) -> str:
    """Writes the model's BERT weights as a google-research checkpoint; returns its prefix.

    Writes `<output_dir>/<name>.{index,data-00000-of-00001}`, the `checkpoint` state file and
    `bert_config.json`. Files are written under a temporary prefix in `output_dir` and renamed
    (data before index), so a reader never sees a half-written checkpoint.
    """
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    weights = get_google_weights(model)
    names = sorted(weights)
    # Default permissions (mkdtemp's 0700 would not matter for the renamed files, but keeps
    # every folder the scripts make readable by others, e.g. a non-root TF Serving container).
    tmp_dir = Path(fileio.make_temp_dir(output_dir, prefix=".tmp-ckpt-"))
    try:
        tmp_prefix = str(tmp_dir / name)
        # SaveV2 writes the TF1 name -> tensor format that tf.compat.v1.train.Saver and
        # tf.train.load_checkpoint read; tf.train.Checkpoint would write object-graph names.
        tf.raw_ops.SaveV2(
            prefix=tmp_prefix,
            tensor_names=names,
            shape_and_slices=[""] * len(names),
            tensors=[tf.constant(weights[n]) for n in names],
        )
        prefix = str(output_dir / name)
        for suffix in (".data-00000-of-00001", ".index"):
            os.replace(tmp_prefix + suffix, prefix + suffix)
    finally:
        for leftover in tmp_dir.iterdir():
            leftover.unlink()
        tmp_dir.rmdir()
    find_encoder(model).bert_config.to_json_file(output_dir / CONFIG_NAME)
    # The `checkpoint` state file (text proto) that tf.train.latest_checkpoint reads; written by
    # hand because tf.compat.v1.train.update_checkpoint_state is deprecated.
    fileio.atomic_write_text(
        output_dir / "checkpoint",
        f'model_checkpoint_path: "{name}"\nall_model_checkpoint_paths: "{name}"\n',
    )
    return prefix


# --- Self-contained training output folders ---------------------------------------------------


def write_model_files(
    output_dir: str | os.PathLike,
    config: BertConfig,
    vocab_file: str | os.PathLike,
    task_info: dict[str, Any] | None = None,
) -> None:
    """Writes `bert_config.json`, `vocab.txt` (a copy of `vocab_file`) and `task_info.json`.

    What a training output folder needs, beside its checkpoints, to be exported or fine-tuned
    further with `--init_checkpoint=<output_dir>` alone. Each file is written atomically with
    default permissions (0666 minus the umask), so a TF Serving container running as another
    user can read them. `task_info` (None: not written) is a JSON object with "task" (one of
    `TASK_INFO_TASKS`) and that task's options, e.g. for run_classifier:

        {"task": "classifier", "task_name": "sst-2", "labels": ["0", "1"], "regression": false,
         "single_segment": true, "do_lower_case": true, "max_seq_length": 128}
    """
    if task_info is not None:
        _check_task_info(task_info, "task_info")
    output_dir = Path(output_dir)
    config.to_json_file(output_dir / CONFIG_NAME)
    # Read through tf.io.gfile: the vocab may lie in a bucket (gs://) like the checkpoint.
    with tf.io.gfile.GFile(os.fspath(vocab_file), "rb") as f:
        vocab = f.read()
    fileio.atomic_write_bytes(output_dir / VOCAB_NAME, vocab)
    if task_info is not None:
        text = json.dumps(task_info, indent=2, ensure_ascii=False) + "\n"
        fileio.atomic_write_text(output_dir / TASK_INFO_NAME, text)


def _check_task_info(info: Any, source: str) -> dict[str, Any]:
    if not isinstance(info, dict):
        raise ValueError(f"{source}: expected a JSON object, got {type(info).__name__}")
    if info.get("task") not in TASK_INFO_TASKS:
        raise ValueError(
            f'{source}: "task" must be one of {list(TASK_INFO_TASKS)}, got {info.get("task")!r}'
        )
    labels = info.get("labels", [])
    if not (isinstance(labels, list) and all(isinstance(label, str) for label in labels)):
        raise ValueError(f'{source}: "labels" must be a list of strings, got {labels!r}')
    for key in ("regression", "single_segment", "do_lower_case", "version_2_with_negative"):
        if not isinstance(info.get(key, False), bool):
            raise ValueError(f'{source}: "{key}" must be true or false, got {info[key]!r}')
    return info


def read_task_info(init_checkpoint: str | os.PathLike) -> tuple[str, dict[str, Any]] | None:
    """(path, contents) of the `task_info.json` beside a checkpoint (folder or prefix), if any.

    Raises ValueError naming the file when it is not a valid task description.
    """
    init_checkpoint = os.fspath(init_checkpoint)
    folder = init_checkpoint if os.path.isdir(init_checkpoint) else os.path.dirname(init_checkpoint)
    path = os.path.join(folder, TASK_INFO_NAME)
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            info = json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a JSON file ({e})") from None
    return path, _check_task_info(info, path)
