"""SQuAD reading and features: examples from the JSON, doc-stride windows, the tf.data input
and the span loss (google-research `run_squad.py`'s `read_squad_examples`,
`convert_examples_to_features`, `input_fn_builder`, and its loss).

See `bert_tf.tasks.squad` for the whole flow.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf.flags_util import decode_utf8
from bert_tf.modeling.encoder import INPUT_NAMES
from bert_tf.text.tokenization import (
    BertTokenizer,
)

# Strings per tokenizer call: large enough to amortise the op launch, small enough for memory.
TOKENIZE_BATCH = 16384


@dataclasses.dataclass
class SquadExample:
    """One question with its context split into whitespace-separated words.

    `start_position`/`end_position` are word indexes of the answer (training only; -1 for an
    unanswerable v2.0 question).
    """

    qas_id: str
    question_text: str
    doc_tokens: list[str]
    orig_answer_text: str = ""
    start_position: int | None = None
    end_position: int | None = None
    is_impossible: bool = False


@dataclasses.dataclass
class SquadFeature:
    """One `[CLS] query [SEP] window [SEP]` model input of one example (unpadded ids).

    `token_to_orig_map` maps a token position to its doc word index; `token_is_max_context`
    is True where this window gives the token the most context on both sides.
    `start_position`/`end_position` are token positions (0, [CLS], when the answer is not in
    this window or the question is unanswerable); None outside training.
    """

    example_index: int
    doc_span_index: int
    tokens: list[str]
    token_to_orig_map: dict[int, int]
    token_is_max_context: dict[int, bool]
    input_ids: list[int]
    segment_ids: list[int]
    start_position: int | None = None
    end_position: int | None = None
    is_impossible: bool = False


def read_squad_json(input_file: str | os.PathLike) -> list[dict]:
    """The `data` list (articles) of a SQuAD JSON file; the official scripts' `dataset`."""
    path = os.fspath(input_file)
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"SQuAD file not found: {path}")
    with tf.io.gfile.GFile(path, "rb") as f:
        text = decode_utf8(f.read(), path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise ValueError(f'{path}: expected a SQuAD JSON object with a "data" list of articles')
    return data["data"]


# What separates the context's doc words: google-research's `is_whitespace` (U+202F, narrow
# no-break space, occurs in SQuAD contexts). `ingraph` splits served contexts on the same.
DOC_WHITESPACE = " \t\r\n\u202f"


def _is_whitespace(c: str) -> bool:
    return c in DOC_WHITESPACE


def _split_words(text: str) -> tuple[list[str], list[int]]:
    """Whitespace words of `text` and, per character, the index of its word."""
    words: list[str] = []
    char_to_word: list[int] = []
    previous_is_whitespace = True
    for c in text:
        if _is_whitespace(c):
            previous_is_whitespace = True
        else:
            if previous_is_whitespace:
                words.append(c)
            else:
                words[-1] += c
            previous_is_whitespace = False
        char_to_word.append(len(words) - 1)
    return words, char_to_word


def _field(obj, key: str, kinds: tuple[type, ...], where: str):
    """`obj[key]` if `obj` is a JSON object and the value one of `kinds`; else ValueError
    naming `where` in the file and what was expected."""
    value = obj.get(key) if isinstance(obj, dict) else None
    if not isinstance(value, kinds) or isinstance(value, bool):
        expected = " or ".join(kind.__name__ for kind in kinds)
        raise ValueError(f'{where}: expected "{key}" ({expected}), got {value!r:.100}')
    return value


def _check_answer(path: str, qas_id: str, context: str, answer: dict) -> None:
    text = answer.get("text") if isinstance(answer, dict) else None
    start = answer.get("answer_start") if isinstance(answer, dict) else None
    if not isinstance(text, str) or not isinstance(start, int) or start < 0:
        raise ValueError(
            f'{path}: question "{qas_id}": each answer needs "text" (string) and '
            f'"answer_start" (integer >= 0), got {answer!r:.200}'
        )
    found = context[start : start + len(text)]
    if found != text:
        raise ValueError(
            f'{path}: question "{qas_id}": answer_start {start} does not match the answer '
            f"text {text!r} (the context has {found!r} there)"
        )


def read_squad_examples(
    input_file: str | os.PathLike, training: bool, version_2_with_negative: bool = False
) -> list[SquadExample]:
    """Reads a SQuAD v1.1/v2.0 JSON file into examples (google-research `read_squad_examples`).

    Every answer's `answer_start` must point at its `text` in the context (ValueError naming the
    question otherwise). Training needs exactly one answer per answerable question; a training
    answer whose words do not contain its text (offsets inside odd whitespace) is skipped with
    a warning, as the original does.
    """
    path = os.fspath(input_file)
    examples = []
    for a, article in enumerate(read_squad_json(path)):
        where = f"{path}: data[{a}]"
        paragraphs = article.get("paragraphs", []) if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            raise ValueError(f'{where}: expected an article object with a "paragraphs" list')
        for p, paragraph in enumerate(paragraphs):
            context = _field(paragraph, "context", (str,), f"{where}.paragraphs[{p}]")
            doc_tokens, char_to_word = _split_words(context)
            for q, qa in enumerate(_field(paragraph, "qas", (list,), f"{where}.paragraphs[{p}]")):
                question_where = f"{where}.paragraphs[{p}].qas[{q}]"
                qas_id = str(_field(qa, "id", (str, int), question_where))
                question = _field(qa, "question", (str,), question_where)
                answers = qa.get("answers", [])
                if not isinstance(answers, list):
                    raise ValueError(f'{question_where}: expected "answers" (list)')
                for answer in answers:
                    _check_answer(path, qas_id, context, answer)
                is_impossible = version_2_with_negative and bool(qa.get("is_impossible", False))
                example = SquadExample(
                    qas_id=qas_id,
                    question_text=question,
                    doc_tokens=doc_tokens,
                    is_impossible=is_impossible,
                )
                if training and is_impossible:
                    example.start_position = example.end_position = -1
                elif training:
                    if len(answers) != 1:
                        hint = (
                            ""
                            if version_2_with_negative
                            else (" (unanswerable v2.0 questions need --version_2_with_negative)")
                        )
                        raise ValueError(
                            f'{path}: question "{qas_id}": training needs exactly 1 answer, '
                            f"got {len(answers)}{hint}"
                        )
                    answer = answers[0]
                    start = answer["answer_start"]
                    end = start + len(answer["text"]) - 1
                    example.orig_answer_text = answer["text"]
                    example.start_position = char_to_word[start]
                    example.end_position = char_to_word[end]
                    actual = " ".join(doc_tokens[example.start_position : example.end_position + 1])
                    if " ".join(answer["text"].split()) not in actual:
                        logging.warning(
                            "skipping question %s: answer %r not found in its words %r",
                            qas_id,
                            answer["text"],
                            actual,
                        )
                        continue
                examples.append(example)
    return examples


def _wordpieces(tokenizer: BertTokenizer, texts: Sequence[str]) -> list[list[str]]:
    """WordPiece token strings of each text, tokenized in large in-graph batches."""
    vocab = tokenizer.vocabulary
    pieces: list[list[str]] = []
    for i in range(0, len(texts), TOKENIZE_BATCH):
        ids = tokenizer(tf.constant(list(texts[i : i + TOKENIZE_BATCH]))).to_list()
        pieces.extend([vocab[j] for j in row] for row in ids)
    return pieces


def _improve_answer_span(
    doc_tokens: list[str], start: int, end: int, answer_tokens: list[str]
) -> tuple[int, int]:
    """The tightest token span inside [start, end] that tokenizes exactly like the answer.

    The answer "1895" in the word "(1895-1943)." starts and ends mid-word; the word-level span
    covers the whole word, this narrows it to the answer's own WordPiece tokens.
    """
    answer = " ".join(answer_tokens)
    for new_start in range(start, end + 1):
        for new_end in range(end, new_start - 1, -1):
            if " ".join(doc_tokens[new_start : new_end + 1]) == answer:
                return new_start, new_end
    return start, end


def _doc_spans(num_tokens: int, max_tokens: int, doc_stride: int) -> list[tuple[int, int]]:
    """(start, length) windows over the doc tokens, each starting `doc_stride` after the last."""
    spans = []
    start = 0
    while start < num_tokens:
        length = min(num_tokens - start, max_tokens)
        spans.append((start, length))
        if start + length == num_tokens:
            break
        start += min(length, doc_stride)
    return spans


def _is_max_context(spans: list[tuple[int, int]], span_index: int, position: int) -> bool:
    """Whether window `span_index` gives doc token `position` its best context.

    Score = min(tokens to the left, tokens to the right) + 0.01 * window length; ties go to the
    first window, as in google-research.
    """
    best_score, best_index = None, None
    for index, (start, length) in enumerate(spans):
        end = start + length - 1
        if not start <= position <= end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best_score, best_index = score, index
    return best_index == span_index


def convert_examples_to_features(
    examples: Sequence[SquadExample],
    tokenizer: BertTokenizer,
    max_seq_length: int,
    doc_stride: int,
    max_query_length: int,
    training: bool,
) -> list[SquadFeature]:
    """Windows every example into `[CLS] query [SEP] doc-window [SEP]` features.

    The query keeps its first `max_query_length` tokens; each window holds up to
    `max_seq_length - len(query) - 3` doc tokens. For training, an answer outside a window (or
    an unanswerable question) points at [CLS] (position 0), as google-research does.
    """
    if max_seq_length <= max_query_length + 3:
        raise ValueError(
            f"max_seq_length ({max_seq_length}) must exceed max_query_length "
            f"({max_query_length}) + 3"
        )
    if doc_stride <= 0:
        raise ValueError(f"doc_stride must be positive, got {doc_stride}")
    # Contexts repeat across questions: tokenize each distinct word once.
    words = sorted({w for e in examples for w in e.doc_tokens})
    word_pieces = dict(zip(words, _wordpieces(tokenizer, words), strict=True))
    queries = _wordpieces(tokenizer, [e.question_text for e in examples])
    answers = _wordpieces(tokenizer, [e.orig_answer_text for e in examples]) if training else None
    vocab_index = {token: i for i, token in enumerate(tokenizer.vocabulary)}
    cls_token, sep_token = (
        tokenizer.vocabulary[i] for i in (tokenizer.special_ids.cls, tokenizer.special_ids.sep)
    )
    features = []
    for example_index, example in enumerate(examples):
        query = queries[example_index][:max_query_length]
        tok_to_orig, orig_to_tok, doc = [], [], []
        for word_index, word in enumerate(example.doc_tokens):
            orig_to_tok.append(len(doc))
            for piece in word_pieces[word]:
                tok_to_orig.append(word_index)
                doc.append(piece)

        tok_start = tok_end = None
        if training and not example.is_impossible:
            tok_start = orig_to_tok[example.start_position]
            last_word = example.end_position == len(example.doc_tokens) - 1
            tok_end = len(doc) - 1 if last_word else orig_to_tok[example.end_position + 1] - 1
            tok_start, tok_end = _improve_answer_span(
                doc, tok_start, tok_end, answers[example_index]
            )

        spans = _doc_spans(len(doc), max_seq_length - len(query) - 3, doc_stride)
        for span_index, (span_start, span_length) in enumerate(spans):
            tokens = [cls_token, *query, sep_token]
            segment_ids = [0] * len(tokens)
            token_to_orig_map, token_is_max_context = {}, {}
            for i in range(span_start, span_start + span_length):
                token_to_orig_map[len(tokens)] = tok_to_orig[i]
                token_is_max_context[len(tokens)] = _is_max_context(spans, span_index, i)
                tokens.append(doc[i])
            tokens.append(sep_token)
            segment_ids += [1] * (span_length + 1)

            start_position = end_position = None
            if training:
                start_position = end_position = 0
                inside = (
                    tok_start is not None
                    and span_start <= tok_start
                    and tok_end <= span_start + span_length - 1
                )
                if inside:
                    offset = len(query) + 2 - span_start
                    start_position, end_position = tok_start + offset, tok_end + offset
            features.append(
                SquadFeature(
                    example_index=example_index,
                    doc_span_index=span_index,
                    tokens=tokens,
                    token_to_orig_map=token_to_orig_map,
                    token_is_max_context=token_is_max_context,
                    input_ids=[vocab_index[t] for t in tokens],
                    segment_ids=segment_ids,
                    start_position=start_position,
                    end_position=end_position,
                    is_impossible=example.is_impossible,
                )
            )
    return features


def feature_arrays(features: Sequence[SquadFeature], max_seq_length: int) -> dict[str, np.ndarray]:
    """Padded int32 arrays `[num_features, max_seq_length]` of the model inputs.

    Also `start_positions`/`end_positions` `[num_features]` when the features have them
    (training).
    """
    n = len(features)
    arrays = {name: np.zeros((n, max_seq_length), np.int32) for name in INPUT_NAMES}
    for row, feature in enumerate(features):
        length = len(feature.input_ids)
        arrays["input_word_ids"][row, :length] = feature.input_ids
        arrays["input_mask"][row, :length] = 1
        arrays["input_type_ids"][row, :length] = feature.segment_ids
    if features and features[0].start_position is not None:
        arrays["start_positions"] = np.array([f.start_position for f in features], np.int32)
        arrays["end_positions"] = np.array([f.end_position for f in features], np.int32)
    return arrays


def features_to_dataset(
    features: Sequence[SquadFeature],
    max_seq_length: int,
    batch_size: int,
    training: bool,
    seed: int = 12345,
) -> tf.data.Dataset:
    """Batches of feature dicts, held in memory (google-research writes TFRecords first).

    Training: model inputs plus `start_positions`/`end_positions`, reshuffled every epoch,
    repeated, full batches only. Otherwise: model inputs only, in feature order, so output row
    i belongs to `features[i]`.
    """
    arrays = feature_arrays(features, max_seq_length)
    if not training:
        arrays = {name: arrays[name] for name in INPUT_NAMES}
        return tf.data.Dataset.from_tensor_slices(arrays).batch(batch_size)
    if "start_positions" not in arrays:
        raise ValueError("training features need start/end positions (training=True)")
    # Shuffle row indexes, not rows: the shuffle buffer is saved with the input iterator in
    # every training checkpoint, and indexes keep it small.
    tensors = {name: tf.constant(array) for name, array in arrays.items()}
    return (
        tf.data.Dataset.range(len(features))
        .shuffle(len(features), seed=seed, reshuffle_each_iteration=True)
        .repeat()
        .batch(batch_size, drop_remainder=True)
        .map(lambda rows: {name: tf.gather(t, rows) for name, t in tensors.items()})
        .prefetch(tf.data.AUTOTUNE)
    )


def loss_fn(model: keras.Model, batch: dict) -> tuple[tf.Tensor, dict]:
    """`Trainer` hook: mean of the start and end position cross-entropies (google-research)."""
    outputs = model({name: batch[name] for name in INPUT_NAMES}, training=True)
    start = keras.losses.sparse_categorical_crossentropy(
        batch["start_positions"], outputs["start_logits"], from_logits=True
    )
    end = keras.losses.sparse_categorical_crossentropy(
        batch["end_positions"], outputs["end_logits"], from_logits=True
    )
    return (tf.reduce_mean(start) + tf.reduce_mean(end)) / 2.0, {}
