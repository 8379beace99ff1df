"""Self-contained training output folders: `bert_config.json`, `vocab.txt` and `task_info.json`
beside the `ckpt-<step>` files, so `serving.export --init_checkpoint=<output_dir>` needs no other
flag; and the check that a folder being resumed holds the same model.
"""

from __future__ import annotations

import json
import os
from typing import Any

import tensorflow as tf

from bert_tf import fileio
from bert_tf.checkpoints.names import CONFIG_NAME, TASK_INFO_NAME, TASK_INFO_TASKS, VOCAB_NAME
from bert_tf.checkpoints.readers import checkpoint_folder, config_diffs
from bert_tf.modeling.configs import BertConfig


def check_output_dir(output_dir: str | os.PathLike, config: BertConfig) -> None:
    """Raises ValueError if `output_dir` holds training checkpoints of another architecture.

    Judged by the `bert_config.json` the training scripts write beside their checkpoints:
    resuming would fail on the first mismatched variable, and writing the new config there
    would mislabel the checkpoints already in it.
    """
    config_file = os.path.join(output_dir, CONFIG_NAME)
    if not (tf.train.latest_checkpoint(os.fspath(output_dir)) and fileio.exists(config_file)):
        return
    if diffs := config_diffs(config, BertConfig.from_json_file(config_file)):
        raise ValueError(
            f"{output_dir} holds training checkpoints of another model ({'; '.join(diffs)}, "
            f"per its {CONFIG_NAME}): resume with the same config, or use a new output folder"
        )


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
    output_dir = os.fspath(output_dir)  # not a Path: it would fold gs:// into gs:/
    config.to_json_file(os.path.join(output_dir, CONFIG_NAME))
    # The vocab may lie in a bucket (gs://) like the checkpoint.
    fileio.atomic_write_bytes(os.path.join(output_dir, VOCAB_NAME), fileio.read_bytes(vocab_file))
    if task_info is not None:
        text = json.dumps(task_info, indent=2, ensure_ascii=False) + "\n"
        fileio.atomic_write_text(os.path.join(output_dir, TASK_INFO_NAME), text)


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
    path = os.path.join(checkpoint_folder(init_checkpoint), TASK_INFO_NAME)
    if not fileio.exists(path):
        return None
    try:
        info = json.loads(fileio.read_text(path))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a JSON file ({e})") from None
    return path, _check_task_info(info, path)
