"""Defaults of the pipelines: names, module files, Beam args and every tunable option.

`PretrainingOptions` / `ClassificationOptions` / `SquadOptions` hold what the components are
configured with; `run.py` flags of the same names override them. Options that reach a module file travel in the
component's `custom_config` (plain JSON values), so a changed option also changes the cache key.

Example:

    from tfx_pipeline import configs
    options = configs.PretrainingOptions(preset="tiny", train_steps=20, max_seq_length=64)
"""

from __future__ import annotations

import dataclasses
import os

PRETRAINING_PIPELINE_NAME = "bert-pretraining"
CLASSIFICATION_PIPELINE_NAME = "bert-classification"
SQUAD_PIPELINE_NAME = "bert-squad"

# Module files sit in a folder of their own: TFX bundles every .py of that folder.
MODULES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "modules")
PRETRAINING_MODULE_FILE = os.path.join(MODULES_DIR, "pretraining.py")
CLASSIFICATION_MODULE_FILE = os.path.join(MODULES_DIR, "classification.py")
SQUAD_MODULE_FILE = os.path.join(MODULES_DIR, "squad.py")

# Beam DirectRunner on every core of the machine; Dataflow/Flink/Spark args replace these.
DEFAULT_BEAM_PIPELINE_ARGS = ("--direct_running_mode=multi_processing", "--direct_num_workers=0")


@dataclasses.dataclass
class TrainingOptions:
    """Trainer options shared by both pipelines (see `bert_tf.training.Trainer`)."""

    preset: str = "base"
    train_steps: int = 10_000
    eval_steps: int = 0  # evaluator batches; 0 = the whole eval split
    train_batch_size: int = 32
    eval_batch_size: int = 32
    learning_rate: float = 1e-4
    warmup_proportion: float = 0.1
    precision: str = "float32"  # or mixed_float16 / mixed_bfloat16
    jit_compile: bool = False  # XLA
    distribution_strategy: str = "one_device"
    steps_per_loop: int = 100
    random_seed: int = 12345
    max_seq_length: int = 128
    do_lower_case: bool = True


@dataclasses.dataclass
class PretrainingOptions(TrainingOptions):
    """create_pretraining_data's options, plus the evaluator's blessing thresholds."""

    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    do_whole_word_mask: bool = False
    dupe_factor: int = 10
    short_seq_prob: float = 0.1
    init_checkpoint: str = ""  # optional warm start (any format load_pretrained reads)
    min_masked_lm_accuracy: float = 0.0
    min_next_sentence_accuracy: float = 0.0
    max_decrease: float = 0.01  # allowed accuracy drop below the latest blessed model


@dataclasses.dataclass
class ClassificationOptions(TrainingOptions):
    """Fine-tuning options; the task's reader is `bert_tf.glue`'s."""

    task_name: str = "sst-2"
    learning_rate: float = 2e-5
    # Blessing: the task's main metric (its first `bert_tf.glue` metric: accuracy, f1, mcc or
    # pearson) must reach min_metric and may drop at most max_decrease below the last blessed.
    min_metric: float = 0.0
    max_decrease: float = 0.01


@dataclasses.dataclass
class SquadOptions(TrainingOptions):
    """SQuAD fine-tuning: google-research `run_squad.py`'s window options and defaults."""

    learning_rate: float = 5e-5
    max_seq_length: int = 384
    doc_stride: int = 128
    max_query_length: int = 64
    max_answer_length: int = 30
    version_2_with_negative: bool = False
    # Blessing: the official F1 (percent) on the dev file must reach min_f1 and may drop at
    # most max_f1_decrease points below the latest blessed model's on the same file.
    min_f1: float = 0.0
    max_f1_decrease: float = 1.0


def custom_config(options: TrainingOptions, **extra) -> dict:
    """The options as a module file's custom_config (JSON values), plus `extra` entries."""
    return {**dataclasses.asdict(options), **extra}
