"""What the Trainer module files share: the preprocessor, warm start, datasets, training, export.

Lives outside `tfx_pipeline/modules/` on purpose: TFX bundles every `.py` of a module file's
folder into the user-code wheel, and this file is library code imported by the modules.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf
from absl import logging

from bert_tf import checkpoints, fileio, model_source, training
from bert_tf import options as options_lib
from bert_tf.modeling.configs import BertConfig
from bert_tf.options import PrecisionOptions, TrainingLoopOptions
from bert_tf.text.tokenization import BertPreprocessor, load_vocab
from bert_tf.tfrecords import check_tfrecord_files
from tfx_pipeline import configs

OPTIONS_FILE = "training_options.json"  # in the Trainer's model_run folder


def training_options(custom_config: dict[str, Any] | None) -> dict[str, Any]:
    """`configs.TrainingOptions`' defaults overridden by the Trainer's custom_config (which
    run.py fills from the flags of the same names); unknown keys kept."""
    return {**dataclasses.asdict(configs.TrainingOptions()), **(custom_config or {})}


def base_model_checkpoint(base_model: str | None) -> str | None:
    """The Trainer's imported checkpoint: TFX hands `<artifact uri>/Format-Serving` for any Model
    artifact, an Importer's uri is the checkpoint itself."""
    if not base_model:
        return None
    return base_model if tf.io.gfile.exists(base_model) else os.path.dirname(base_model)


def preprocessor(options: dict[str, Any]) -> BertPreprocessor:
    """The serving preprocessor of the custom_config's vocab_file, max_seq_length, do_lower_case."""
    return BertPreprocessor(
        load_vocab(options["vocab_file"]),
        seq_length=options["max_seq_length"],
        lower_case=bool(options["do_lower_case"]),
    )


def num_train_steps(fn_args, options: dict[str, Any]) -> int:
    """The Trainer's step count: `fn_args.train_steps` (its TrainArgs.num_steps) when set, else
    ceil(num_train_epochs x training examples / train_batch_size), as google-research's
    run_classifier/run_squad derive it (the examples: the records of `fn_args.train_files`, known
    only once ExampleGen has run; for SQuAD its doc-stride windows). Logs the result."""
    if fn_args.train_steps:
        return int(fn_args.train_steps)
    epochs = float(options.get("num_train_epochs") or 0)
    if epochs <= 0:
        raise ValueError(
            "no training length: set the Trainer's train_args.num_steps or a positive "
            "num_train_epochs in its custom_config"
        )
    files = sorted(f for pattern in fn_args.train_files for f in tf.io.gfile.glob(pattern))
    if not files:
        raise FileNotFoundError(f"no training examples match {fn_args.train_files}")
    # Cached per file: transformed_dataset's own check of the same files walks them once.
    examples = sum(check_tfrecord_files(files, "GZIP"))
    if not examples:
        raise ValueError(f"no training examples in {fn_args.train_files}")
    batch_size = options["train_batch_size"]
    steps = max(1, math.ceil(epochs * examples / batch_size))
    logging.info(
        "training steps: %d = ceil(%g epochs x %d training examples / batch size %d)",
        steps,
        epochs,
        examples,
        batch_size,
    )
    return steps


def encoder_config(
    init_checkpoint: str | None, options: dict[str, Any], vocab_size: int | None = None
) -> BertConfig:
    """The encoder config the Trainer builds: the checkpoint's own when one lies beside it, else
    `options["preset"]` with the vocab's size. Checked as the scripts check their model source
    (`bert_tf.model_source`): the vocab has exactly the config's vocab_size tokens (else its ids
    would index past, or short of, the checkpoint's embedding rows) and max_seq_length fits the
    position embeddings; ValueError naming the option and the checkpoint otherwise."""
    vocab_file = options["vocab_file"]
    if vocab_size is None:
        vocab_size = len(load_vocab(vocab_file))
    config = init_checkpoint and checkpoints.read_checkpoint(init_checkpoint).config
    if config:
        origin = f"the config of init_checkpoint={init_checkpoint}"
        model_source.check_vocab_size(vocab_file, vocab_size, config, origin)
    else:
        config = BertConfig.from_preset(options["preset"], vocab_size=vocab_size)
        origin = f"preset {options['preset']!r}"
    model_source.check_max_seq_length(options["max_seq_length"], config, origin)
    return config


def warm_start(
    base_model: str | None, options: dict[str, Any], vocab_size: int
) -> tuple[str | None, BertConfig]:
    """The Trainer's imported checkpoint (if any) and its checked `encoder_config`."""
    init_checkpoint = base_model_checkpoint(base_model)
    return init_checkpoint, encoder_config(init_checkpoint, options, vocab_size)


