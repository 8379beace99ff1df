"""Defaults of the pipelines: names, module functions, Beam args and every tunable option.

`PretrainingOptions` / `ClassificationOptions` / `SquadOptions` hold what the components are
configured with; `run.py` defines one flag per field, of the same name (`option_specs()`: help,
allowed values and each pipeline's default come from the field's `option(...)` here, the one
place an option is described). Options that reach a module function travel in the component's
`custom_config` (plain JSON values), so a changed option also changes the cache key.

Training length: pretraining trains `train_steps` steps (default 10,000); fine-tuning
(classify, squad) trains `num_train_epochs` passes over the training examples (default 3, as
google-research's `run_classifier.py` / `run_squad.py`): the Trainer computes
ceil(epochs × train examples / train_batch_size) steps once ExampleGen has counted them; a
`train_steps` above 0 overrides that.

This module imports nothing heavy (no TensorFlow, no TFX): `python -m tfx_pipeline.run` checks
its flags against it before importing those.

Example:

    from tfx_pipeline import configs
    options = configs.PretrainingOptions(preset="tiny", train_steps=20, max_seq_length=64)
    configs.check_options("pretrain", options)  # [] (or one line per bad value)
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any

from bert_tf.options import (
    DistributionOptions,
    FineTuningLoopOptions,
    ModelSourceOptions,
    PrecisionOptions,
    PresetOptions,
    SharedOption,
    TrainingLoopOptions,
    option,
    same_as,
    shared_options,
    shown,
)
from bert_tf.tasks.options import ClassificationOptions as TaskClassificationOptions
from bert_tf.tasks.options import PretrainingDataOptions
from bert_tf.tasks.options import SquadOptions as TaskSquadOptions
from tfx_pipeline.tuning_grids import tuning_errors

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
CLASSIFICATION_TUNER_FN = "tfx_pipeline.modules.classification.tuner_fn"
SQUAD_TUNER_FN = "tfx_pipeline.modules.squad.tuner_fn"

# The image's fetch cache (Dockerfile: BERT_TFX_CACHE) and the default vocab in it, which the
# Kubeflow/Vertex runners use when --vocab_file is unset.
IMAGE_CACHE_DIR = "/opt/bert_tfx"
IMAGE_VOCAB_FILE = IMAGE_CACHE_DIR + "/minilm/vocab.txt"

# Beam DirectRunner on every core of the machine; Dataflow/Flink/Spark args replace these.
DEFAULT_BEAM_PIPELINE_ARGS = ("--direct_running_mode=multi_processing", "--direct_num_workers=0")
# In this process, for small data: starting a worker process per core for every Beam component
# (each imports TensorFlow and TFX again) costs more than it saves. Measured on 2 cores
# (bench/results/2026-12-07_pipeline.json), the classify pipeline on 1,000 reviews, per core ->
# in this process: ExampleGen 29 -> 1 s, StatisticsGen 29 -> 3 s, Transform 51 -> 23 s,
# Evaluator 38 -> 18 s.
IN_MEMORY_BEAM_PIPELINE_ARGS = ("--direct_running_mode=in_memory", "--direct_num_workers=1")
# local/beam runners without --beam_pipeline_args: a local --data_root holding less than this
# runs Beam in this process (IN_MEMORY_BEAM_PIPELINE_ARGS), more on every core.
IN_MEMORY_MAX_DATA_BYTES = 64 << 20


@dataclasses.dataclass
class TrainingOptions:
    """Trainer options shared by all pipelines (see `bert_tf.training.Trainer`)."""

    preset: str = same_as(
        PresetOptions,
        "preset",
        "base",
        note="classify/squad use the --init_checkpoint's config when it has one",
    )
    train_steps: int = option(
        0,
        "Training steps. classify/squad: 0 trains --num_train_epochs epochs instead "
        "(ceil(epochs x training examples / --train_batch_size), counted after ExampleGen)",
        minimum=0,
    )
    eval_steps: int = option(
        0,
        "Batches the pretraining evaluator scores (0: the whole eval split; the classify and "
        "squad evaluators always score all of it)",
        minimum=0,
    )
    train_batch_size: int = same_as(TrainingLoopOptions, "train_batch_size")
    eval_batch_size: int = option(32, "Examples per evaluation batch (the evaluators')", minimum=1)
    learning_rate: float = same_as(TrainingLoopOptions, "learning_rate", 1e-4)
    head_learning_rate_multiplier: float = same_as(
        TrainingLoopOptions, "head_learning_rate_multiplier"
    )
    optimizer: str = same_as(TrainingLoopOptions, "optimizer")
    optimizer_recipe: str = same_as(TrainingLoopOptions, "optimizer_recipe")
    gradient_accumulation_steps: int = same_as(TrainingLoopOptions, "gradient_accumulation_steps")
    all_reduce_dtype: str = same_as(TrainingLoopOptions, "all_reduce_dtype")
    warmup_proportion: float = same_as(FineTuningLoopOptions, "warmup_proportion")
    use_mixed_precision: bool = same_as(PrecisionOptions, "use_mixed_precision")
    mixed_precision_dtype: str = same_as(PrecisionOptions, "mixed_precision_dtype")
    use_xla: bool = same_as(
        PrecisionOptions,
        "use_xla",
        aliases=("jit_compile",),
        note="in the pipelines only the Trainer's training step",
    )
    distribution_strategy: str = same_as(DistributionOptions, "distribution_strategy")
    iterations_per_loop: int = same_as(
        DistributionOptions,
        "iterations_per_loop",
        100,
        note="also the steps between progress lines",
    )
    seed: int = same_as(TrainingLoopOptions, "seed", 12345, aliases=("random_seed",))
    max_seq_length: int = same_as(ModelSourceOptions, "max_seq_length")
    do_lower_case: bool = same_as(ModelSourceOptions, "do_lower_case")
    # ExampleValidator's drift check (not in custom_config: the model does not depend on it).
    drift_linf_threshold: float = option(
        0.1,
        "ExampleValidator: largest L-infinity distance of a checked feature's value shares from "
        "the previous accepted span's (categorical statistics; 0: not checked). Checked: the "
        "label (classify: label, pretrain: next_sentence_labels) and any feature a --schema_dir "
        "schema gives a drift_comparator",
        minimum=0,
    )
    drift_js_threshold: float = option(
        0.1,
        "ExampleValidator: largest Jensen-Shannon divergence of a checked feature's distribution "
        "from the previous accepted span's (0: not checked; features as --drift_linf_threshold)",
        minimum=0,
    )


# Options only ExampleValidator reads: left out of the Transform/Trainer custom_config.
VALIDATION_OPTIONS = ("drift_linf_threshold", "drift_js_threshold")


@dataclasses.dataclass
class PretrainingOptions(TrainingOptions):
    """create_pretraining_data's options, plus the evaluator's blessing thresholds."""

    train_steps: int = 10_000
    learning_rate: float | None = same_as(
        TrainingLoopOptions,
        "learning_rate",
        None,
        note="pretrain: unset is the preset's (PRETRAINING_LEARNING_RATES: tiny 1e-3, mini and "
        "small 5e-4, medium 2e-4, base and large 1e-4; 1e-4 from an --init_checkpoint)",
    )
    head_learning_rate_multiplier: float = 20.0
    max_predictions_per_seq: int = same_as(PretrainingDataOptions, "max_predictions_per_seq")
    masked_lm_prob: float = same_as(PretrainingDataOptions, "masked_lm_prob")
    do_whole_word_mask: bool = same_as(PretrainingDataOptions, "do_whole_word_mask")
    dupe_factor: int = same_as(PretrainingDataOptions, "dupe_factor")
    short_seq_prob: float = same_as(PretrainingDataOptions, "short_seq_prob")
    init_checkpoint: str = same_as(
        ModelSourceOptions, "init_checkpoint", "", note="pretrain: an optional warm start"
    )
    min_masked_lm_accuracy: float = option(
        0.0, "Blessing: the held-out masked-LM accuracy must reach this"
    )
    min_next_sentence_accuracy: float = option(
        0.0, "Blessing: the held-out next-sentence accuracy must reach this"
    )
    min_masked_lm_gain: float = option(
        0.01,
        "Blessing: the held-out masked-LM accuracy must beat the eval split's constant "
        "predictor (always its most frequent masked token) by this much",
    )
    # Negative on purpose: masked LM is what carries over to fine-tuning (RoBERTa drops NSP
    # and does as well), and on a small corpus a model from scratch stays at the majority class
    # for thousands of steps (the tiny preset: still there after 2,000 here) while its masked
    # LM has learned. A next-sentence head clearly below "always the majority" is broken:
    # still refused.
    min_next_sentence_gain: float = option(
        -0.05,
        "Blessing: the held-out next-sentence accuracy must beat the eval split's majority "
        "class by this much (negative: may stay this far below it; masked LM carries the "
        "blessing)",
    )
    max_decrease: float = option(
        0.01,
        "Blessing: largest allowed drop of the blessing metric(s) below the model serving now "
        "(same eval data)",
    )


# --pipeline=pretrain's learning rate per --preset when --learning_rate is unset: the BERT
# paper's 1e-4 for base and large (also for continuing a released checkpoint), ELECTRA's 5e-4
# for small and 2e-4 for medium-sized models, and 1e-3 for tiny, the rate at which the tiny
# preset beats the constant predictor within a few hundred steps on a small corpus (at 1e-4 it
# did not: 0.0002 masked-LM accuracy after 300 steps on a user's 40 Wikipedia articles, #35).
PRETRAINING_LEARNING_RATES = {
    "tiny": 1e-3,
    "mini": 5e-4,
    "small": 5e-4,
    "medium": 2e-4,
    "base": 1e-4,
    "large": 1e-4,
}
CONTINUED_PRETRAINING_LEARNING_RATE = 1e-4


def pretraining_learning_rate(options: dict[str, Any]) -> float:
    """--learning_rate if given, else the preset's (from an init_checkpoint: 1e-4)."""
    if options.get("learning_rate"):
        return float(options["learning_rate"])
    if options.get("init_checkpoint"):
        return CONTINUED_PRETRAINING_LEARNING_RATE
    return PRETRAINING_LEARNING_RATES[options["preset"]]


