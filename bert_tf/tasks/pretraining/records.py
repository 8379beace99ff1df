"""BERT pretraining data: text -> masked LM / next-sentence TFRecords (the record layout, and
the writer; `bert_tf.tasks.pretraining.reader` reads them).

The algorithm and the record layout are google-research/bert `create_pretraining_data.py`'s:

1. Input: one sentence per line, a blank line between documents; sentences are WordPiece
   tokenized (the project's in-graph `BertTokenizer`, in batches) and empty documents dropped.
2. Each document, `dupe_factor` times: sentences are accumulated into a chunk up to a target
   length (`max_seq_length - 3`, or with `short_seq_prob` a random shorter one); the chunk is
   split at a random sentence into A and B. Half the time (always for a one-sentence chunk) B
   is instead taken from a random other document and the unused sentences are put back. The
   pair is truncated to fit (one token at a time from the longer side, front or back at
   random) and packed as `[CLS] A [SEP] B [SEP]` with segment ids 0/1.
3. Masking with `bert_tf.text.masking.MaskedLmMasker` (15%, 80/10/10, optional whole words).
4. Instances are shuffled and written round-robin to the output files as `tf.train.Example`s:
   int64 `input_ids`, `input_mask`, `segment_ids` [max_seq_length], `masked_lm_positions`,
   `masked_lm_ids` [max_predictions_per_seq], `next_sentence_labels` [1] (1 = random B) and
   float `masked_lm_weights` [max_predictions_per_seq], zero-padded. Files written by the
   original tool and by this one are interchangeable.

Determinism, independent of processing order (so a distributed run can reproduce it): the
random choices for document d in duplication round k come from a generator seeded with
(seed, k, d), where d is the document's position in the input (files in the given order,
each glob's matches sorted); instance i of it is masked with seed (seed, k, d, i), and the
output order is the order of those seeds. The original draws everything from one sequential
generator instead, so its files differ from ours for the same seed (same distribution).

Example:

    from bert_tf.tasks import pretraining
    pretraining.create_pretraining_data(
        "corpus.txt", "train.tfrecord", vocab_file="vocab.txt", dupe_factor=2)
    dataset = pretraining.read_pretraining_dataset(
        "train.tfrecord", max_seq_length=128, max_predictions_per_seq=20, batch_size=32)
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf import fileio
from bert_tf.data import corpora
from bert_tf.text.masking import MaskedLmMasker, example_seed
from bert_tf.text.tokenization import BertTokenizer, SpecialTokenIds

# Records (google-research names) -> model inputs (bert_tf.modeling.models names).
MODEL_INPUT_NAMES = {
    "input_ids": "input_word_ids",
    "input_mask": "input_mask",
    "segment_ids": "input_type_ids",
    "masked_lm_positions": "masked_lm_positions",
    "masked_lm_ids": "masked_lm_ids",
    "masked_lm_weights": "masked_lm_weights",
    "next_sentence_labels": "next_sentence_labels",
}
_TOKENIZE_BATCH = 4096  # sentences per tokenizer call
_MASK_BATCH = 1024  # instances per masking call
_LOGGED_EXAMPLES = 20  # the original logs its first 20 instances
S = TypeVar("S")  # a sentence, for sentence_pairs


def feature_spec(max_seq_length: int, max_predictions_per_seq: int) -> dict:
    """`tf.io.parse_example` spec of a pretraining record (google-research layout)."""
    seq, pred = [max_seq_length], [max_predictions_per_seq]
    return {
        "input_ids": tf.io.FixedLenFeature(seq, tf.int64),
        "input_mask": tf.io.FixedLenFeature(seq, tf.int64),
        "segment_ids": tf.io.FixedLenFeature(seq, tf.int64),
        "masked_lm_positions": tf.io.FixedLenFeature(pred, tf.int64),
        "masked_lm_ids": tf.io.FixedLenFeature(pred, tf.int64),
        "masked_lm_weights": tf.io.FixedLenFeature(pred, tf.float32),
        "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
    }


def expand_file_patterns(patterns: str | Sequence[str], what: str = "input_file") -> list[str]:
    """Files matching a comma-separated string or list of globs, each glob's matches sorted.

    Raises FileNotFoundError naming the first pattern that matches nothing.
    """
    if isinstance(patterns, str):
        patterns = patterns.split(",")
    patterns = [p.strip() for p in patterns if p.strip()]
    if not patterns:
        raise ValueError(f"{what} is empty: expected a file, glob or comma-separated list")
    files = []
    for pattern in patterns:
        matches = sorted(tf.io.gfile.glob(pattern))
        if not matches:
            raise FileNotFoundError(f"{what}: no file matches {pattern!r}")
        files.extend(matches)
    return files


def validate_options(
    max_seq_length: int,
    max_predictions_per_seq: int,
    dupe_factor: int,
    masked_lm_prob: float,
    short_seq_prob: float,
) -> None:
    """Raises ValueError naming the first bad option (names match the script's flags)."""
    if max_seq_length < 5:
        raise ValueError(
            f"max_seq_length must be >= 5 ([CLS] A [SEP] B [SEP] with room for a random target "
            f"length of 2), got {max_seq_length}"
        )
    if not 1 <= max_predictions_per_seq <= max_seq_length:
        raise ValueError(
            f"max_predictions_per_seq must be in [1, max_seq_length={max_seq_length}], "
            f"got {max_predictions_per_seq}"
        )
    if dupe_factor < 1:
        raise ValueError(f"dupe_factor must be >= 1, got {dupe_factor}")
    if not 0.0 < masked_lm_prob < 1.0:
        raise ValueError(f"masked_lm_prob must be in (0, 1), got {masked_lm_prob}")
    if not 0.0 <= short_seq_prob <= 1.0:
        raise ValueError(f"short_seq_prob must be in [0, 1], got {short_seq_prob}")


def text_documents(input_files: Sequence[str]) -> Iterator[list[str]]:
    """Yields each document's sentences (stripped non-empty lines), in input order.

    A blank line ends a document, and so does a file's end (google-research's reader would run
    a file's last document on into the next file's first when the file lacks a final blank line).
    """
    for path in input_files:
        yield from corpora.text_format_documents(_text_lines(path))


def _text_lines(path: str) -> Iterator[str]:
    """`path`'s lines as text; a line that is not UTF-8 is an error naming it."""
    with tf.io.gfile.GFile(path, "rb") as f:
        for line_number, raw in enumerate(f, 1):
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"{path}:{line_number}: not UTF-8 text ({e})") from None


