"""Defaults of the pipelines: names, module functions, Beam args and every tunable option.

`PretrainingOptions` / `ClassificationOptions` / `SquadOptions` hold what the components are
configured with; `run.py` flags of the same names override them. Options that reach a module
function travel in the component's `custom_config` (plain JSON values), so a changed option also
changes the cache key.

Example:

    from tfx_pipeline import configs
    options = configs.PretrainingOptions(preset="tiny", train_steps=20, max_seq_length=64)
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

PRETRAINING_PIPELINE_NAME = "bert-pretraining"
CLASSIFICATION_PIPELINE_NAME = "bert-classification"
SQUAD_PIPELINE_NAME = "bert-squad"

# Transform's preprocessing_fn and Trainer's run_fn by import path (modules/ holds them): the
# local venv and the image both have this package, so compiling for Kubeflow/Vertex builds and
# uploads no module wheel and the spec names no file of the compiling machine.
PRETRAINING_PREPROCESSING_FN = "tfx_pipeline.modules.pretraining.preprocessing_fn"
PRETRAINING_RUN_FN = "tfx_pipeline.modules.pretraining.run_fn"
CLASSIFICATION_PREPROCESSING_FN = "tfx_pipeline.modules.classification.preprocessing_fn"
CLASSIFICATION_RUN_FN = "tfx_pipeline.modules.classification.run_fn"
SQUAD_RUN_FN = "tfx_pipeline.modules.squad.run_fn"

# The image's fetch cache (Dockerfile: BERT_TFX_CACHE) and the default vocab in it, which the
# Kubeflow/Vertex runners use when --vocab_file is unset.
IMAGE_CACHE_DIR = "/opt/bert_tfx"
IMAGE_VOCAB_FILE = IMAGE_CACHE_DIR + "/minilm/vocab.txt"

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
    max_decrease: float = 0.01  # allowed accuracy drop below the model serving now


@dataclasses.dataclass
class ClassificationOptions(TrainingOptions):
    """Fine-tuning options; the task's reader is `bert_tf.glue`'s."""

    task_name: str = "sst-2"
    learning_rate: float = 2e-5
    # Blessing: the task's main metric (its first `bert_tf.glue` metric: accuracy, f1, mcc or
    # pearson) must reach min_metric and may drop at most max_decrease below the serving model's.
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
    # v2.0: the pushed model answers "" when its null score beats the best span by more than
    # this (google-research `run_squad.py`'s flag and default).
    null_score_diff_threshold: float = 0.0
    # Blessing: the official F1 (percent) on the dev file must reach min_f1 and may drop at
    # most max_f1_decrease points below the serving model's on the same file.
    min_f1: float = 0.0
    max_f1_decrease: float = 1.0


def modules_digest() -> str:
    """sha256 of modules/*.py. TFX fingerprints a module file's folder into the cache key but not
    a function named by import path: custom_config carries this instead, so that editing a module
    still reruns its Transform and Trainer (as with the module files before)."""
    digest = hashlib.sha256()
    for path in sorted((Path(__file__).parent / "modules").glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def custom_config(options: TrainingOptions, **extra) -> dict:
    """The options as a module function's custom_config (JSON values), plus `extra` entries and
    the modules' digest."""
    return {**dataclasses.asdict(options), "modules_digest": modules_digest(), **extra}
