"""Converts a BERT checkpoint to google-research naming (`bert_model.ckpt` + `bert_config.json`).

Inputs: an HF folder (config.json + model.safetensors [+ vocab.txt]), a `.safetensors` file, or a
google-research checkpoint prefix/folder (re-written normalised: optimizer slots and global_step
dropped). The weights are loaded into our Keras model (so every name and shape is checked) and
written with `bert_tf.checkpoints.save_google_checkpoint`; `vocab.txt` beside the input is copied.

Example:

```
python -m bert_tf.convert_checkpoint \
    --input ~/.cache/bert_tfx/minilm --output_dir /tmp/minilm_google
# /tmp/minilm_google: bert_model.ckpt.{index,data-00000-of-00001}, checkpoint,
#                     bert_config.json, vocab.txt
```
"""

from __future__ import annotations

import os
import sys

from absl import flags, logging

from bert_tf import checkpoints, fileio, flags_util
from bert_tf.modeling.configs import BertConfig
from bert_tf.modeling.encoder import build_encoder
from bert_tf.modeling.models import BertPretrainer

FLAGS = flags.FLAGS


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines this script's flags (in `flag_values`, absl's global FLAGS by default).

    Called when the module runs as a program, never on import, so tests and other scripts can
    import it; tests run `main` in-process on a fresh FlagValues (see tests/conftest.py).
    """
    flags.DEFINE_string(
        "input",
        None,
        "Checkpoint to convert: google-research prefix/folder, HF folder or .safetensors",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "output_dir",
        None,
        "Folder for bert_model.ckpt.*, bert_config.json, vocab.txt",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "bert_config_file",
        None,
        "bert_config.json of the model (google-research's; default: the input's config.json (HF) "
        "or bert_config.json)",
        flag_values=flag_values,
    )
    flags.DEFINE_enum(
        "format",
        "google",
        ["google"],
        "Output naming: google = google-research names",
        flag_values=flag_values,
    )
    flags.DEFINE_bool(
        "allow_missing",
        False,
        "Write even if the input lacks some BERT variables (they stay random)",
        flag_values=flag_values,
    )


def _find_config(input_path: str, bert_config_file: str | None) -> BertConfig:
    if bert_config_file:
        return BertConfig.from_json_file(bert_config_file)
    folder = checkpoints.checkpoint_folder(input_path)
    hf_config = os.path.join(folder, "config.json")
    if checkpoints.detect_format(input_path) == "hf" and fileio.exists(hf_config):
        return BertConfig.from_hf_json_file(hf_config)
    if fileio.exists(os.path.join(folder, checkpoints.CONFIG_NAME)):
        return BertConfig.from_json_file(os.path.join(folder, checkpoints.CONFIG_NAME))
    raise ValueError(
        f"--bert_config_file is required: no config.json or {checkpoints.CONFIG_NAME} in {folder}"
    )


def convert(
    input_path: str, output_dir: str, bert_config_file: str | None = None, allow_missing=False
) -> str:
    """Converts `input_path` into `output_dir` (google naming); returns the checkpoint prefix."""
    config = _find_config(input_path, bert_config_file)
    source = checkpoints.read_checkpoint(input_path)
    encoder = build_encoder(config)
    # Keep the pre-training heads when the input has them (google-research releases do).
    with_heads = any(name.startswith("cls/") for name in source.shapes)
    model = BertPretrainer(encoder) if with_heads else encoder
    loaded = checkpoints.load_pretrained(model, input_path, allow_missing=allow_missing)
    prefix = checkpoints.save_google_checkpoint(model, output_dir)
    vocab = os.path.join(checkpoints.checkpoint_folder(input_path), checkpoints.VOCAB_NAME)
    if fileio.exists(vocab):
        fileio.atomic_copy(vocab, os.path.join(output_dir, checkpoints.VOCAB_NAME))
    logging.info("wrote %d variables to %s", len(loaded), prefix)
    return prefix


def main(argv):
    del argv
    for flag in ("input", "output_dir"):
        if not FLAGS[flag].value:
            sys.exit(f"error: --{flag} is required")
    try:
        prefix = convert(FLAGS.input, FLAGS.output_dir, FLAGS.bert_config_file, FLAGS.allow_missing)
    except (ValueError, FileNotFoundError) as e:
        sys.exit(f"error: {e}")
    print(prefix)


if __name__ == "__main__":
    define_flags()
    flags_util.run(main)
