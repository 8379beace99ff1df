"""Reading any supported checkpoint (google-research TF1, HF safetensors, our object-based
training checkpoints) as google-named arrays (`read_checkpoint`), and loading it into a model
(`load_pretrained`) with one error listing every mismatch.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Callable

import keras
import numpy as np
import safetensors.numpy
import tensorflow as tf
from absl import logging

from bert_tf import fileio
from bert_tf.checkpoints.names import (
    ARCHITECTURE_FIELDS,
    CONFIG_NAME,
    GOOGLE_IGNORED,
    HF_IGNORED,
    HF_RENAMES,
    HF_WEIGHTS_NAME,
    Row,
    find_encoder,
    from_google,
    get_google_weights,
    google_shape,
    model_weights,
    table,
)
from bert_tf.checkpoints.training_checkpoints import MODEL_CONFIG_KEY, MODEL_CONFIG_TENSOR
from bert_tf.modeling.configs import (
    GELU_ERF_NAMES,
    GELU_TANH_NAMES,
    BertConfig,
    canonical_activation,
)

# Imported for its side effect: the task model classes register themselves for Keras
# deserialization (object-based checkpoints store the model's config).
from bert_tf.modeling import models  # noqa: F401  isort: skip


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
    reader = _load_checkpoint(path)
    shapes = {
        name: tuple(shape)
        for name, shape in reader.get_variable_to_shape_map().items()
        if not GOOGLE_IGNORED.search(name)
    }
    config_file = os.path.join(checkpoint_folder(path), CONFIG_NAME)
    config = BertConfig.from_json_file(config_file) if fileio.exists(config_file) else None
    return CheckpointSource(str(path), shapes, reader.get_tensor, [], config)


def checkpoint_folder(path: str | os.PathLike) -> str:
    """The folder of a checkpoint given as a folder, or as a prefix or file in one (local or a
    URI: where its config, vocab and task_info.json lie)."""
    path = os.fspath(path)
    return path if _is_folder(path) else os.path.dirname(path)


def _is_folder(path: str) -> bool:
    """A folder, not a checkpoint prefix: on an object store (and ram://) a prefix such as
    `bert_model.ckpt` also looks like a folder, the name its files start with."""
    return not tf.io.gfile.exists(path + ".index") and fileio.isdir(path)


def _load_checkpoint(path: str):
    """`tf.train.load_checkpoint` of a folder (its latest checkpoint) or a prefix. Not that
    function itself: it takes a prefix that a file system reports as a folder (ram://'s
    `isdir` is true for any name that files start with) for a folder."""
    prefix = tf.train.latest_checkpoint(path) if _is_folder(path) else path
    if prefix is None:
        raise ValueError(f"{path}: no checkpoint in this folder (no TF 'checkpoint' state file)")
    return tf.compat.v1.train.NewCheckpointReader(prefix)


def _read_hf(path: str) -> CheckpointSource:
    weights_file = os.path.join(path, HF_WEIGHTS_NAME) if _is_folder(path) else path
    if fileio.is_remote(weights_file):  # a bucket: the bytes through tf.io.gfile
        tensors = safetensors.numpy.load(fileio.read_bytes(weights_file))
    else:  # memory-mapped, not read twice into memory
        tensors = safetensors.numpy.load_file(weights_file)
    by_hf = {row.hf: row for row in table(_count_hf_layers(tensors))}
    arrays: dict[str, np.ndarray] = {}
    unmapped = []
    for hf_name, array in tensors.items():
        name = hf_name.removeprefix("bert.")
        for old, new in HF_RENAMES:
            if "LayerNorm" in name and name.endswith(old):
                name = name[: -len(old)] + new
        if HF_IGNORED.search(name):
            continue
        row = by_hf.get(name)
        if row is None:
            unmapped.append(hf_name)
        else:
            arrays[row.google] = array.T if row.hf_transposed else array
    config_file = os.path.join(os.path.dirname(weights_file), "config.json")
    config = BertConfig.from_hf_json_file(config_file) if fileio.exists(config_file) else None
    return CheckpointSource(
        str(path), {k: v.shape for k, v in arrays.items()}, arrays.__getitem__, unmapped, config
    )


def _count_hf_layers(tensors: dict[str, np.ndarray]) -> int:
    indices = [int(m.group(1)) for k in tensors if (m := re.search(r"encoder\.layer\.(\d+)\.", k))]
    return max(indices, default=-1) + 1


def _read_object(path: str) -> CheckpointSource:
    """Rebuilds the checkpointed model from its stored config and restores it by object graph."""
    reader = _load_checkpoint(path)
    if not reader.has_tensor(MODEL_CONFIG_TENSOR):
        raise ValueError(
            f"{path}: object-based checkpoint without '{MODEL_CONFIG_KEY}': not written by "
            "bert_tf.checkpoints.training_checkpoint"
        )
    config = json.loads(reader.get_tensor(MODEL_CONFIG_TENSOR).decode("utf-8"))
    model = keras.saving.deserialize_keras_object(config)
    prefix = tf.train.latest_checkpoint(path) if _is_folder(path) else path
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
    if _is_folder(path):
        if fileio.exists(os.path.join(path, HF_WEIGHTS_NAME)):
            return "hf"
        if tf.train.latest_checkpoint(path) is None:
            raise ValueError(
                f"{path}: folder has neither {HF_WEIGHTS_NAME} nor a TF 'checkpoint' state file"
            )
        path = tf.train.latest_checkpoint(path)
    elif path.endswith(".safetensors"):
        if not fileio.exists(path):
            raise FileNotFoundError(f"{path}: no such safetensors file")
        return "hf"
    elif not tf.io.gfile.exists(path + ".index"):
        raise FileNotFoundError(
            f"{path}: not a checkpoint prefix (no {path}.index), HF folder or .safetensors file"
        )
    names = _load_checkpoint(path).get_variable_to_shape_map()
    if any(name.startswith("bert/") for name in names):
        return "google"
    if "_CHECKPOINTABLE_OBJECT_GRAPH" in names:
        return "object"
    raise ValueError(f"{path}: TF checkpoint without any google-research 'bert/...' variable")


def read_checkpoint(path: str | os.PathLike) -> CheckpointSource:
    """Opens any supported checkpoint as google-named arrays (see `detect_format`)."""
    return _READERS[detect_format(path)](str(path))


def config_diffs(model_config: BertConfig, checkpoint_config: BertConfig) -> list[str]:
    def value(config: BertConfig, field: str):
        # Aliases of one activation ("gelu_tanh" = "gelu_new") are the same architecture.
        raw = getattr(config, field)
        return canonical_activation(raw) if field == "hidden_act" else raw

    return [
        f"{field}: model {getattr(model_config, field)!r} vs checkpoint "
        f"{getattr(checkpoint_config, field)!r}"
        for field in ARCHITECTURE_FIELDS
        if value(model_config, field) != value(checkpoint_config, field)
    ]


def _check_config(model_config: BertConfig, source: CheckpointSource) -> None:
    if source.config is None:
        return
    checkpoint_config = source.config
    chosen, own = model_config.hidden_act, checkpoint_config.hidden_act
    # The GELU form (erf or tanh) is not in the weights, and google's checkpoints say "gelu"
    # (erf) beside code that computes the tanh form: the model's config (an explicit
    # --bert_config_file) chooses it. Any other difference is another model.
    gelus = {*GELU_ERF_NAMES, *GELU_TANH_NAMES}
    gelu_form = (
        chosen in gelus
        and own in gelus
        and canonical_activation(chosen) != canonical_activation(own)
    )
    if gelu_form:
        checkpoint_config = dataclasses.replace(checkpoint_config, hidden_act=chosen)
    if diffs := config_diffs(model_config, checkpoint_config):
        raise ValueError(f"{source.path}: config differs from the model's: " + "; ".join(diffs))
    if gelu_form:
        logging.info(
            "%s: computing hidden_act %r (%s GELU) as the given config says, not %r of the "
            "checkpoint's own config: both on the same weights",
            source.path,
            chosen,
            "tanh-approximated" if chosen in GELU_TANH_NAMES else "exact erf",
            own,
        )


@dataclasses.dataclass
class _LoadPlan:
    """What `load_pretrained` would do: the model's table weights, the checkpoint's task heads
    for it, and every problem found."""

    source: CheckpointSource
    weights: dict[str, tuple[Row, keras.Variable]]
    task_heads: dict[str, tuple[keras.Variable, keras.Variable]]
    missing: list[str]
    fresh_heads: list[str]  # pre-training head variables missing, started fresh
    unused: list[str]
    unexpected: list[str]
    mismatched: dict[str, str]  # name -> "checkpoint <shape> vs model <shape>"

    def loaded_variables(self) -> list[keras.Variable]:
        """The model variables the checkpoint sets."""
        return [
            variable
            for name, (_, variable) in self.weights.items()
            if name in self.source.shapes and name not in self.mismatched
        ] + [
            variable
            for path, (variable, _) in self.task_heads.items()
            if path not in self.mismatched
        ]


def _plan(model: keras.Model, source: CheckpointSource, fresh_heads: bool) -> _LoadPlan:
    encoder = find_encoder(model)
    _check_config(encoder.bert_config, source)
    weights = model_weights(model)
    rows = table(encoder.bert_config.num_hidden_layers)
    known = {row.google for row in rows}
    head_names = {row.google for row in rows if row.scope == "pretraining"}
    missing = sorted(set(weights) - set(source.shapes))
    fresh = [name for name in missing if name in head_names] if fresh_heads else []
    missing = [name for name in missing if name not in fresh]
    mismatched = {}
    for name in sorted(set(weights) & set(source.shapes)):
        row, variable = weights[name]
        expected = google_shape(variable.shape, row.layout)
        if tuple(source.shapes[name]) != expected:
            mismatched[name] = (
                f"{name}: checkpoint {tuple(source.shapes[name])} vs model {expected}"
            )
    task_heads = _task_head_pairs(model, source, weights, missing, mismatched)
    return _LoadPlan(
        source=source,
        weights=weights,
        task_heads=task_heads,
        missing=missing,
        fresh_heads=fresh,
        unused=sorted((set(source.shapes) & known) - set(weights)),
        unexpected=sorted(source.unmapped + list(set(source.shapes) - known)),
        mismatched=mismatched,
    )


def load_pretrained(
    model: keras.Model,
    init_checkpoint: str | os.PathLike,
    allow_missing: bool = False,
    allow_unexpected: bool = False,
    skip_mismatch: bool = False,
    fresh_heads: bool = False,
) -> list[str]:
    """Loads BERT weights into a `BertEncoder` or task model; returns the loaded google names.

    `init_checkpoint` is a google-research checkpoint prefix or folder (ours are the same
    format), an HF folder (config.json + model.safetensors), a `.safetensors` file, or a
    `training_checkpoint` prefix or folder (latest checkpoint). The pre-training heads are
    loaded when `model` has them (`BertPretrainer`); a checkpoint's heads that the model lacks
    are skipped and logged, as are task heads the table does not cover, except that a
    `training_checkpoint` of the same task model class also restores its task heads.

    `fresh_heads=True` (training: google-research's run_pretraining does the same) lets the
    pre-training heads' variables the checkpoint lacks (an encoder-only checkpoint such as an
    HF `BertModel`, or an HF `BertForMaskedLM` without the next-sentence head) keep their
    initial values, named in one log line; the masked-LM decoder is the word embeddings, so it
    is loaded with them.

    Raises `CheckpointMismatchError` listing every variable missing in the checkpoint, every
    checkpoint variable the model cannot take, and every shape mismatch (checkpoint vs model),
    unless the matching `allow_missing` / `allow_unexpected` / `skip_mismatch` is set, in which
    case those variables are skipped and logged. Raises ValueError when the checkpoint's own
    config (bert_config.json / config.json beside it, or the one a training checkpoint stores)
    differs in architecture; the GELU form alone (erf or tanh) is the model's config's choice,
    logged in one line.
    """
    plan = _plan(model, read_checkpoint(init_checkpoint), fresh_heads)
    source = plan.source
    problems = []
    for items, allowed, what, flag in (
        (plan.missing, allow_missing, "missing in checkpoint", "allow_missing"),
        (plan.unexpected, allow_unexpected, "unexpected in checkpoint", "allow_unexpected"),
        (list(plan.mismatched.values()), skip_mismatch, "shape mismatch", "skip_mismatch"),
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
    if plan.fresh_heads:
        logging.info(
            "%s has no %s: %d pre-training head variables start fresh",
            source.path,
            ", ".join(plan.fresh_heads),
            len(plan.fresh_heads),
        )
    if plan.unused:
        logging.info(
            "%s: %d variables not used by this model: %s",
            source.path,
            len(plan.unused),
            plan.unused,
        )
    untouched = {id(v) for v in model.weights} - {id(v) for _, v in plan.weights.values()}
    untouched -= {id(v) for v, _ in plan.task_heads.values()}
    if untouched:
        logging.info(
            "%s: %d model variables are task heads kept as initialised", source.path, len(untouched)
        )
    loaded = []
    for name, (row, variable) in plan.weights.items():
        if name in source.shapes and name not in plan.mismatched:
            array = from_google(source.load(name), row.layout, tuple(variable.shape))
            variable.assign(array.astype(variable.dtype))
            loaded.append(name)
    for path, (variable, saved) in plan.task_heads.items():
        if path not in plan.mismatched:
            variable.assign(saved)
            loaded.append(path)
    return loaded


def fresh_variables(model: keras.Model, init_checkpoint: str | os.PathLike) -> list[keras.Variable]:
    """`model`'s trainable variables that `load_pretrained(model, init_checkpoint,
    fresh_heads=True)` leaves as initialised: task heads and the pre-training heads the
    checkpoint lacks. Reads only the checkpoint's names and shapes (a resumed run asks again)."""
    plan = _plan(model, read_checkpoint(init_checkpoint), fresh_heads=True)
    loaded = {id(v) for v in plan.loaded_variables()}
    return [v for v in model.trainable_variables if id(v) not in loaded]


def _task_head_pairs(
    model: keras.Model,
    source: CheckpointSource,
    weights: dict[str, tuple[Row, keras.Variable]],
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
