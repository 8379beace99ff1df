"""Checkpoint interop: google-research TF1 checkpoints, HF safetensors, our google-named export and
the object-based `tf.train.Checkpoint`s of our training scripts (`training_checkpoint`).

Modules: `names` (the table), `readers` (`read_checkpoint`, `load_pretrained`),
`training_checkpoints` (our scripts' `ckpt-<step>`), `writer` (`save_google_checkpoint`, and
`save_hf_checkpoint`: an HF transformers folder), `folders` (self-contained output folders);
their public names are re-exported here.

One table (`names.table`) lists every BERT variable once with its google-research name, its HF name,
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
from bert_tf.modeling.configs import BertConfig
from bert_tf.data import fetch
from bert_tf.modeling.encoder import build_encoder

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

from bert_tf.checkpoints.folders import (
    check_output_dir,
    read_task_info,
    write_model_files,
)
from bert_tf.checkpoints.names import (
    CHECKPOINT_NAME,
    CONFIG_NAME,
    HEADS_IN,
    HEADS_OUT,
    HF_WEIGHTS_NAME,
    SAME,
    TASK_INFO_NAME,
    TASK_INFO_TASKS,
    TRANSPOSED,
    VOCAB_NAME,
    find_encoder,
    get_google_weights,
    get_hf_weights,
    has_pretraining_heads,
)
from bert_tf.checkpoints.readers import (
    CheckpointMismatchError,
    CheckpointSource,
    checkpoint_folder,
    detect_format,
    fresh_variables,
    load_pretrained,
    read_checkpoint,
)
from bert_tf.checkpoints.training_checkpoints import (
    MODEL_CONFIG_KEY,
    restore_newest_readable,
    training_checkpoint,
)
from bert_tf.checkpoints.writer import (
    save_google_checkpoint,
    save_hf_checkpoint,
)

__all__ = [
    "CHECKPOINT_NAME",
    "CONFIG_NAME",
    "HEADS_IN",
    "HEADS_OUT",
    "HF_WEIGHTS_NAME",
    "MODEL_CONFIG_KEY",
    "SAME",
    "TASK_INFO_NAME",
    "TASK_INFO_TASKS",
    "TRANSPOSED",
    "VOCAB_NAME",
    "CheckpointMismatchError",
    "CheckpointSource",
    "check_output_dir",
    "checkpoint_folder",
    "detect_format",
    "find_encoder",
    "fresh_variables",
    "get_google_weights",
    "get_hf_weights",
    "has_pretraining_heads",
    "load_pretrained",
    "read_checkpoint",
    "read_task_info",
    "restore_newest_readable",
    "save_google_checkpoint",
    "save_hf_checkpoint",
    "training_checkpoint",
    "write_model_files",
]
