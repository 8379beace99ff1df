r"""Learns a BERT WordPiece vocabulary (`vocab.txt`) from plain-text files.

Uses tensorflow-text's `bert_vocab_from_dataset` (the WordPiece learner) on text normalized
exactly as `bert_tf.tokenization.BertTokenizer` normalizes it, so the vocab fits that tokenizer.
The reserved tokens come first (ids 0..), then `[unused0]`.. if asked, then the learned pieces.

    python -m bert_tf.build_vocab \
        --input_files='corpus/*.txt,more.txt' --output_file=vocab.txt \
        --vocab_size=30522 --lower_case --num_unused=100

Or from python:

    from bert_tf.build_vocab import build_vocab
    vocab = build_vocab(["corpus.txt"], vocab_size=8000)
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence

import tensorflow as tf
from absl import app, flags
from tensorflow_text.tools.wordpiece_vocab.bert_vocab_from_dataset import (
    bert_vocab_from_dataset,
)

from bert_tf import fileio
from bert_tf.tokenization import SPECIAL_TOKENS, normalize_text, validate_vocab

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


def expand_input_files(patterns: Sequence[str]) -> list[str]:
    """Globs each pattern; raises FileNotFoundError naming the first pattern matching nothing."""
    if not patterns:
        raise ValueError("input_files: expected at least one file or glob")
    files = []
    for pattern in patterns:
        matches = sorted(tf.io.gfile.glob(pattern))
        if not matches:
            raise FileNotFoundError(f"input_files: no file matches {pattern!r}")
        files.extend(matches)
    return files


def build_vocab(
    input_files: Sequence[str],
    vocab_size: int,
    lower_case: bool = True,
    reserved_tokens: Sequence[str] = SPECIAL_TOKENS,
    num_unused: int = 0,
    max_lines: int | None = None,
) -> list[str]:
    """Learns a WordPiece vocab from text files (globs allowed); returns tokens in id order."""
    if num_unused < 0:
        raise ValueError(f"num_unused: expected >= 0, got {num_unused}")
    reserved = list(reserved_tokens) + [f"[unused{i}]" for i in range(num_unused)]
    missing = [t for t in SPECIAL_TOKENS if t not in reserved]
    if missing:
        raise ValueError(f"reserved_tokens: missing the special token(s) {missing}")
    if vocab_size <= len(reserved):
        raise ValueError(
            f"vocab_size: expected more than the {len(reserved)} reserved tokens, got {vocab_size}"
        )
    if max_lines is not None and max_lines <= 0:
        raise ValueError(f"max_lines: expected a positive number, got {max_lines}")
    files = expand_input_files(input_files)

    lines = tf.data.TextLineDataset(files).filter(lambda line: tf.strings.length(line) > 0)
    if max_lines is not None:
        lines = lines.take(max_lines)
    if not any(True for _ in lines.take(1)):
        raise ValueError(f"input_files: no non-empty line in {files}")
    texts = lines.batch(1024).map(lambda batch: normalize_text(batch, lower_case))
    # Normalization is done above (BertTokenizer's own), so the learner's basic tokenizer only
    # splits words; its lower_case would apply tensorflow-text's NFKC case folding instead.
    vocab = bert_vocab_from_dataset(
        texts, vocab_size, reserved, bert_tokenizer_params={"lower_case": False}
    )
    return validate_vocab(vocab, "learned vocab")


def write_vocab(tokens: Sequence[str], output_file: str) -> None:
    """Writes one token per line via a temporary file and a rename (never a partial vocab)."""
    parent = os.path.dirname(output_file)
    if parent:
        tf.io.gfile.makedirs(parent)
    fileio.atomic_write_text(output_file, "".join(f"{token}\n" for token in tokens))


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
    app.run(main)