@dataclasses.dataclass
class FineTuningOptions(TrainingOptions):
    """Fine-tuning options shared by the classification and SQuAD pipelines."""

    num_train_epochs: float = same_as(FineTuningLoopOptions, "num_train_epochs")
    # The BERT paper's fine-tuning search (tfx_pipeline/tuning.py): its grid, narrowed by flags.
    tune: bool = option(
        False,
        "Tuner: before the Trainer, train once per combination of --tune_learning_rates x "
        "--tune_train_batch_sizes x --tune_num_train_epochs, score each on the dev split with "
        "the task's main metric, and train with the best (their flags of the same names are "
        "then unused)",
    )
    tune_learning_rates: str = option(
        "5e-5,4e-5,3e-5,2e-5", "Tuner: learning rates to try (comma-separated; BERT paper's)"
    )
    tune_train_batch_sizes: str = option(
        "16,32", "Tuner: training batch sizes to try (comma-separated; BERT paper's)"
    )
    tune_num_train_epochs: str = option(
        "2,3,4", "Tuner: epochs to try (comma-separated; BERT paper's)"
    )
    # The evaluators' data baseline (components/tfma_evaluator.py, squad_evaluator.py).
    min_baseline_gain: float = option(
        0.01,
        "Blessing: the main metric on the dev file must beat what the eval split's best constant "
        "predictor scores by this much (on top of --min_metric / --min_f1). classify, in the "
        "metric's units: accuracy over always the majority class, F1 over always class 1 "
        "(2p/(1+p)), MCC and Pearson over 0, and for regression R² at least this (mean squared "
        'error at most (1 - this) x the labels\' variance); squad, F1 points over always "" (no '
        "answer; v2.0) or over each context's first k words, k the median gold answer length "
        "(v1.1). Negative loosens it",
    )


