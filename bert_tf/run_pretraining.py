r"""Pre-trains BERT (masked LM + next sentence) on pretraining TFRecords (google-research
`run_pretraining.py`).

Same flags as google-research/bert (model source: `bert_tf.options.ModelSourceOptions`, with
`--bert_config_file` and `--vocab_file` defaulting to the files beside `--init_checkpoint`; TPU
flags: `bert_tf.options.TpuOptions`; `--use_tpu` or `--distribution_strategy` pick the
strategy), plus `--preset`/`--vocab_size` (a paper-size config instead of
`--bert_config_file`), `--optimizer=adamw|lamb`,
`--use_mixed_precision`, `--use_xla`, `--gradient_accumulation_steps`, `--seed` and
`--dynamic_masking` (re-mask every read, RoBERTa style; needs `--vocab_file`; evaluation keeps
the stored masks). Records come from `bert_tf.create_pretraining_data` or the original tool.
Outputs in `--output_dir`: training checkpoints `ckpt-<step>` (rerunning the same command resumes
from the latest), `training_log.json`, `training_curve.png`, TensorBoard events,
`bert_config.json` and `eval_results.txt` (`key = value` lines: `global_step`, `loss`,
`masked_lm_accuracy`, `masked_lm_loss`, `next_sentence_accuracy`, `next_sentence_loss`).

Example:

    python -m bert_tf.run_pretraining --input_file='/data/train-*.tfrecord' \
      --output_dir=/tmp/pretraining_output --do_train --do_eval --preset=tiny \
      --train_batch_size=32 --max_seq_length=128 --max_predictions_per_seq=20 \
      --num_train_steps=20 --num_warmup_steps=10 --learning_rate=2e-5

Continued (domain-adaptive) pretraining of a released checkpoint on one's own text: the config
and vocab come from the checkpoint; the pre-training heads an encoder-only checkpoint lacks
(an HF `BertModel` folder such as all-MiniLM-L6-v2) start fresh, named in one log line, the
masked-LM decoder tied to the loaded word embeddings; `--head_learning_rate_multiplier` lets
those fresh heads learn faster than the encoder under them:

    python -m bert_tf.run_pretraining --input_file=train.tfrecord --output_dir=/tmp/continued \
      --init_checkpoint=$HOME/.cache/bert_tfx/minilm --do_train --do_eval --max_seq_length=64 \
      --max_predictions_per_seq=10 --num_train_steps=200 --num_warmup_steps=20 \
      --learning_rate=1e-4 --head_learning_rate_multiplier=20
"""

from __future__ import annotations

import os
import sys

import tensorflow as tf
from absl import flags, logging

from bert_tf import checkpoints, fileio, flags_util, model_source, options, training
from bert_tf.checkpoints import VOCAB_NAME
from bert_tf.flags_util import check_positive
from bert_tf.modeling.configs import BertConfig
from bert_tf.modeling.encoder import build_encoder
from bert_tf.modeling.models import BertPretrainer
from bert_tf.tasks import pretraining
from bert_tf.tasks.options import PretrainingDataOptions
from bert_tf.tasks.pretraining import check_pretraining_file, expand_file_patterns
from bert_tf.text.masking import MaskedLmMasker
from bert_tf.text.tokenization import load_vocab
from bert_tf.tfrecords import check_tfrecord_files

