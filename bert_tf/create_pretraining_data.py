r"""Creates BERT masked-LM / next-sentence pretraining TFRecords from plain text.

Same flags, algorithm and record layout as google-research/bert `create_pretraining_data.py`
(see `bert_tf.pretraining_data`). Input: one sentence per line, a blank line between documents.

    python -m bert_tf.create_pretraining_data \
        --input_file='corpus/*.txt' --output_file=train-0.tfrecord,train-1.tfrecord \
        --vocab_file=vocab.txt --do_lower_case --max_seq_length=128 \
        --max_predictions_per_seq=20 --masked_lm_prob=0.15 --dupe_factor=10
"""

from __future__ import annotations

import sys

from absl import app, flags

from bert_tf import pretraining_data

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
        "The vocabulary file that the BERT model was trained on.",
        flag_values=flag_values,
    )
    flags.DEFINE_bool(
        "do_lower_case",
        True,
        "Lower case the input text: True for uncased models, False for cased.",
        flag_values=flag_values,
    )
    flags.DEFINE_bool(
        "do_whole_word_mask",
        False,
        "Mask whole words instead of word pieces.",
        flag_values=flag_values,
    )
    flags.DEFINE_integer("max_seq_length", 128, "Maximum sequence length.", flag_values=flag_values)
    flags.DEFINE_integer(
        "max_predictions_per_seq",
        20,
        "Maximum number of masked LM predictions per sequence.",
        flag_values=flag_values,
    )
    flags.DEFINE_integer(
        "random_seed", 12345, "Random seed for data generation.", flag_values=flag_values
    )
    flags.DEFINE_integer(
        "dupe_factor",
        10,
        "Number of times to duplicate the input data (with different masks).",
        flag_values=flag_values,
    )
    flags.DEFINE_float("masked_lm_prob", 0.15, "Masked LM probability.", flag_values=flag_values)
    flags.DEFINE_float(
        "short_seq_prob",
        0.1,
        "Probability of creating sequences shorter than the maximum length.",
        flag_values=flag_values,
    )
    flags.mark_flags_as_required(
        ["input_file", "output_file", "vocab_file"], flag_values=flag_values
    )


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        sys.exit(f"error: unexpected arguments {argv[1:]}")
    try:
        pretraining_data.create_pretraining_data(
            input_file=FLAGS.input_file,
            output_file=FLAGS.output_file,
            vocab_file=FLAGS.vocab_file,
            do_lower_case=FLAGS.do_lower_case,
            do_whole_word_mask=FLAGS.do_whole_word_mask,
            max_seq_length=FLAGS.max_seq_length,
            max_predictions_per_seq=FLAGS.max_predictions_per_seq,
            random_seed=FLAGS.random_seed,
            dupe_factor=FLAGS.dupe_factor,
            masked_lm_prob=FLAGS.masked_lm_prob,
            short_seq_prob=FLAGS.short_seq_prob,
        )
    except (ValueError, FileNotFoundError) as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    define_flags()
    app.run(main)