@dataclasses.dataclass
class ClassificationOptions(FineTuningOptions):
    """Fine-tuning options; the task's reader is `bert_tf.tasks.glue`'s."""

    task_name: str = same_as(
        TaskClassificationOptions,
        "task_name",
        "sst-2",
        note="its file layout, labels and official metrics",
    )
    learning_rate: float = 2e-5
    min_metric: float = option(
        0.0,
        "Blessing: the task's main metric (its first bert_tf.tasks.glue metric: accuracy, f1, mcc or "
        "pearson) on the dev file must reach this",
    )
    max_decrease: float = 0.01
    bulk_inference: bool = option(
        False,
        "BulkInferrer: score the data folder's unlabelled test file (GLUE test.tsv, or "
        "test.tsv/.csv with text columns and no label) with the blessed model; its output "
        "examples hold each input text with the predicted label and scores",
    )


@dataclasses.dataclass
class SquadOptions(FineTuningOptions):
    """SQuAD fine-tuning: google-research `run_squad.py`'s window options and defaults."""

    learning_rate: float = 5e-5
    max_seq_length: int = 384
    doc_stride: int = same_as(TaskSquadOptions, "doc_stride")
    max_query_length: int = same_as(TaskSquadOptions, "max_query_length")
    max_answer_length: int = same_as(
        TaskSquadOptions, "max_answer_length", note="the pushed model's"
    )
    n_best_size: int = same_as(
        TaskSquadOptions,
        "n_best_size",
        note="the pushed model's (google-research run_squad.py's flag and default)",
    )
    version_2_with_negative: bool = same_as(TaskSquadOptions, "version_2_with_negative")
    null_score_diff_threshold: float = same_as(
        TaskSquadOptions,
        "null_score_diff_threshold",
        note="the pushed model's (google-research run_squad.py's flag and default)",
    )
    min_f1: float = option(
        0.0, "Blessing: the official F1 (percent) on the dev file must reach this"
    )
    min_baseline_gain: float = 1.0  # F1 points
    max_f1_decrease: float = option(
        1.0, "Blessing: largest allowed F1 drop (points) below the model serving now"
    )


