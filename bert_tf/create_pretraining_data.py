r"""Creates BERT masked-LM / next-sentence pretraining TFRecords from plain text.

Same flags, algorithm and record layout as google-research/bert `create_pretraining_data.py` (see
`bert_tf.tasks.pretraining.records`). Input: one sentence per line, a blank line between documents.

    python -m bert_tf.create_pretraining_data \
        --input_file='corpus/*.txt' --output_file=train-0.tfrecord,train-1.tfrecord \
        --vocab_file=vocab.txt --do_lower_case --max_seq_length=128 \
        --max_predictions_per_seq=20 --masked_lm_prob=0.15 --dupe_factor=10

With `--runner` the same records are made by an Apache Beam pipeline (`bert_tf.pretraining_beam`)
and written as `--output_file` shards `<output_file>-SSSSS-of-NNNNN`. `--runner=DirectRunner`
runs it here on `--direct_num_workers` processes; any other runner gets `--beam_pipeline_args`
unchanged (repeat the flag, or give several arguments in one quoted value):

    python -m bert_tf.create_pretraining_data --input_file='corpus/*.txt' \
        --output_file=out/train.tfrecord --vocab_file=vocab.txt --runner=DirectRunner \
        --direct_num_workers=4 --num_output_shards=8
    python -m bert_tf.create_pretraining_data --input_file='gs://b/corpus/*.txt' \
        --output_file=gs://b/out/train.tfrecord --vocab_file=gs://b/vocab.txt \
        --runner=DataflowRunner --beam_pipeline_args='--project=P --region=R \
        --temp_location=gs://b/tmp --setup_file=./setup.py'
"""

from __future__ import annotations

import shlex
import sys

from absl import flags

from bert_tf import flags_util, options
from bert_tf.tasks import pretraining
from bert_tf.tasks.options import PretrainingDataOptions

FLAGS = flags.FLAGS


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines this script's flags (in `flag_values`, absl's global FLAGS by default).

    Called when the module runs as a program, never on import, so tests and other scripts can
    import it; tests run `main` in-process on a fresh FlagValues (see tests/conftest.py).
    """
    flags.DEFINE_string(
        "input_file",
        None,
        "Input raw text file(s): comma-separated files or globs.",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "output_file",
        None,
        "Output TFRecord file(s), comma-separated: instances go round-robin.",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "vocab_file",
        None,
        "WordPiece vocab, one token per line (the model's; google-research's flag).",
        flag_values=flag_values,
    )
    # --do_lower_case --max_seq_length, as in every script
    options.define_flags(
        options.ModelSourceOptions, flag_values, only=("do_lower_case", "max_seq_length")
    )
    # --max_predictions_per_seq --masked_lm_prob --do_whole_word_mask --dupe_factor
    # --short_seq_prob, as --pipeline=pretrain's
    options.define_flags(PretrainingDataOptions, flag_values)
    flags.DEFINE_integer(
        "random_seed", 12345, "Random seed for data generation.", flag_values=flag_values
    )
    # One name across the project (the other scripts' and the pipelines' --seed).
    flags.DEFINE_alias("seed", "random_seed", flag_values=flag_values)
    flags.DEFINE_string(
        "runner",
        None,
        "Run as an Apache Beam pipeline on this runner (DirectRunner, DataflowRunner, "
        "FlinkRunner, SparkRunner, ...); unset: one process, as the original.",
        flag_values=flag_values,
    )
    flags.DEFINE_integer(
        "direct_num_workers",
        2,
        "--runner=DirectRunner: worker processes (multi-processing mode; 0 = one per CPU).",
        flag_values=flag_values,
    )
    flags.DEFINE_integer(
        "num_output_shards",
        0,
        "With --runner: output shards (0 = the runner chooses).",
        flag_values=flag_values,
    )
    flags.DEFINE_multi_string(
        "beam_pipeline_args",
        [],
        "With --runner: Beam pipeline options passed through unchanged, e.g. "
        "'--project=P --region=R --temp_location=gs://b/tmp'.",
        flag_values=flag_values,
    )
    flags.mark_flags_as_required(
        ["input_file", "output_file", "vocab_file"], flag_values=flag_values
    )


def beam_pipeline_args(args: flags.FlagValues) -> list[str]:
    """Beam's options: the runner, DirectRunner's multi-processing mode, then
    `--beam_pipeline_args` (split like a shell line), which may override them."""
    pipeline_args = [f"--runner={args.runner}"]
    if args.runner == "DirectRunner":
        pipeline_args += [
            "--direct_running_mode=multi_processing",
            f"--direct_num_workers={args.direct_num_workers}",
        ]
    return pipeline_args + [arg for value in args.beam_pipeline_args for arg in shlex.split(value)]


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        sys.exit(f"error: unexpected arguments {argv[1:]}")
    options = {
        "input_file": FLAGS.input_file,
        "output_file": FLAGS.output_file,
        "vocab_file": FLAGS.vocab_file,
        "do_lower_case": FLAGS.do_lower_case,
        "do_whole_word_mask": FLAGS.do_whole_word_mask,
        "max_seq_length": FLAGS.max_seq_length,
        "max_predictions_per_seq": FLAGS.max_predictions_per_seq,
        "seed": FLAGS.random_seed,
        "dupe_factor": FLAGS.dupe_factor,
        "masked_lm_prob": FLAGS.masked_lm_prob,
        "short_seq_prob": FLAGS.short_seq_prob,
    }
    try:
        if FLAGS.runner:
            if FLAGS.direct_num_workers < 0:
                raise ValueError(
                    f"--direct_num_workers: expected >= 0, got {FLAGS.direct_num_workers}"
                )
            # Imported here: the single-process path does not need Beam.
            from bert_tf.tasks.pretraining import beam as pretraining_beam

            pretraining_beam.create_pretraining_data(
                pipeline_args=beam_pipeline_args(FLAGS),
                num_output_shards=FLAGS.num_output_shards,
                **options,
            )
        elif FLAGS.beam_pipeline_args or FLAGS.num_output_shards:
            raise ValueError("--beam_pipeline_args and --num_output_shards need --runner")
        else:
            pretraining.create_pretraining_data(**options)
    except (ValueError, OSError) as e:  # OSError: unreadable input, full disk
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    define_flags()
    flags_util.run(main)