FLAGS = flags.FLAGS


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """Defines this script's flags (in `flag_values`); called when it runs as a program, or by
    tests on their own `FlagValues`, so importing the module never defines flags twice."""

    def define(kind, name, default, help_, **kwargs):
        getattr(flags, f"DEFINE_{kind}")(
            name, default, help=help_, flag_values=flag_values, **kwargs
        )

    define("string", "input_file", None, "Input TFRecord file(s): comma-separated files or globs.")
    define("string", "output_dir", None, "Checkpoints, logs and eval_results.txt go here.")
    # --init_checkpoint --bert_config_file --vocab_file --max_seq_length, as in every script
    options.define_flags(
        options.ModelSourceOptions,
        flag_values,
        only=("init_checkpoint", "bert_config_file", "vocab_file", "max_seq_length"),
        notes={
            "vocab_file": "needed by --dynamic_masking",
            "max_seq_length": "the records' length",
        },
    )
    options.define_flags(options.PresetOptions, flag_values)
    define("integer", "vocab_size", 30522, "Vocabulary size for --preset.")
    define("bool", "do_train", False, "Whether to run training.")
    define("bool", "do_eval", False, "Whether to run eval; writes eval_results.txt.")
    # --max_predictions_per_seq (the records'), and with --dynamic_masking --masked_lm_prob
    # --do_whole_word_mask, as create_pretraining_data's
    options.define_flags(
        PretrainingDataOptions,
        flag_values,
        only=("max_predictions_per_seq", "masked_lm_prob", "do_whole_word_mask"),
        notes={"masked_lm_prob": "--dynamic_masking", "do_whole_word_mask": "--dynamic_masking"},
    )
    define("integer", "eval_batch_size", 8, "Examples per evaluation batch.")
    define("integer", "num_train_steps", 100000, "Number of training steps.")
    define(
        "integer",
        "num_warmup_steps",
        10000,
        "Number of linear warmup steps; more than --num_train_steps warns and trains.",
    )
    define("integer", "max_eval_steps", 100, "Maximum number of eval batches.")
    # --train_batch_size --learning_rate --optimizer --save_checkpoints_steps ... --seed
    options.define_flags(options.TrainingLoopOptions, flag_values)
    # --use_mixed_precision --mixed_precision_dtype --use_xla
    options.define_flags(options.PrecisionOptions, flag_values)
    options.define_flags(options.DistributionOptions, flag_values)
    options.define_flags(options.TpuOptions, flag_values)
    define("bool", "dynamic_masking", False, "Re-mask the training records on every read.")


def _config(args: flags.FlagValues) -> tuple[BertConfig, str]:
    """The config to pre-train and where it came from: --preset, else `model_source`'s
    --bert_config_file or the config beside --init_checkpoint."""
    given = bool(args.preset) + bool(args.bert_config_file)
    if given == 2 or not (given or args.init_checkpoint):
        raise ValueError(
            "exactly one of --bert_config_file or --preset is required (or an --init_checkpoint "
            "with its config beside it)"
        )
    if args.preset:
        return BertConfig.from_preset(args.preset, vocab_size=args.vocab_size), (
            f"--preset={args.preset}"
        )
    path = model_source.config_file(args.init_checkpoint, args.bert_config_file)
    return BertConfig.from_json_file(path), path


def _check_flags(args: flags.FlagValues, config: BertConfig, config_path: str) -> list[str]:
    """Raises ValueError naming the first bad flag; returns the input files."""
    if not (args.do_train or args.do_eval):
        raise ValueError("at least one of --do_train or --do_eval must be set")
    for name in ("input_file", "output_dir"):
        if not args[name].value:
            raise ValueError(f"--{name} is required")
    input_files = expand_file_patterns(args.input_file, "--input_file")
    model_source.check_max_seq_length(args.max_seq_length, config, config_path)
    if not 1 <= args.max_predictions_per_seq <= args.max_seq_length:
        raise ValueError(
            f"--max_predictions_per_seq: expected 1..{args.max_seq_length} (--max_seq_length), "
            f"got {args.max_predictions_per_seq}"
        )
    options.check(options.from_flags(options.TrainingLoopOptions, args))
    options.check(options.from_flags(PretrainingDataOptions, args))
    check_positive(
        args, ["eval_batch_size", "num_train_steps", "max_eval_steps", "iterations_per_loop"]
    )
    if args.num_warmup_steps < 0:
        raise ValueError(f"--num_warmup_steps: expected >= 0, got {args.num_warmup_steps}")
    if args.do_train and args.num_warmup_steps > args.num_train_steps:
        # Smoke runs keep the default 10000; google-research trains on, as the schedule does.
        logging.warning(
            "--num_warmup_steps=%d exceeds --num_train_steps=%d: warmup never ends, the "
            "learning rate only rises, to %.3g of --learning_rate",
            args.num_warmup_steps,
            args.num_train_steps,
            args.num_train_steps / args.num_warmup_steps,
        )
    if args.dynamic_masking and not _vocab_file(args):
        raise ValueError("--dynamic_masking needs --vocab_file (none beside --init_checkpoint)")
    if args.init_checkpoint and not (
        fileio.isdir(args.init_checkpoint) or tf.io.gfile.glob(args.init_checkpoint + "*")
    ):
        raise ValueError(f"--init_checkpoint={args.init_checkpoint}: no such file or folder")
    return input_files


