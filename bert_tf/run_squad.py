r"""Fine-tunes BERT on SQuAD v1.1/v2.0 and writes predictions (google-research `run_squad.py`).

`--do_train` trains a `BertSpanLabeler` with `bert_tf.training.Trainer` (checkpoints
`--output_dir/ckpt-<step>`, resumed when rerun). `--do_predict` writes to `--output_dir`:
`predictions.json` ({id: answer}), `nbest_predictions.json`, for v2.0 `null_odds.json`, and,
when the predict file has gold answers, `eval_results.txt` with our EM/F1 (the official
scripts' numbers). Prediction without `--do_train` uses the latest checkpoint in `--output_dir`,
else `--init_checkpoint`.

The folder is self-contained (`bert_tf.checkpoints.write_model_files`): `bert_config.json`,
`vocab.txt` (a copy of the vocab used) and `task_info.json`, the decoding options the model
was trained/predicted with:

    {"task": "squad", "do_lower_case": true, "max_seq_length": 384, "doc_stride": 128,
     "max_query_length": 64, "max_answer_length": 30, "n_best_size": 20,
     "version_2_with_negative": false, "null_score_diff_threshold": 0.0}

`--do_train` rewrites them; prediction alone only adds missing ones. So
`python -m serving.export --task=squad --init_checkpoint=<output_dir> --export_dir=...` needs no
other flag. Every file gets the permissions a plain `open()` gives (0666 minus the umask).

Example:

    python -m bert_tf.run_squad --vocab_file=$BERT/vocab.txt \
      --bert_config_file=$BERT/bert_config.json --init_checkpoint=$BERT/bert_model.ckpt \
      --do_train --train_file=train-v1.1.json --do_predict --predict_file=dev-v1.1.json \
      --train_batch_size=32 --learning_rate=3e-5 --num_train_epochs=2.0 \
      --max_seq_length=384 --doc_stride=128 --output_dir=/tmp/squad_base
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import sys

from absl import flags, logging

from bert_tf import fileio, flags_util, options
from bert_tf.flags_util import check_positive
from bert_tf.tasks.options import SquadOptions

FLAGS = flags.FLAGS


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines this script's flags (in `flag_values`, absl's global FLAGS by default).

    Called when the module runs as a program, never on import, so tests and other scripts can
    import it; tests run `main` in-process on a fresh FlagValues (see tests/conftest.py).
    """
    # --init_checkpoint --bert_config_file --vocab_file --do_lower_case --max_seq_length
    options.define_flags(options.ModelSourceOptions, flag_values, max_seq_length=384)
    # --train_batch_size --learning_rate --optimizer ... --num_train_epochs --warmup_proportion
    options.define_flags(options.FineTuningLoopOptions, flag_values, seed=12345)
    # --use_mixed_precision --mixed_precision_dtype --use_xla
    options.define_flags(options.PrecisionOptions, flag_values)
    flags.DEFINE_string(
        "output_dir", None, "Checkpoints and prediction files go here.", flag_values=flag_values
    )
    flags.DEFINE_bool("do_train", False, "Fine-tune on --train_file.", flag_values=flag_values)
    flags.DEFINE_string(
        "train_file",
        None,
        "SQuAD JSON for training, e.g. train-v1.1.json.",
        flag_values=flag_values,
    )
    flags.DEFINE_bool(
        "do_predict", False, "Predict answers for --predict_file.", flag_values=flag_values
    )
    flags.DEFINE_string(
        "predict_file", None, "SQuAD JSON to predict, e.g. dev-v1.1.json.", flag_values=flag_values
    )
    flags.DEFINE_integer(
        "predict_batch_size", 8, "Examples per prediction batch.", flag_values=flag_values
    )
    # --doc_stride --max_query_length --max_answer_length --n_best_size
    # --version_2_with_negative --null_score_diff_threshold, as the export's and the pipeline's
    options.define_flags(SquadOptions, flag_values)
    # --iterations_per_loop keeps the default of 100 of --steps_per_loop, its old name here.
    options.define_flags(options.DistributionOptions, flag_values, iterations_per_loop=100)
    options.define_flags(options.TpuOptions, flag_values)
    flags.DEFINE_bool(
        "verbose_logging",
        False,
        "Log (INFO) each predicted answer that cannot be mapped back onto the context's "
        "original text, as google-research does.",
        flag_values=flag_values,
    )


