r"""Fine-tunes BERT on a GLUE task or any labelled TSV/CSV (google-research `run_classifier.py`).

Same flags as google-research/bert (TPU flags: `bert_tf.options.TpuOptions`), plus
`--optimizer`, `--use_mixed_precision`, `--use_xla`, `--distribution_strategy`,
`--gradient_accumulation_steps`, `--seed` and `--test_results_header`. Outputs in
`--output_dir`: training checkpoints `ckpt-<step>` (rerunning the same command resumes from the
latest), `training_log.json`, `training_curve.png`, TensorBoard events, `eval_results.txt`
(`key = value` lines) and `test_results.tsv` (one line per test example: the class
probabilities, tab-separated; the score for STS-B). Unlike google-research's, our
`test_results.tsv` starts with a header line naming the columns (the label names in class-id
order, `score` for regression); `--notest_results_header` writes google's headerless layout.

The folder is self-contained (`bert_tf.checkpoints.write_model_files`): `bert_config.json`,
`vocab.txt` (a copy of the vocab used) and `task_info.json`, the model's description:

    {"task": "classifier", "task_name": "sst-2", "labels": ["0", "1"], "regression": false,
     "single_segment": true, "do_lower_case": true, "max_seq_length": 128}

(`labels` in class-id order, `[]` for regression; `single_segment`: the task has no second
text). `--do_train` rewrites them; other runs only add missing ones. So
`python -m serving.export --task=classifier --init_checkpoint=<output_dir> --export_dir=...`
needs no other flag, and `--init_checkpoint=<output_dir>` finds the config and vocab. Every file
gets the permissions a plain `open()` gives (0666 minus the umask).

`--init_checkpoint` takes a google-research checkpoint, one of ours, or an HF folder; the
config and vocab default to the files beside it. Tasks: see `bert_tf.tasks.glue`.

Example:

    python -m bert_tf.run_classifier --task_name=MRPC --data_dir=glue_data/MRPC \
      --init_checkpoint=$HOME/.cache/bert_tfx/minilm --do_train --do_eval \
      --max_seq_length=128 --train_batch_size=32 --learning_rate=2e-5 --num_train_epochs=3 \
      --output_dir=/tmp/mrpc_output
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import numpy as np
import tensorflow as tf
from absl import flags, logging

from bert_tf import checkpoints, fileio, flags_util, model_source, options, training
from bert_tf.flags_util import check_positive
from bert_tf.modeling.encoder import build_encoder
from bert_tf.modeling.models import BertClassifier
from bert_tf.tasks import glue
from bert_tf.tasks.classification import classification_loss_fn, evaluate, make_dataset
from bert_tf.tasks.options import ClassificationOptions
from bert_tf.text.tokenization import BertPreprocessor

FLAGS = flags.FLAGS


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """Defines this script's flags (in `flag_values`); called when it runs as a program, or by
    tests on their own `FlagValues`, so importing the module never defines flags twice."""
    text = glue.TextClassificationProcessor
    layout = (
        f"one of {list(glue.PROCESSORS)}; {text.name}: train/dev/test .tsv or .csv files (any "
        "language; .tsv first if both), each with a header row naming its columns (any case): "
        f"'label', the text (one of {', '.join(repr(c) for c in text.TEXT_A)}) and optionally a "
        f"second text (one of {', '.join(repr(c) for c in text.TEXT_B)}); the labels are the "
        "training file's distinct values, sorted; the test file needs no 'label'"
    )
    options.define_flags(ClassificationOptions, flag_values, notes={"task_name": layout})
    flags.DEFINE_string(
        "data_dir",
        None,
        "Folder with the task's train/dev/test files (see --task_name for text_classification's).",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "output_dir", None, "Checkpoints, logs and results go here.", flag_values=flag_values
    )
    flags.DEFINE_bool("do_train", False, "Fine-tune on train.", flag_values=flag_values)
    flags.DEFINE_bool(
        "do_eval", False, "Evaluate on dev; writes eval_results.txt.", flag_values=flag_values
    )
    flags.DEFINE_bool(
        "do_predict", False, "Predict on test; writes test_results.tsv.", flag_values=flag_values
    )
    # --init_checkpoint --bert_config_file --vocab_file --do_lower_case --max_seq_length
    options.define_flags(options.ModelSourceOptions, flag_values)
    # --train_batch_size --learning_rate --optimizer ... --num_train_epochs --warmup_proportion
    options.define_flags(options.FineTuningLoopOptions, flag_values)
    # --use_mixed_precision --mixed_precision_dtype --use_xla
    options.define_flags(options.PrecisionOptions, flag_values)
    options.define_flags(options.DistributionOptions, flag_values)
    options.define_flags(options.TpuOptions, flag_values)
    flags.DEFINE_integer(
        "eval_batch_size", 8, "Examples per evaluation batch.", flag_values=flag_values
    )
    flags.DEFINE_integer(
        "predict_batch_size", 8, "Examples per prediction batch.", flag_values=flag_values
    )
    flags.DEFINE_bool(
        "test_results_header",
        True,
        "Start test_results.tsv with a line naming its columns (the labels); "
        "--notest_results_header: google-research's layout, without it.",
        flag_values=flag_values,
    )


def task_info(
    task_name: str,
    label_list: Sequence[str],
    single_segment: bool,
    do_lower_case: bool,
    max_seq_length: int,
) -> dict:
    """The `task_info.json` of a classifier output folder (see the module docstring)."""
    return {
        "task": "classifier",
        "task_name": task_name,
        "labels": list(label_list),
        "regression": not label_list,
        "single_segment": single_segment,
        "do_lower_case": do_lower_case,
        "max_seq_length": max_seq_length,
    }


def format_test_results(outputs: np.ndarray, label_list: Sequence[str], header: bool) -> str:
    """`test_results.tsv`: a header naming the columns (if `header`), then one row per example."""
    lines = ["\t".join(str(v) for v in row) + "\n" for row in outputs]
    if header:
        names = [" ".join(str(label).split()) for label in label_list] or ["score"]
        lines.insert(0, "\t".join(names) + "\n")
    return "".join(lines)


def _check_flags(args: flags.FlagValues) -> None:
    if not (args.do_train or args.do_eval or args.do_predict):
        raise ValueError("at least one of --do_train, --do_eval or --do_predict must be set")
    for name in ("task_name", "data_dir", "output_dir"):
        if not args[name].value:
            raise ValueError(f"--{name} is required")
    if not fileio.isdir(args.data_dir):
        raise ValueError(f"--data_dir={args.data_dir}: no such folder")
    for group in (options.ModelSourceOptions, options.FineTuningLoopOptions):
        options.check(options.from_flags(group, args))
    check_positive(args, ["eval_batch_size", "predict_batch_size", "iterations_per_loop"])
    if args.init_checkpoint and not tf.io.gfile.glob(args.init_checkpoint + "*"):
        raise ValueError(f"--init_checkpoint={args.init_checkpoint}: no such file or folder")


def run(args: flags.FlagValues) -> None:
    """The script's work; every bad input raises ValueError/OSError naming the flag or file."""
    _check_flags(args)
    # Before any TensorFlow op: multi_worker_mirrored configures collective ops at startup.
    strategy = training.strategy_from_flags(args)
    processor = glue.get_processor(args.task_name)
    source = model_source.resolve(
        args.init_checkpoint, args.bert_config_file, args.vocab_file, args.max_seq_length
    )
    config, vocab_file = source.config, source.vocab_file
    preprocessor = BertPreprocessor(
        source.vocab, seq_length=args.max_seq_length, lower_case=args.do_lower_case
    )
    label_list = processor.get_labels(args.data_dir)
    train_examples = processor.get_train_examples(args.data_dir) if args.do_train else []
    eval_examples = processor.get_dev_examples(args.data_dir) if args.do_eval else []
    test_examples = processor.get_test_examples(args.data_dir) if args.do_predict else []
    num_train_steps = int(len(train_examples) / args.train_batch_size * args.num_train_epochs)
    if args.do_train and num_train_steps < 1:
        raise ValueError(
            f"--num_train_epochs={args.num_train_epochs} with {len(train_examples)} "
            f"examples and --train_batch_size={args.train_batch_size} gives no step"
        )
    training.seed_and_precision(args.seed, options.from_flags(options.PrecisionOptions, args))
    output_dir = args.output_dir  # a string: a Path would fold gs:// into gs:/
    checkpoints.check_output_dir(output_dir, config)
    fileio.makedirs(output_dir)
    # Self-contained: what serving.export needs beside the checkpoints (module docstring).
    # The examples the model sees tell single sentences from pairs, as in `make_dataset`.
    first = next(iter(train_examples or eval_examples or test_examples), None)
    info = task_info(
        processor.name,
        label_list,
        first is not None and first.text_b is None,
        args.do_lower_case,
        args.max_seq_length,
    )
    if args.do_train or not fileio.exists(os.path.join(output_dir, checkpoints.TASK_INFO_NAME)):
        checkpoints.write_model_files(output_dir, config, vocab_file, info)
    else:  # evaluation/prediction of a trained folder: its description stays the training's
        config.to_json_file(os.path.join(output_dir, checkpoints.CONFIG_NAME))
    num_classes = len(label_list) or 1
    with strategy.scope():
        model = BertClassifier(build_encoder(config), num_classes)
    global_step = 0
    if args.do_train:
        trainer = training.make_trainer(
            model,
            classification_loss_fn(num_classes),
            output_dir,
            strategy,
            options.from_flags(options.FineTuningLoopOptions, args),
            num_train_steps=num_train_steps,
            num_warmup_steps=int(num_train_steps * args.warmup_proportion),
            steps_per_loop=args.iterations_per_loop,
            jit_compile=args.use_xla,
        )
        logging.info(
            "training: %d examples, batch %d, %d steps",
            len(train_examples),
            args.train_batch_size,
            num_train_steps,
        )
        dataset = make_dataset(
            train_examples,
            preprocessor,
            label_list,
            args.train_batch_size,
            training=True,
            seed=args.seed,
        )
        trainer.train(dataset, num_train_steps, args.init_checkpoint)
        global_step = int(trainer.global_step)
    elif latest := training.restore_latest(model, output_dir):
        global_step = int(latest.rsplit("-", 1)[1])
        logging.info("restored %s", latest)
    elif args.init_checkpoint:
        checkpoints.load_pretrained(model, args.init_checkpoint)

    if args.do_eval:
        dataset = make_dataset(
            eval_examples, preprocessor, label_list, args.eval_batch_size, training=False
        )
        logits = training.predict(model, dataset.map(lambda x, y: x), args.use_xla)
        result = {
            **evaluate(processor.name, logits, eval_examples, label_list),
            "global_step": global_step,
        }
        training.write_eval_results(output_dir, result)
    if args.do_predict:
        dataset = make_dataset(
            test_examples, preprocessor, label_list, args.predict_batch_size, training=False
        )
        logits = training.predict(model, dataset.map(lambda x, y: x), args.use_xla)
        outputs = tf.nn.softmax(logits).numpy() if label_list else logits
        results_file = os.path.join(output_dir, "test_results.tsv")
        fileio.atomic_write_text(
            results_file, format_test_results(outputs, label_list, args.test_results_header)
        )
        logging.info("wrote %d predictions to %s", len(outputs), results_file)


def main(argv: list[str]) -> None:
    del argv
    try:
        run(FLAGS)
    except (ValueError, OSError, FloatingPointError) as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    define_flags()
    flags_util.run(main)