def tokenize_documents(
    documents: Sequence[Sequence[str]], tokenizer: BertTokenizer
) -> list[list[list[int]]]:
    """Each document's sentences as token ids (one tokenizer call for all); a sentence with no
    token (e.g. only control characters) gets [], which callers drop."""
    sentences = [s for document in documents for s in document]
    ids = iter(tokenizer(tf.constant(sentences)).to_list()) if sentences else iter(())
    return [[next(ids) for _ in document] for document in documents]


def read_documents(input_files: Sequence[str], tokenizer: BertTokenizer) -> list[list[list[int]]]:
    """Tokenized documents (lists of sentences of ids), in input order, empty ones dropped."""
    documents: list[list[list[int]]] = []
    pending: list[list[str]] = []  # documents awaiting tokenization, in batches of sentences

    def flush():
        for document in tokenize_documents(pending, tokenizer):
            documents.append([tokens for tokens in document if tokens])
        pending.clear()

    batched = 0
    for document in text_documents(input_files):
        pending.append(document)
        batched += len(document)
        if batched >= _TOKENIZE_BATCH:
            flush()
            batched = 0
    flush()
    return [doc for doc in documents if doc]


def truncate_seq_pair(
    tokens_a: list[int], tokens_b: list[int], max_num_tokens: int, rng: random.Random
) -> None:
    """Shortens the longer list (B on ties) by one token, front or back at random, until the
    pair fits; in place."""
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        longer = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        if rng.random() < 0.5:
            del longer[0]
        else:
            longer.pop()


@dataclasses.dataclass
class TrainingInstance:
    """One unmasked sentence pair: `tokens` = [CLS] A [SEP] B [SEP] ids."""

    tokens: list[int]
    segment_ids: list[int]
    is_random_next: bool
    seed: tuple[int, int]  # masking seed; also the instance's place in the output order


def document_rng(seed: int, dupe_index: int, document_index: int) -> random.Random:
    """The generator of one document's choices in one duplication round."""
    high, low = example_seed(seed, dupe_index, document_index)
    return random.Random((high << 32) | low)