def _check_flags() -> None:
    """Exits with an error naming the first flag that is missing or out of range."""
    if not FLAGS.do_train and not FLAGS.do_predict:
        sys.exit("error: at least one of --do_train and --do_predict must be set")
    required = (
        ["output_dir"] + ["train_file"] * FLAGS.do_train + ["predict_file"] * FLAGS.do_predict
    )
    for name in required:
        if not FLAGS[name].value:
            sys.exit(f"error: --{name} is required")
    for name in ("train_file", "predict_file"):
        path = FLAGS[name].value
        if path and not fileio.isfile(path):
            sys.exit(f"error: --{name}={path}: no such file")
    try:
        for group in (options.ModelSourceOptions, options.FineTuningLoopOptions, SquadOptions):
            options.check(options.from_flags(group, FLAGS))
        check_positive(
            FLAGS,
            ["predict_batch_size", "iterations_per_loop"],
        )
    except ValueError as e:
        sys.exit(f"error: {e}")
    if FLAGS.max_seq_length <= FLAGS.max_query_length + 3:
        sys.exit(
            f"error: --max_seq_length ({FLAGS.max_seq_length}) must exceed --max_query_length "
            f"({FLAGS.max_query_length}) + 3"
        )


def _features(path: str, tokenizer, training: bool):
    from bert_tf.tasks import squad

    examples = squad.read_squad_examples(path, training, FLAGS.version_2_with_negative)
    if not examples:
        raise ValueError(f"{path}: no usable questions")
    if training:
        random.Random(FLAGS.seed).shuffle(examples)  # as google-research, before windowing
    features = squad.convert_examples_to_features(
        examples,
        tokenizer,
        max_seq_length=FLAGS.max_seq_length,
        doc_stride=FLAGS.doc_stride,
        max_query_length=FLAGS.max_query_length,
        training=training,
    )
    logging.info("%s: %d examples, %d features", path, len(examples), len(features))
    return examples, features


def train(model, tokenizer, strategy) -> None:
    from bert_tf import training
    from bert_tf.tasks import squad

    examples, features = _features(FLAGS.train_file, tokenizer, training=True)
    # Steps count examples, not windows, as google-research does.
    num_train_steps = int(len(examples) / FLAGS.train_batch_size * FLAGS.num_train_epochs)
    if num_train_steps < 1:
        raise ValueError(
            f"--num_train_epochs={FLAGS.num_train_epochs} over {len(examples)} examples at "
            f"--train_batch_size={FLAGS.train_batch_size} makes no training step"
        )
    if len(features) < FLAGS.train_batch_size:
        raise ValueError(
            f"--train_batch_size={FLAGS.train_batch_size} exceeds the {len(features)} "
            f"training features of --train_file"
        )
    trainer = training.make_trainer(
        model,
        squad.loss_fn,
        FLAGS.output_dir,
        strategy,
        options.from_flags(options.FineTuningLoopOptions, FLAGS),
        num_train_steps=num_train_steps,
        num_warmup_steps=int(num_train_steps * FLAGS.warmup_proportion),
        steps_per_loop=FLAGS.iterations_per_loop,
        jit_compile=FLAGS.use_xla,
    )
    dataset = squad.features_to_dataset(
        features, FLAGS.max_seq_length, FLAGS.train_batch_size, training=True, seed=FLAGS.seed
    )
    trainer.train(dataset, num_train_steps, init_checkpoint=FLAGS.init_checkpoint)


