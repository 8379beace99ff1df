"""Learning a BERT WordPiece vocabulary from plain-text files (`python -m bert_tf.build_vocab`).

Uses tensorflow-text's `bert_vocab_from_dataset` (the WordPiece learner) on text normalized
exactly as `bert_tf.text.tokenization.BertTokenizer` normalizes it, so the vocab fits that
tokenizer. The reserved tokens come first (ids 0..), then `[unused0]`.. if asked, then the
learned pieces.

Example:

    from bert_tf.text.vocab import build_vocab, write_vocab
    write_vocab(build_vocab(["corpus.txt"], vocab_size=8000), "vocab.txt")
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import tensorflow as tf
from tensorflow_text.tools.wordpiece_vocab.bert_vocab_from_dataset import (
    bert_vocab_from_dataset,
)

from bert_tf import fileio
from bert_tf.text.tokenization import SPECIAL_TOKENS, normalize_text, validate_vocab


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
