"""Which split a pretraining document goes to, told without TensorFlow or Beam.

PretrainingExampleGen hashes documents, not sentence pairs, into its output splits (so no
document, nor any random B segment drawn from one, is in both train and eval). The rule lives
here so that `python -m tfx_pipeline.run` can tell before any component runs that a small
corpus leaves a split empty, which would otherwise fail deep inside Beam.

Example:

    from tfx_pipeline import corpus_split
    corpus_split.bucket_of(["First sentence.", "Second."], corpus_split.TRAIN_EVAL_BUCKETS)  # 0 or 1
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterable, Sequence

from bert_tf.data import corpora

# TFX's default output_config (`utils.make_default_output_config`): train:eval = 2:1 hash buckets.
TRAIN_EVAL_SPLITS = ("train", "eval")
TRAIN_EVAL_BUCKETS = (2, 1)


def bucket_of(sentences: Sequence[str], buckets: Sequence[int]) -> int:
    """Index of the split whose hash buckets hold the document (its sentences' text)."""
    ends = list(itertools.accumulate(buckets))
    text = "\n".join(sentences).encode("utf-8")
    bucket = int.from_bytes(hashlib.sha256(text).digest()[:8], "big") % ends[-1]
    return next(i for i, end in enumerate(ends) if bucket < end)


def split_counts(
    files: Iterable[str],
    buckets: Sequence[int] = TRAIN_EVAL_BUCKETS,
    until_every_split: bool = False,
) -> list[int]:
    """Documents per split of local text files. A sentence with no WordPiece token (only
    control characters) is dropped before the ExampleGen hashes, so a document holding one may
    land elsewhere there: an estimate for up-front checks, exact for ordinary text.
    `until_every_split`: stop reading once every split has a document (a large corpus is not
    read twice; the counts are then lower bounds, exact where one stays 0)."""
    counts = [0] * len(buckets)
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as f:  # local files only (run.py)
            for document in corpora.text_format_documents(f):
                counts[bucket_of(document, buckets)] += 1
                if until_every_split and all(counts):
                    return counts
    return counts