def _input_error(input_files: list[str], args: flags.FlagValues, error: Exception) -> Exception:
    """The ValueError naming the file and record behind a data error met while training or
    evaluating (only the first record of each file is checked up front), else `error`."""
    logging.warning("reading the records failed; checking --input_file to find the bad one")
    for path in input_files:
        try:
            check_pretraining_file(path, args.max_seq_length, args.max_predictions_per_seq)
        except ValueError as e:
            return e
    return error


def _vocab_file(args: flags.FlagValues) -> str | None:
    """--vocab_file, else the vocab.txt beside --init_checkpoint (as `model_source` resolves)."""
    if args.vocab_file or not args.init_checkpoint:
        return args.vocab_file
    return model_source.checkpoint_file(args.init_checkpoint, VOCAB_NAME)


def _masker(args: flags.FlagValues, config: BertConfig, config_path: str) -> MaskedLmMasker:
    vocab_file = _vocab_file(args)
    vocab = load_vocab(vocab_file)
    model_source.check_vocab_size(vocab_file, len(vocab), config, config_path)
    return MaskedLmMasker.from_vocab(
        vocab,
        whole_word_mask=args.do_whole_word_mask,
        max_predictions_per_seq=args.max_predictions_per_seq,
        masked_lm_prob=args.masked_lm_prob,
    )


def run(args: flags.FlagValues = FLAGS) -> None:
    """The script's work; every bad input raises ValueError/OSError naming the flag or file."""
    config, config_path = _config(args)
    input_files = _check_flags(args, config, config_path)
    # Before anything is written: TF would read a half-copied shard as a shorter, valid one.
    check_tfrecord_files(input_files)
    try:
        _run(args, config, config_path, input_files)
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
        raise _input_error(input_files, args, e) from None


def _run(
    args: flags.FlagValues, config: BertConfig, config_path: str, input_files: list[str]
) -> None:
    # Before any TensorFlow op: multi_worker_mirrored configures collective ops at startup.
    strategy = training.strategy_from_flags(args)
    masker = _masker(args, config, config_path) if args.dynamic_masking else None
    training.seed_and_precision(args.seed, options.from_flags(options.PrecisionOptions, args))
    output_dir = args.output_dir  # a string: a Path would fold gs:// into gs:/
    checkpoints.check_output_dir(output_dir, config)
    fileio.makedirs(output_dir)
    config.to_json_file(os.path.join(output_dir, checkpoints.CONFIG_NAME))
    with strategy.scope():
        model = BertPretrainer(build_encoder(config))

    def dataset(training: bool):
        return pretraining.pretraining_dataset(
            input_files,
            args.max_seq_length,
            args.max_predictions_per_seq,
            args.train_batch_size if training else args.eval_batch_size,
            training=training,
            seed=args.seed,
            masker=masker if training else None,
        )

    global_step = 0
    if args.do_train:
        trainer = training.make_trainer(
            model,
            pretraining.pretraining_loss,
            output_dir,
            strategy,
            options.from_flags(options.TrainingLoopOptions, args),
            num_train_steps=args.num_train_steps,
            num_warmup_steps=args.num_warmup_steps,
            steps_per_loop=args.iterations_per_loop,
            jit_compile=args.use_xla,
        )
        logging.info(
            "training: batch %d, %d steps, %s masking",
            args.train_batch_size,
            args.num_train_steps,
            "dynamic" if masker else "static",
        )
        trainer.train(dataset(True), args.num_train_steps, args.init_checkpoint)
        global_step = int(trainer.global_step)
    elif latest := training.restore_latest(model, output_dir):
        global_step = int(latest.rsplit("-", 1)[1])
        logging.info("restored %s", latest)
    elif args.init_checkpoint:
        checkpoints.load_pretrained(model, args.init_checkpoint, fresh_heads=True)

    if args.do_eval:
        result = {
            **pretraining.evaluate(model, dataset(False), args.max_eval_steps, args.use_xla),
            "global_step": global_step,
        }
        training.write_eval_results(output_dir, result)


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        sys.exit(f"error: unexpected arguments {argv[1:]}")
    try:
        run(FLAGS)
    except (ValueError, OSError, FloatingPointError) as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    define_flags()
    flags_util.run(main)
