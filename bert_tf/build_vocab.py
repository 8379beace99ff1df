r"""Learns a BERT WordPiece vocabulary (`vocab.txt`) from plain-text files (`bert_tf.text.vocab`).

    python -m bert_tf.build_vocab \
        --input_files='corpus/*.txt,more.txt' --output_file=vocab.txt \
        --vocab_size=30522 --lower_case --num_unused=100

Or from python:

    from bert_tf.text.vocab import build_vocab
    vocab = build_vocab(["corpus.txt"], vocab_size=8000)
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

from absl import flags

from bert_tf import flags_util
from bert_tf.text.tokenization import SPECIAL_TOKENS
from bert_tf.text.vocab import build_vocab, write_vocab

FLAGS = flags.FLAGS


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines this script's flags (in `flag_values`, absl's global FLAGS by default).

    Called when the module runs as a program, never on import, so tests and other scripts can
    import it; tests run `main` in-process on a fresh FlagValues (see tests/conftest.py).
    """
    flags.DEFINE_list(
        "input_files",
        None,
        "Comma-separated text files or globs, one text per line.",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "output_file",
        None,
        "Where to write the vocab, one token per line.",
        flag_values=flag_values,
    )
    flags.DEFINE_integer(
        "vocab_size",
        30522,
        "Maximum vocabulary size, reserved tokens included.",
        flag_values=flag_values,
    )
    flags.DEFINE_bool(
        "lower_case", True, "Lowercase and strip accents (uncased model).", flag_values=flag_values
    )
    flags.DEFINE_integer(
        "max_lines", None, "Read at most this many non-empty lines in all.", flag_values=flag_values
    )
    flags.DEFINE_list(
        "reserved_tokens",
        list(SPECIAL_TOKENS),
        "Tokens placed first; must include all specials.",
        flag_values=flag_values,
    )
    flags.DEFINE_integer(
        "num_unused",
        0,
        "Add [unused0]..[unusedN-1] after the reserved tokens.",
        flag_values=flag_values,
    )


def main(argv: Sequence[str]) -> None:
    if len(argv) > 1:
        sys.exit(f"error: unexpected arguments {argv[1:]}")
    for name in ("input_files", "output_file"):
        if not FLAGS[name].value:
            sys.exit(f"error: --{name} is required")
    start = time.perf_counter()
    try:
        vocab = build_vocab(
            FLAGS.input_files,
            FLAGS.vocab_size,
            lower_case=FLAGS.lower_case,
            reserved_tokens=FLAGS.reserved_tokens,
            num_unused=FLAGS.num_unused,
            max_lines=FLAGS.max_lines,
        )
    except (ValueError, FileNotFoundError) as e:
        sys.exit(f"error: {e}")  # messages start with the flag name
    write_vocab(vocab, FLAGS.output_file)
    num_reserved = len(FLAGS.reserved_tokens) + FLAGS.num_unused
    print(
        f"wrote {FLAGS.output_file}: {len(vocab)} tokens ({num_reserved} reserved, "
        f"{len(vocab) - num_reserved} learned; asked for at most {FLAGS.vocab_size}), "
        f"lower_case={FLAGS.lower_case}, {time.perf_counter() - start:.1f} s"
    )


if __name__ == "__main__":
    define_flags()
    flags_util.run(main)
