"""Helpers shared by the scripts: files that sit beside an `--init_checkpoint`, text decoding,
flag checks.

A google-research checkpoint folder holds `bert_config.json` (and usually `vocab.txt`); an HF
folder holds `config.json` and `vocab.txt`. Scripts default `--bert_config_file` and
`--vocab_file` to those. `decode_utf8` turns bytes that are not UTF-8 into an error naming the
file and line, so every text input fails the same clear way. `check_positive` gives flags that
must be above zero one message in every script.

Example:

    from bert_tf.flags_util import check_positive, checkpoint_file, decode_utf8, resolve_config
    config = resolve_config("/models/minilm", None)          # reads /models/minilm/config.json
    vocab = checkpoint_file("/models/minilm", "vocab.txt")   # "/models/minilm/vocab.txt"
    text = decode_utf8(open("train.tsv", "rb").read(), "train.tsv")  # ValueError if not UTF-8
    check_positive(FLAGS, ["train_batch_size", "learning_rate"])  # ValueError naming the flag
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from absl import flags

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


def decode_utf8(data: bytes, source: str) -> str:
    """`data` decoded; ValueError naming `source`, the line and the byte if it is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ValueError(
            f"{source}:{line}: not UTF-8 text (byte {data[e.start]:#04x} at offset {e.start}); "
            "expected a UTF-8 file"
        ) from None


# The training-loop flags every training script defines; each must be above zero.
TRAINING_LOOP_FLAGS = (
    "learning_rate",
    "save_checkpoints_steps",
    "iterations_per_loop",
    "log_steps",
    "keep_checkpoint_max",
    "gradient_accumulation_steps",
)


def check_positive(args: flags.FlagValues, names: Iterable[str]) -> None:
    """ValueError naming the first of the flags `names` whose value is not above zero."""
    for name in names:
        if not args[name].value > 0:
            raise ValueError(f"--{name}: expected a positive number, got {args[name].value}")