def transformed_dataset(
    file_patterns: list[str],
    feature_spec: dict,
    batch_size: int,
    training: bool,
    seed: int = 0,
) -> tf.data.Dataset:
    """Transform's gzipped TFRecords as dicts of batched tensors, ints as int32.

    For training: shuffled (reproducibly), repeated, full batches only (the training loop needs
    a static batch size). Built from TFRecordDataset rather than TFX's DataAccessor so the
    iterator is checkpointable, which the training loop relies on to resume. Raises ValueError
    naming the file and byte offset if a file is truncated or its framing corrupt.
    """
    files = sorted(f for pattern in file_patterns for f in tf.io.gfile.glob(pattern))
    if not files:
        raise FileNotFoundError(f"no transformed examples match {file_patterns}")
    # TFRecordDataset reads a file cut short (inside a record header, or in the gzip trailer)
    # as a shorter, valid one: ValueError naming the file instead.
    check_tfrecord_files(files, "GZIP")
    dataset = tf.data.TFRecordDataset(files, compression_type="GZIP")
    if training:
        dataset = dataset.shuffle(10_000, seed=seed).repeat()
    dataset = dataset.batch(batch_size, drop_remainder=training)

    def parse(records):
        features = tf.io.parse_example(records, feature_spec)
        return {k: tf.cast(v, tf.int32) if v.dtype.is_integer else v for k, v in features.items()}

    return dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


@functools.cache
def _multi_worker_strategy() -> tf.distribute.Strategy:
    # Once per process: it must exist before any TensorFlow op, so a Trainer replica creates it
    # first (components/distributed_trainer.py) and train() reuses it.
    return training.get_strategy("multi_worker_mirrored")


def get_strategy(name: str) -> tf.distribute.Strategy:
    """`bert_tf.training.get_strategy(name)`; multi_worker_mirrored's made once per process."""
    if name == "multi_worker_mirrored":
        return _multi_worker_strategy()
    return training.get_strategy(name)


def train(
    build_model: Callable[[], keras.Model],
    loss_fn: training.LossFn,
    dataset: tf.data.Dataset,
    options: dict[str, Any],
    num_train_steps: int,
    output_dir: str,
    init_checkpoint: str | None = None,
) -> keras.Model:
    """Builds the model under the chosen strategy and runs `bert_tf.training.Trainer`."""
    precision = options_lib.from_dict(PrecisionOptions, options)
    strategy = get_strategy(options["distribution_strategy"])
    training.seed_and_precision(options["seed"], precision)
    with strategy.scope():
        model = build_model()
    # What this model was trained with (the Tuner's best values included), beside its log.
    tf.io.gfile.makedirs(output_dir)
    fileio.atomic_write_text(
        os.path.join(output_dir, OPTIONS_FILE), json.dumps(options, indent=1, sort_keys=True)
    )
    # One checkpoint, at the end (the pipeline's Trainer never resumes: a rerun is a new
    # execution), progress every compiled loop.
    # The scripts' loop options, from the one declaration (batch, learning rate, optimizer and
    # recipe, accumulation, seed).
    loop = options_lib.from_dict(
        TrainingLoopOptions,
        options,
        save_checkpoints_steps=num_train_steps,
        log_steps=max(1, min(options["iterations_per_loop"], num_train_steps)),
    )
    trainer = training.make_trainer(
        model,
        loss_fn,
        output_dir,
        strategy,
        loop,
        num_train_steps=num_train_steps,
        num_warmup_steps=int(num_train_steps * options["warmup_proportion"]),
        steps_per_loop=options["iterations_per_loop"],
        jit_compile=bool(options["use_xla"]),
    )
    logs = trainer.train(dataset, num_train_steps, init_checkpoint=init_checkpoint)
    logging.info("training done: %s", logs)
    return model


def export_serving_model(export_fn: Callable[..., Any], serving_model_dir: str, *args, **kwargs):
    """Writes `export_fn(*args, export_dir, version, **kwargs)`'s SavedModel at serving_model_dir.

    The export functions write TF Serving's `<export_dir>/<version>/` layout; TFX wants the
    SavedModel itself in `serving_model_dir` (Pusher adds the version), so export next to it
    and move the version folder into place.
    """
    parent = os.path.dirname(serving_model_dir.rstrip("/"))
    tf.io.gfile.makedirs(parent)
    staging = os.path.join(parent, "export-staging")  # local, gs://, ...
    fileio.remove_tree(staging)
    version = export_fn(*args, staging, 1, **kwargs)
    fileio.remove_tree(serving_model_dir)
    fileio.move_tree(version, serving_model_dir)
    fileio.remove_tree(staging)