# --pipeline value -> its options.
PIPELINE_OPTIONS: dict[str, type[TrainingOptions]] = {
    "pretrain": PretrainingOptions,
    "classify": ClassificationOptions,
    "squad": SquadOptions,
}


def _flag_value(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def option_specs() -> dict[str, SharedOption]:
    """Every option of the pipelines' dataclasses, in field order, as one `--pipeline`-chosen
    flag (`bert_tf.options.shared_options`: the declaring field's help and checks, each
    pipeline's default)."""
    return shared_options(PIPELINE_OPTIONS, selector="pipeline")


SCHEMA_FILE = "schema.pbtxt"  # SchemaGen's file: a run's schema folder can be a --schema_dir

# `make demo`'s runs (demo/run.py; it adds the folders, --init_checkpoint=<MiniLM folder> and,
# on a CPU with bfloat16 instructions, mixed bfloat16):
# - pretraining: all-MiniLM-L6-v2 continued on the Wikipedia sample (domain-adaptive masked LM).
#   Its checkpoint has no pre-training heads: they start fresh and learn at 25x the encoder's
#   rate (measured on this corpus, batches of 32 x 64 tokens, held-out masked-LM accuracy:
#   encoder 1e-4 with the heads at 1x 0.10 after 100 steps; at 20x 0.19; encoder 2e-4 with 25x
#   0.24 after 150 steps, 0.28 after 400; the constant predictor ~0.06). 300 steps keep the
#   demo under 10 minutes on 2 cores (0.257 in the pipeline); the evaluator on 25 held-out
#   batches.
# - fine-tuning: the same checkpoint on Rotten Tomatoes review snippets (fresh / rotten), one
#   epoch over the demo's 2,000 training rows, seq 64, batch 32: 62 steps, so a higher rate
#   than the 336-step recipe of docs/results.md (run_classifier, dev accuracy on 500 snippets,
#   majority 0.576: lr 5e-5 0.576 in the pipeline (not blessed), 1e-4 0.732, 2e-4 0.786).
DEMO_PRETRAINING = PretrainingOptions(
    max_seq_length=64,
    max_predictions_per_seq=10,
    dupe_factor=1,
    train_steps=300,
    eval_steps=25,
    train_batch_size=32,
    learning_rate=2e-4,
    head_learning_rate_multiplier=25.0,
    iterations_per_loop=25,
)
DEMO_CLASSIFICATION = ClassificationOptions(
    task_name="text_classification",
    max_seq_length=64,
    train_batch_size=32,
    learning_rate=2e-4,
    num_train_epochs=1.0,
    iterations_per_loop=25,
)


def option_flags(options: TrainingOptions) -> list[str]:
    """`tfx_pipeline.run` flags (`--name=value`) of the fields of `options` that differ from
    their defaults, e.g. `option_flags(DEMO_PRETRAINING)` for the demo's run."""
    defaults = type(options)()
    return [
        f"--{field.name}={_flag_value(getattr(options, field.name))}"
        for field in dataclasses.fields(options)
        if getattr(options, field.name) != getattr(defaults, field.name)
    ]


def check_options(pipeline: str, options: TrainingOptions) -> list[str]:
    """One line per option of `options` whose value is not allowed (empty: all fine)."""
    specs = option_specs()
    errors = []
    for field in dataclasses.fields(options):
        value = getattr(options, field.name)
        why = specs[field.name].check(value)
        if why:
            errors.append(f"--{field.name}: expected {why}, got {shown(value)}")
    if getattr(options, "tune", False):
        errors += tuning_errors(options)
    if options.train_batch_size % options.gradient_accumulation_steps:
        errors.append(
            f"--gradient_accumulation_steps={options.gradient_accumulation_steps} must divide "
            f"--train_batch_size={options.train_batch_size}"
        )
    if pipeline == "pretrain" and options.train_steps < 1:
        errors.append(
            f"--train_steps: expected at least 1 for --pipeline=pretrain, got {options.train_steps}"
        )
    return errors


def modules_digest() -> str:
    """sha256 of modules/*.py. TFX fingerprints a module file's folder into the cache key but not
    a function named by import path: custom_config carries this instead, so that editing a module
    still reruns its Transform and Trainer (as with the module files before)."""
    digest = hashlib.sha256()
    for path in sorted((Path(__file__).parent / "modules").glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def custom_config(options: TrainingOptions, **extra) -> dict:
    """The options as a module function's custom_config (JSON values; not VALIDATION_OPTIONS),
    plus `extra` entries and the modules' digest."""
    values = {k: v for k, v in dataclasses.asdict(options).items() if k not in VALIDATION_OPTIONS}
    return {**values, "modules_digest": modules_digest(), **extra}
