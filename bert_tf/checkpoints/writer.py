"""Writing google-research checkpoints (`bert_model.ckpt` + `bert_config.json`) that
google-research/bert's scripts read as `--init_checkpoint`, and HF transformers folders
(`config.json` + `model.safetensors` [+ `vocab.txt`]) that `from_pretrained` reads.
"""

from __future__ import annotations

import json
import os

import keras
import numpy as np
import tensorflow as tf
from safetensors.numpy import save as safetensors_bytes

from bert_tf import fileio
from bert_tf.checkpoints.names import (
    CHECKPOINT_NAME,
    CONFIG_NAME,
    HF_WEIGHTS_NAME,
    VOCAB_NAME,
    find_encoder,
    get_google_weights,
    get_hf_weights,
    has_pretraining_heads,
)
from bert_tf.modeling.encoder import BertEncoder
from bert_tf.modeling.models import BertClassifier, BertPretrainer, BertTokenClassifier


def save_google_checkpoint(
    model: keras.Model, output_dir: str | os.PathLike, name: str = CHECKPOINT_NAME
) -> str:
    """Writes the model's BERT weights as a google-research checkpoint; returns its prefix.

    Writes `<output_dir>/<name>.{index,data-00000-of-00001}`, the `checkpoint` state file and
    `bert_config.json`. Files are written under a temporary prefix in `output_dir` and renamed
    (data before index), so a reader never sees a half-written checkpoint.
    """
    # Strings, not Path: `output_dir` may be a tf.io.gfile URI (gs://), which Path would mangle.
    output_dir = os.fspath(output_dir)
    fileio.makedirs(output_dir)
    weights = get_google_weights(model)
    names = sorted(weights)
    # Default permissions (mkdtemp's 0700 would not matter for the renamed files, but keeps
    # every folder the scripts make readable by others, e.g. a non-root TF Serving container).
    tmp_dir = fileio.make_temp_dir(output_dir, prefix=".tmp-ckpt-")
    try:
        tmp_prefix = os.path.join(tmp_dir, name)
        # SaveV2 writes the TF1 name -> tensor format that tf.compat.v1.train.Saver and
        # tf.train.load_checkpoint read; tf.train.Checkpoint would write object-graph names.
        tf.raw_ops.SaveV2(
            prefix=tmp_prefix,
            tensor_names=names,
            shape_and_slices=[""] * len(names),
            tensors=[tf.constant(weights[n]) for n in names],
        )
        prefix = os.path.join(output_dir, name)
        for suffix in (".data-00000-of-00001", ".index"):
            fileio.replace(tmp_prefix + suffix, prefix + suffix)
    finally:
        fileio.remove_tree(tmp_dir)
    find_encoder(model).bert_config.to_json_file(os.path.join(output_dir, CONFIG_NAME))
    # The `checkpoint` state file (text proto) that tf.train.latest_checkpoint reads; written by
    # hand because tf.compat.v1.train.update_checkpoint_state is deprecated.
    fileio.atomic_write_text(
        os.path.join(output_dir, "checkpoint"),
        f'model_checkpoint_path: "{name}"\nall_model_checkpoint_paths: "{name}"\n',
    )
    return prefix


HF_CONFIG_NAME = "config.json"


def save_hf_checkpoint(
    model: keras.Model,
    output_dir: str | os.PathLike,
    vocab_file: str | os.PathLike | None = None,
) -> str:
    """Writes the model as an HF transformers folder (local or a tf.io.gfile URI); returns it.

    `config.json` and `model.safetensors` (float32, `get_hf_weights`) for the HF class that
    matches: a `BertEncoder` as `BertModel`, a `BertPretrainer` as `BertForPreTraining`, a
    `BertClassifier` as `BertForSequenceClassification` (`num_classes=1`: HF's regression), a
    `BertTokenClassifier` as `BertForTokenClassification`; and a copy of `vocab_file` as
    `vocab.txt`. `transformers.AutoModel*.from_pretrained(output_dir)` loads it, and so does
    our `load_pretrained` (the encoder and pre-training heads; a classifier head is reported as
    unexpected). Each file is written atomically with default permissions.
    """
    config = find_encoder(model).bert_config.to_hf_config()
    if isinstance(model, BertEncoder):
        architecture = "BertModel"
    elif isinstance(model, BertPretrainer) and has_pretraining_heads(model):
        architecture = "BertForPreTraining"
    elif isinstance(model, BertClassifier | BertTokenClassifier):
        architecture = (
            "BertForSequenceClassification"
            if isinstance(model, BertClassifier)
            else "BertForTokenClassification"
        )
        labels = {str(i): f"LABEL_{i}" for i in range(model.head.num_classes)}
        config["id2label"] = labels
        config["label2id"] = {name: int(i) for i, name in labels.items()}
        config["classifier_dropout"] = model.head.dropout
    else:
        raise TypeError(
            "save_hf_checkpoint writes a BertEncoder, BertPretrainer, BertClassifier or "
            f"BertTokenClassifier, got {type(model).__name__}"
        )
    config["architectures"] = [architecture]
    config["torch_dtype"] = "float32"
    weights = get_hf_weights(model)
    tensors = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in sorted(weights.items())}
    output_dir = os.fspath(output_dir)  # not a Path: it would fold gs:// into gs:/
    fileio.makedirs(output_dir)
    fileio.atomic_write_bytes(
        os.path.join(output_dir, HF_WEIGHTS_NAME),
        safetensors_bytes(tensors, metadata={"format": "pt"}),
    )
    fileio.atomic_write_text(
        os.path.join(output_dir, HF_CONFIG_NAME),
        json.dumps(config, indent=2, sort_keys=True) + "\n",
    )
    if vocab_file is not None:
        fileio.atomic_copy(vocab_file, os.path.join(output_dir, VOCAB_NAME))
    return output_dir