def sentence_pairs(
    documents: Sequence[Sequence[S]],
    document_index: int,
    max_num_tokens: int,
    short_seq_prob: float,
    rng: random.Random,
    length: Callable[[S], int] = len,
) -> Iterator[tuple[list[S], list[S], bool]]:
    """Yields one document's (A sentences, B sentences, is_random_next) pairs, untruncated.

    A sentence is anything `length` maps to its token count: the ids themselves here, or
    (text, count) pairs for the TFX ExampleGen, which keeps the text. Lazy, so a caller that
    draws from `rng` between pairs (truncation) keeps google-research's order of draws.
    """
    document = documents[document_index]
    # Mostly fill the sequence; sometimes (short_seq_prob) aim shorter, to resemble the short
    # inputs of fine-tuning. The target is soft: only max_seq_length is a hard limit.
    target_seq_length = max_num_tokens
    if rng.random() < short_seq_prob:
        target_seq_length = rng.randint(2, max_num_tokens)

    chunk: list[S] = []
    chunk_length = 0
    i = 0
    while i < len(document):
        chunk.append(document[i])
        chunk_length += length(document[i])
        if i == len(document) - 1 or chunk_length >= target_seq_length:
            a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            sentences_a = chunk[:a_end]
            is_random_next = len(chunk) == 1 or rng.random() < 0.5
            if is_random_next:
                target_b_length = target_seq_length - sum(map(length, sentences_a))
                # Another document (retries make a self-pick rare but, as in the original,
                # possible with very few documents).
                for _ in range(10):
                    random_index = rng.randint(0, len(documents) - 1)
                    if random_index != document_index:
                        break
                random_document = documents[random_index]
                sentences_b, b_length = [], 0
                for sentence in random_document[rng.randint(0, len(random_document) - 1) :]:
                    sentences_b.append(sentence)
                    b_length += length(sentence)
                    if b_length >= target_b_length:
                        break
                i -= len(chunk) - a_end  # put the unused sentences back
            else:
                sentences_b = chunk[a_end:]
            yield sentences_a, sentences_b, is_random_next
            chunk, chunk_length = [], 0
        i += 1


def create_instances_from_document(
    documents: Sequence[list[list[int]]],
    document_index: int,
    dupe_index: int,
    max_seq_length: int,
    short_seq_prob: float,
    seed: int,
    special_ids: SpecialTokenIds,
) -> list[TrainingInstance]:
    """The sentence-pair instances of one document for one duplication round."""
    rng = document_rng(seed, dupe_index, document_index)
    max_num_tokens = max_seq_length - 3  # [CLS], [SEP], [SEP]
    instances = []
    for sentences_a, sentences_b, is_random_next in sentence_pairs(
        documents, document_index, max_num_tokens, short_seq_prob, rng
    ):
        tokens_a = [t for sentence in sentences_a for t in sentence]
        tokens_b = [t for sentence in sentences_b for t in sentence]
        truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
        tokens = [special_ids.cls, *tokens_a, special_ids.sep, *tokens_b, special_ids.sep]
        instances.append(
            TrainingInstance(
                tokens=tokens,
                segment_ids=[0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1),
                is_random_next=is_random_next,
                seed=example_seed(seed, dupe_index, document_index, len(instances)),
            )
        )
    return instances


def create_training_instances(
    documents: Sequence[list[list[int]]],
    special_ids: SpecialTokenIds,
    max_seq_length: int = 128,
    dupe_factor: int = 10,
    short_seq_prob: float = 0.1,
    seed: int = 12345,
) -> list[TrainingInstance]:
    """All instances, shuffled (ordered by their seeds: a shuffle any process can reproduce)."""
    instances = []
    start = time.monotonic()
    for dupe_index in range(dupe_factor):
        for document_index in range(len(documents)):
            instances.extend(
                create_instances_from_document(
                    documents,
                    document_index,
                    dupe_index,
                    max_seq_length,
                    short_seq_prob,
                    seed,
                    special_ids,
                )
            )
        logging.info(
            "duplication round %d/%d: %d instances so far (%.0f instances/s)",
            dupe_index + 1,
            dupe_factor,
            len(instances),
            len(instances) / max(time.monotonic() - start, 1e-9),
        )
    instances.sort(key=lambda instance: instance.seed)
    return instances


def mask_instances(
    instances: Sequence[TrainingInstance], masker: MaskedLmMasker, max_seq_length: int
) -> Iterator[dict[str, np.ndarray]]:
    """Yields each instance's record features (numpy, zero-padded as the original), in order."""
    for start in range(0, len(instances), _MASK_BATCH):
        batch = instances[start : start + _MASK_BATCH]
        ids = tf.RaggedTensor.from_row_lengths(
            np.concatenate([instance.tokens for instance in batch]).astype(np.int32),
            [len(instance.tokens) for instance in batch],
        )
        seeds = np.array([instance.seed for instance in batch], np.int64)
        masked = masker(ids, seeds)
        masked["input_ids"] = masked["input_ids"].to_tensor(0, shape=[None, max_seq_length])
        masked = {k: v.numpy() for k, v in masked.items()}
        for row, instance in enumerate(batch):
            padding = max_seq_length - len(instance.tokens)
            yield {
                "input_ids": masked["input_ids"][row],
                "input_mask": np.pad(np.ones(len(instance.tokens), np.int64), (0, padding)),
                "segment_ids": np.pad(instance.segment_ids, (0, padding)),
                "masked_lm_positions": masked["masked_lm_positions"][row],
                "masked_lm_ids": masked["masked_lm_ids"][row],
                "masked_lm_weights": masked["masked_lm_weights"][row],
                "next_sentence_labels": np.array([int(instance.is_random_next)]),
            }


