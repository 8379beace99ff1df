"""The model a script starts from: its config and vocab, resolved and checked in one place.

google-research scripts take `--bert_config_file --vocab_file --init_checkpoint
--max_seq_length`; ours default the first two to the files beside `--init_checkpoint` (a
google-research folder has `bert_config.json`, an HF folder `config.json`, both `vocab.txt`).
`resolve` is the one implementation every script (run_classifier, run_squad, extract_features,
serving.export) uses, so they all fail the same way on the same mistake, with a one-line
ValueError naming the flag and the file it disagrees with:

- no config given or found beside the checkpoint;
- `--max_seq_length` outside 3..`max_position_embeddings`;
- no vocab given or found, or a vocab that is not a BERT vocab (`tokenization.load_vocab`);
- a vocab whose size is not the config's `vocab_size` (the wrong vocab for the checkpoint:
  every google-research and HF BERT checkpoint has exactly one token per embedding row).

Example:

    from bert_tf import model_source
    source = model_source.resolve("/models/minilm", max_seq_length=128)
    source.config.num_hidden_layers   # 6, from /models/minilm/config.json
    source.vocab_file                 # "/models/minilm/vocab.txt"
"""

from __future__ import annotations

import dataclasses
import os

from bert_tf import fileio
from bert_tf.checkpoints import CONFIG_NAME, VOCAB_NAME, checkpoint_folder
from bert_tf.modeling.configs import BertConfig
from bert_tf.text.tokenization import load_vocab

HF_CONFIG_NAME = "config.json"


def checkpoint_file(init_checkpoint: str, name: str) -> str | None:
    """`name` beside a checkpoint (HF folder, checkpoint folder or prefix), if it exists."""
    candidate = os.path.join(checkpoint_folder(init_checkpoint), name)
    return candidate if fileio.exists(candidate) else None


def config_file(init_checkpoint: str | None, bert_config_file: str | None) -> str:
    """--bert_config_file, else the checkpoint's bert_config.json, else its HF config.json."""
    path = bert_config_file or (
        init_checkpoint
        and (
            checkpoint_file(init_checkpoint, CONFIG_NAME)
            or checkpoint_file(init_checkpoint, HF_CONFIG_NAME)
        )
    )
    if not path:
        raise ValueError(
            f"--bert_config_file: not given and no {CONFIG_NAME}/{HF_CONFIG_NAME} beside "
            f"--init_checkpoint={init_checkpoint}"
        )
    return path


def resolve_config(init_checkpoint: str | None, bert_config_file: str | None) -> BertConfig:
    """The BertConfig of `config_file(...)` (google-research or HF format, told by its keys)."""
    return BertConfig.from_json_file(config_file(init_checkpoint, bert_config_file))


def check_max_seq_length(
    max_seq_length: int, config: BertConfig, config_path: str, origin: str = ""
) -> None:
    """ValueError unless 3 <= max_seq_length <= the config's max_position_embeddings; `origin`
    says where a value that was not a flag came from (" (from .../task_info.json)")."""
    if not 3 <= max_seq_length <= config.max_position_embeddings:
        raise ValueError(
            f"--max_seq_length: expected 3..{config.max_position_embeddings} "
            f"(max_position_embeddings in {config_path}), got {max_seq_length}{origin}"
        )


def check_vocab_size(vocab_file: str, vocab_size: int, config: BertConfig, config_path: str):
    """ValueError unless the vocab has exactly the config's vocab_size tokens."""
    if vocab_size != config.vocab_size:
        raise ValueError(
            f"--vocab_file={vocab_file} has {vocab_size} tokens but {config_path} has "
            f"vocab_size {config.vocab_size}: the vocab of another model?"
        )


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """A resolved model source: the config, the files it came from and the vocab's tokens."""

    config: BertConfig
    config_file: str
    vocab_file: str
    vocab: list[str]


def resolve(
    init_checkpoint: str | None,
    bert_config_file: str | None = None,
    vocab_file: str | None = None,
    max_seq_length: int | None = None,
    max_seq_length_origin: str = "",
) -> ModelSource:
    """The checked config and vocab of a script's flags (see the module docstring);
    `max_seq_length=None` skips its check."""
    config_path = config_file(init_checkpoint, bert_config_file)
    config = BertConfig.from_json_file(config_path)
    if max_seq_length is not None:
        check_max_seq_length(max_seq_length, config, config_path, max_seq_length_origin)
    vocab_path = vocab_file or (init_checkpoint and checkpoint_file(init_checkpoint, VOCAB_NAME))
    if not vocab_path:
        raise ValueError(
            f"--vocab_file: not given and no {VOCAB_NAME} beside --init_checkpoint={init_checkpoint}"
        )
    try:
        vocab = load_vocab(vocab_path)
    except FileNotFoundError:
        raise ValueError(f"--vocab_file={vocab_path}: no such file") from None
    check_vocab_size(vocab_path, len(vocab), config, config_path)
    return ModelSource(config, config_path, vocab_path, vocab)