def predict(model, tokenizer) -> None:
    from bert_tf import fileio, training
    from bert_tf.tasks import squad

    examples, features = _features(FLAGS.predict_file, tokenizer, training=False)
    dataset = squad.features_to_dataset(
        features, FLAGS.max_seq_length, FLAGS.predict_batch_size, training=False
    )
    outputs = training.predict(model, dataset, jit_compile=FLAGS.use_xla)
    predictions, nbest, null_odds = squad.compute_predictions(
        examples,
        features,
        outputs["start_logits"],
        outputs["end_logits"],
        lower_case=FLAGS.do_lower_case,
        n_best_size=FLAGS.n_best_size,
        max_answer_length=FLAGS.max_answer_length,
        version_2_with_negative=FLAGS.version_2_with_negative,
        null_score_diff_threshold=FLAGS.null_score_diff_threshold,
        verbose_logging=FLAGS.verbose_logging,
    )
    output_dir = FLAGS.output_dir
    outputs = {"predictions.json": predictions, "nbest_predictions.json": nbest}
    if FLAGS.version_2_with_negative:
        outputs["null_odds.json"] = null_odds
    for name, obj in outputs.items():  # google-research's files, indented as its are
        text = json.dumps(obj, indent=4, ensure_ascii=False) + "\n"
        fileio.atomic_write_text(os.path.join(output_dir, name), text)
    logging.info("wrote predictions for %d questions to %s", len(predictions), output_dir)

    dataset_json = squad.read_squad_json(FLAGS.predict_file)
    if not any(qa.get("answers") for qa in squad.iter_questions(dataset_json)):
        return  # a test set without gold answers: nothing to score
    metrics = (
        squad.squad_v2_metrics(dataset_json, predictions)
        if FLAGS.version_2_with_negative
        else squad.squad_v1_metrics(dataset_json, predictions)
    )
    training.write_eval_results(output_dir, metrics)


def task_info() -> dict:
    """The `task_info.json` of a SQuAD output folder (see the module docstring): the model's
    inputs and every `SquadOptions` field, which `serving.export --task=squad` reads back."""
    return {
        "task": "squad",
        "do_lower_case": FLAGS.do_lower_case,
        "max_seq_length": FLAGS.max_seq_length,
        **dataclasses.asdict(options.from_flags(SquadOptions, FLAGS)),
    }


def main(argv: list[str]) -> None:
    del argv
    _check_flags()
    from bert_tf import checkpoints, model_source
    from bert_tf.checkpoints import load_pretrained
    from bert_tf.modeling.encoder import build_encoder
    from bert_tf.modeling.models import BertSpanLabeler
    from bert_tf.text.tokenization import BertTokenizer
    from bert_tf.training import restore_latest, seed_and_precision, strategy_from_flags

    try:
        # Before any TensorFlow op: multi_worker_mirrored configures collective ops at startup.
        strategy = strategy_from_flags(FLAGS)
        source = model_source.resolve(
            FLAGS.init_checkpoint, FLAGS.bert_config_file, FLAGS.vocab_file, FLAGS.max_seq_length
        )
        config, vocab_file = source.config, source.vocab_file
        tokenizer = BertTokenizer(source.vocab, lower_case=FLAGS.do_lower_case)
        checkpoints.check_output_dir(FLAGS.output_dir, config)
        fileio.makedirs(FLAGS.output_dir)
        # Self-contained: what serving.export needs beside the checkpoints (module docstring).
        if FLAGS.do_train or not fileio.exists(
            os.path.join(FLAGS.output_dir, checkpoints.TASK_INFO_NAME)
        ):
            checkpoints.write_model_files(FLAGS.output_dir, config, vocab_file, task_info())
        seed_and_precision(FLAGS.seed, options.from_flags(options.PrecisionOptions, FLAGS))
        with strategy.scope():
            model = BertSpanLabeler(build_encoder(config))
        if FLAGS.do_train:
            if not FLAGS.init_checkpoint:
                logging.warning("no --init_checkpoint: training from random weights")
            train(model, tokenizer, strategy)
        elif latest := restore_latest(model, FLAGS.output_dir):
            logging.info("predicting with %s", latest)
        elif FLAGS.init_checkpoint:
            load_pretrained(model, FLAGS.init_checkpoint)
            logging.warning("no checkpoint in --output_dir: predicting with --init_checkpoint")
        else:
            raise ValueError(
                "--do_predict without --do_train needs a checkpoint in --output_dir or "
                "--init_checkpoint"
            )
        if FLAGS.do_predict:
            predict(model, tokenizer)
    except (ValueError, OSError) as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    define_flags()
    flags_util.run(main)