def to_example(features: dict[str, np.ndarray]) -> tf.train.Example:
    """A record's `tf.train.Example` (float list for the weights, int64 lists otherwise)."""
    feature = {}
    for name, values in features.items():
        if name == "masked_lm_weights":
            feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=values))
        else:
            feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    return tf.train.Example(features=tf.train.Features(feature=feature))


def _log_example(features: dict[str, np.ndarray], vocabulary: Sequence[str]) -> None:
    """The original's "*** Example ***" log: tokens, then every feature's values."""
    length = int(features["input_mask"].sum())
    logging.info("*** Example ***")
    logging.info("tokens: %s", " ".join(vocabulary[i] for i in features["input_ids"][:length]))
    for name, values in features.items():
        logging.info("%s: %s", name, " ".join(str(v) for v in values.tolist()))


def write_instance_examples(
    features: Iterator[dict[str, np.ndarray]],
    output_files: Sequence[str],
    vocabulary: Sequence[str] | None = None,
) -> int:
    """Writes records round-robin over `output_files`, each atomically (temp file, then rename).

    Logs the first examples as the original does when `vocabulary` is given; returns the count.
    """
    for path in output_files:
        if os.path.dirname(path):
            tf.io.gfile.makedirs(os.path.dirname(path))
    count = 0
    # Every file under a temp name until all are complete (then renamed in order); on an error
    # none of them is left, half-written or not.
    with contextlib.ExitStack() as stack:
        temps = [stack.enter_context(fileio.atomic_path(path)) for path in output_files]
        writers = [stack.enter_context(tf.io.TFRecordWriter(temp)) for temp in temps]
        start = time.monotonic()
        for count, record in enumerate(features, 1):
            # deterministic=True: the feature map in key order, so equal records are equal bytes.
            example = to_example(record).SerializeToString(deterministic=True)
            writers[(count - 1) % len(writers)].write(example)
            if vocabulary is not None and count <= _LOGGED_EXAMPLES:
                _log_example(record, vocabulary)
            if count % 10_000 == 0:
                rate = count / max(time.monotonic() - start, 1e-9)
                logging.info("wrote %d instances (%.0f instances/s)", count, rate)
    logging.info("Wrote %d total instances", count)
    return count


def create_pretraining_data(
    input_file: str | Sequence[str],
    output_file: str | Sequence[str],
    vocab_file: str | os.PathLike,
    do_lower_case: bool = True,
    do_whole_word_mask: bool = False,
    max_seq_length: int = 128,
    max_predictions_per_seq: int = 20,
    seed: int = 12345,
    dupe_factor: int = 10,
    masked_lm_prob: float = 0.15,
    short_seq_prob: float = 0.1,
) -> int:
    """Text files -> pretraining TFRecords (arguments as the script's flags); returns the
    number of instances written."""
    validate_options(
        max_seq_length, max_predictions_per_seq, dupe_factor, masked_lm_prob, short_seq_prob
    )
    input_files = expand_file_patterns(input_file)
    if isinstance(output_file, str):
        output_file = output_file.split(",")
    output_files = [path.strip() for path in output_file]
    if not output_files or not all(output_files):
        raise ValueError(f"output_file must be a file or comma-separated list, got {output_file!r}")
    tokenizer = BertTokenizer(vocab_file, lower_case=do_lower_case)
    vocabulary = tokenizer.vocabulary

    logging.info("*** Reading from input files ***")
    for path in input_files:
        logging.info("  %s", path)
    start = time.monotonic()
    documents = read_documents(input_files, tokenizer)
    if not documents:
        raise ValueError(f"input_file: no document with any token in {', '.join(input_files)}")
    logging.info(
        "read %d documents, %d sentences in %.1f s",
        len(documents),
        sum(len(d) for d in documents),
        time.monotonic() - start,
    )

    instances = create_training_instances(
        documents,
        tokenizer.special_ids,
        max_seq_length=max_seq_length,
        dupe_factor=dupe_factor,
        short_seq_prob=short_seq_prob,
        seed=seed,
    )
    masker = MaskedLmMasker.from_vocab(
        vocabulary,
        whole_word_mask=do_whole_word_mask,
        max_predictions_per_seq=max_predictions_per_seq,
        masked_lm_prob=masked_lm_prob,
    )
    logging.info("*** Writing to output files ***")
    for path in output_files:
        logging.info("  %s", path)
    return write_instance_examples(
        mask_instances(instances, masker, max_seq_length), output_files, vocabulary
    )
