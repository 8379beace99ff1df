"""Flag defaults shared by the scripts: files that sit beside an `--init_checkpoint`.

A google-research checkpoint folder holds `bert_config.json` (and usually `vocab.txt`); an HF
folder holds `config.json` and `vocab.txt`. Scripts default `--bert_config_file` and
`--vocab_file` to those.

Example:

    from bert_tf.flags_util import checkpoint_file, resolve_config
    config = resolve_config("/models/minilm", None)          # reads /models/minilm/config.json
    vocab = checkpoint_file("/models/minilm", "vocab.txt")   # "/models/minilm/vocab.txt"
"""

from __future__ import annotations

import os

from bert_tf.configs import BertConfig


def checkpoint_file(init_checkpoint: str, name: str) -> str | None:
    """`name` beside a checkpoint (HF folder, checkpoint folder or prefix), if it exists."""
    folder = init_checkpoint if os.path.isdir(init_checkpoint) else os.path.dirname(init_checkpoint)
    candidate = os.path.join(folder, name)
    return candidate if os.path.exists(candidate) else None


def resolve_config(init_checkpoint: str | None, bert_config_file: str | None) -> BertConfig:
    """The BertConfig from --bert_config_file, else the checkpoint's bert_config.json/config.json."""
    if bert_config_file:
        return BertConfig.from_json_file(bert_config_file)
    if init_checkpoint:
        if path := checkpoint_file(init_checkpoint, "bert_config.json"):
            return BertConfig.from_json_file(path)
        if path := checkpoint_file(init_checkpoint, "config.json"):
            return BertConfig.from_hf_json_file(path)
    raise ValueError(
        f"--bert_config_file: not given and no bert_config.json/config.json beside "
        f"--init_checkpoint={init_checkpoint}"
    )
