"""Writing google-research checkpoints (`bert_model.ckpt` + `bert_config.json`) that
google-research/bert's scripts read as `--init_checkpoint`.
"""

from __future__ import annotations

import os
from pathlib import Path

import keras
import tensorflow as tf

from bert_tf import fileio
from bert_tf.checkpoints.names import CHECKPOINT_NAME, CONFIG_NAME, find_encoder, get_google_weights


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
