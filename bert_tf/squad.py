"""SQuAD v1.1 / v2.0 for BERT: reading, windowed features, span decoding and EM/F1.

Follows google-research/bert `run_squad.py` step by step, so features, predictions and scores
line up with the paper's setup:

- `read_squad_examples`: the context is split on whitespace into "doc words"; each answer's
  character offset becomes a (start, end) word index.
- `convert_examples_to_features`: every doc word is WordPiece-split (all words of all examples
  in batched calls of the in-graph `BertTokenizer`), long contexts become overlapping windows of
  `[CLS] query [SEP] doc-window [SEP]` (stride `doc_stride`), and each window records which of
  its tokens have their "max context" there.
- `compute_predictions`: n-best start/end search over all windows of an example, projection of
  the WordPiece span back onto the original context text (`get_final_text`), v2.0 null odds.
- `squad_v1_metrics` / `squad_v2_metrics`: EM/F1 as the official evaluation scripts compute
  them (scores in percent).

Example:

    from bert_tf import squad, training
    from bert_tf.tokenization import BertTokenizer

    tokenizer = BertTokenizer("vocab.txt")
    examples = squad.read_squad_examples("dev-v1.1.json", training=False)
    features = squad.convert_examples_to_features(
        examples, tokenizer, max_seq_length=384, doc_stride=128, max_query_length=64,
        training=False)
    dataset = squad.features_to_dataset(features, 384, batch_size=32, training=False)
    outputs = training.predict(model, dataset)  # model: a trained BertSpanLabeler
    predictions, nbest, null_odds = squad.compute_predictions(
        examples, features, outputs["start_logits"], outputs["end_logits"],
        lower_case=tokenizer.lower_case)
    squad.squad_v1_metrics(squad.read_squad_json("dev-v1.1.json"), predictions)
    # {"exact_match": ..., "f1": ...}
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import os
import re
import string
from collections.abc import Iterable, Sequence

import keras
import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text
from absl import logging

from bert_tf.encoder import INPUT_NAMES
from bert_tf.flags_util import decode_utf8
from bert_tf.tokenization import (
    BASIC_SPLIT_DELIMITERS,
    BASIC_SPLIT_KEPT_DELIMITERS,
    BertTokenizer,
    normalize_text,
)

# Strings per tokenizer call: large enough to amortise the op launch, small enough for memory.
_TOKENIZE_BATCH = 16384


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


def _is_whitespace(c: str) -> bool:
    # google-research's definition: U+202F (narrow no-break space) occurs in SQuAD contexts.
    return c in " \t\r\n" or ord(c) == 0x202F


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
    for i in range(0, len(texts), _TOKENIZE_BATCH):
        ids = tokenizer(tf.constant(list(texts[i : i + _TOKENIZE_BATCH]))).to_list()
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


# --- Decoding ---------------------------------------------------------------------------------


def basic_tokenize(texts: Sequence[str], lower_case: bool) -> list[list[str]]:
    """BERT's normalization and pre-WordPiece split of each text, e.g. "Zürich's" -> zurich ' s."""
    tokens: list[list[str]] = []
    for i in range(0, len(texts), _TOKENIZE_BATCH):
        normalized = normalize_text(tf.constant(list(texts[i : i + _TOKENIZE_BATCH])), lower_case)
        split = tf_text.regex_split(
            normalized, BASIC_SPLIT_DELIMITERS, BASIC_SPLIT_KEPT_DELIMITERS
        ).to_list()
        tokens.extend([t.decode("utf-8") for t in row] for row in split)
    return tokens


def _strip_spaces(text: str) -> tuple[str, dict[int, int]]:
    """`text` without spaces, and each kept character's index in the original."""
    kept, index_map = [], {}
    for i, c in enumerate(text):
        if c != " ":
            index_map[len(kept)] = i
            kept.append(c)
    return "".join(kept), index_map


def get_final_text(
    pred_text: str,
    orig_text: str,
    orig_basic_tokens: Sequence[str],
    verbose_logging: bool = False,
) -> str:
    """Projects a normalized WordPiece answer back onto the original words' text.

    `pred_text` ("john smith") was rebuilt from WordPiece tokens, so it is lowercased, accent-
    stripped and split at punctuation; `orig_text` ("John Smith's") are the doc words it came
    from and `orig_basic_tokens` their `basic_tokenize` output. The prediction is located in
    the normalized words and its character span mapped back through the space-free alignment;
    when the alignment fails (normalization changed the length) the whole `orig_text` is
    returned, as google-research does, which logs why with `verbose_logging`.
    """
    tok_text = " ".join(orig_basic_tokens)
    start = tok_text.find(pred_text)
    if start == -1:
        if verbose_logging:
            logging.info("Unable to find text: '%s' in '%s'", pred_text, orig_text)
        return orig_text
    end = start + len(pred_text) - 1
    orig_stripped, orig_map = _strip_spaces(orig_text)
    tok_stripped, tok_map = _strip_spaces(tok_text)
    if len(orig_stripped) != len(tok_stripped):
        if verbose_logging:
            logging.info(
                "Length not equal after stripping spaces: '%s' vs '%s'", orig_stripped, tok_stripped
            )
        return orig_text
    # tok_text position -> space-free position -> orig_text position.
    tok_to_stripped = {v: k for k, v in tok_map.items()}
    if start not in tok_to_stripped or end not in tok_to_stripped:
        if verbose_logging:
            logging.info("Couldn't map the span of '%s' onto '%s'", pred_text, orig_text)
        return orig_text
    return orig_text[orig_map[tok_to_stripped[start]] : orig_map[tok_to_stripped[end]] + 1]


def _best_indexes(logits: np.ndarray, n_best_size: int) -> list[int]:
    return np.argsort(-logits, kind="stable")[:n_best_size].tolist()


def _softmax(scores: list[float]) -> list[float]:
    if not scores:
        return []
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    total = sum(exps)
    return [e / total for e in exps]


_Candidate = collections.namedtuple(
    "_Candidate", ["feature_index", "start_index", "end_index", "start_logit", "end_logit"]
)


def _candidates(
    features: list[tuple[int, SquadFeature]],
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    n_best_size: int,
    max_answer_length: int,
    with_null: bool,
) -> tuple[list[_Candidate], _Candidate | None]:
    """Valid (start, end) spans of one example over all its windows, and its best null span."""
    spans, null = [], None
    for feature_index, feature in features:
        starts, ends = start_logits[feature_index], end_logits[feature_index]
        if with_null:
            null_score = starts[0] + ends[0]
            if null is None or null_score < null.start_logit + null.end_logit:
                null = _Candidate(feature_index, 0, 0, float(starts[0]), float(ends[0]))
        for start in _best_indexes(starts, n_best_size):
            for end in _best_indexes(ends, n_best_size):
                # Only doc tokens, in order, not too long, and scored in their max-context window.
                if start not in feature.token_to_orig_map or end not in feature.token_to_orig_map:
                    continue
                if end < start or end - start + 1 > max_answer_length:
                    continue
                if not feature.token_is_max_context.get(start, False):
                    continue
                spans.append(
                    _Candidate(feature_index, start, end, float(starts[start]), float(ends[end]))
                )
    return spans, null


def compute_predictions(
    examples: Sequence[SquadExample],
    features: Sequence[SquadFeature],
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    lower_case: bool,
    n_best_size: int = 20,
    max_answer_length: int = 30,
    version_2_with_negative: bool = False,
    null_score_diff_threshold: float = 0.0,
    verbose_logging: bool = False,
) -> tuple[dict[str, str], dict[str, list[dict]], dict[str, float]]:
    """Best answer text per question from the logits of every feature (google-research's
    `write_predictions`).

    `start_logits`/`end_logits` are `[num_features, seq]`, row i for `features[i]`. Returns
    (predictions {id: text}, n-best {id: [{text, probability, start_logit, end_logit}]},
    null odds {id: null score - best span score}, empty for v1.1). With
    `version_2_with_negative`, the answer is "" when the null odds exceed the threshold.
    `verbose_logging` logs (INFO) the answers `get_final_text` cannot map back.
    """
    start_logits, end_logits = np.asarray(start_logits), np.asarray(end_logits)
    if len(start_logits) != len(features) or len(end_logits) != len(features):
        raise ValueError(
            f"got {len(start_logits)} start and {len(end_logits)} end logit rows for "
            f"{len(features)} features"
        )
    by_example: dict[int, list[tuple[int, SquadFeature]]] = collections.defaultdict(list)
    for feature_index, feature in enumerate(features):
        by_example[feature.example_index].append((feature_index, feature))

    # The basic tokens of a run of doc words are those of each word in turn (the basic split
    # breaks at whitespace), so each distinct word is normalized once, in one batched call.
    words = sorted({w for e in examples for w in e.doc_tokens})
    basic = dict(zip(words, basic_tokenize(words, lower_case), strict=True))

    predictions, all_nbest, null_odds = {}, {}, {}
    for example_index, example in enumerate(examples):
        spans, null = _candidates(
            by_example[example_index],
            start_logits,
            end_logits,
            n_best_size,
            max_answer_length,
            version_2_with_negative,
        )
        candidates = spans + ([null] if null else [])
        candidates.sort(key=lambda c: c.start_logit + c.end_logit, reverse=True)
        nbest: list[tuple[str, float, float]] = []
        seen = set()
        for c in candidates:
            if len(nbest) >= n_best_size:
                break
            if c.start_index > 0:
                feature = features[c.feature_index]
                first = feature.token_to_orig_map[c.start_index]
                orig_words = example.doc_tokens[first : feature.token_to_orig_map[c.end_index] + 1]
                pieces = " ".join(feature.tokens[c.start_index : c.end_index + 1])
                pred_text = " ".join(pieces.replace(" ##", "").replace("##", "").split())
                orig_basic = [t for w in orig_words for t in basic[w]]
                text = get_final_text(pred_text, " ".join(orig_words), orig_basic, verbose_logging)
            else:
                text = ""
            if text in seen:
                continue
            seen.add(text)
            nbest.append((text, c.start_logit, c.end_logit))
        if version_2_with_negative and "" not in seen and null is not None:
            nbest.append(("", null.start_logit, null.end_logit))
        if not nbest:  # no valid span at all (google-research's rare edge case)
            nbest.append(("empty", 0.0, 0.0))
        probabilities = _softmax([s + e for _, s, e in nbest])
        all_nbest[example.qas_id] = [
            {"text": text, "probability": p, "start_logit": s, "end_logit": e}
            for (text, s, e), p in zip(nbest, probabilities, strict=True)
        ]
        best_span = next(((t, s, e) for t, s, e in nbest if t), None)
        if not version_2_with_negative:
            predictions[example.qas_id] = nbest[0][0]
        elif best_span is None:  # only the null answer is valid: odds = its score alone
            predictions[example.qas_id] = ""
            null_odds[example.qas_id] = null.start_logit + null.end_logit if null else 0.0
        else:
            diff = null.start_logit + null.end_logit - best_span[1] - best_span[2]
            null_odds[example.qas_id] = diff
            predictions[example.qas_id] = "" if diff > null_score_diff_threshold else best_span[0]
    return predictions, all_nbest, null_odds


# --- Metrics (the official SQuAD evaluation, scores in percent) --------------------------------


_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation, then the articles a/an/the, then collapse whitespace."""
    text = "".join(c for c in text.lower() if c not in _PUNCTUATION)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def _f1(prediction: str, gold: str, empty_matches_empty: bool) -> float:
    pred_tokens, gold_tokens = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if empty_matches_empty and (not pred_tokens or not gold_tokens):
        # v2.0: an empty answer is right exactly when the gold is empty too.
        return float(pred_tokens == gold_tokens)
    common = sum((collections.Counter(pred_tokens) & collections.Counter(gold_tokens)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred_tokens), common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def iter_questions(dataset: Iterable[dict]) -> Iterable[dict]:
    """Every question dict (`id`, `question`, `answers`, ...) of a SQuAD `data` list."""
    for article in dataset:
        for paragraph in article["paragraphs"]:
            yield from paragraph["qas"]


def squad_v1_metrics(dataset: Iterable[dict], predictions: dict[str, str]) -> dict[str, float]:
    """SQuAD v1.1 `exact_match` and `f1` (percent), best over each question's gold answers.

    A question without a prediction scores 0, as in the official script.
    """
    exact = f1 = 0.0
    total = 0
    for qa in iter_questions(dataset):
        total += 1
        if qa["id"] not in predictions:
            continue
        prediction = predictions[qa["id"]]
        golds = [a["text"] for a in qa["answers"]]
        exact += max(float(normalize_answer(prediction) == normalize_answer(g)) for g in golds)
        f1 += max(_f1(prediction, g, empty_matches_empty=False) for g in golds)
    if total == 0:
        raise ValueError("the SQuAD dataset has no questions")
    return {"exact_match": 100.0 * exact / total, "f1": 100.0 * f1 / total}


def squad_v2_metrics(dataset: Iterable[dict], predictions: dict[str, str]) -> dict[str, float]:
    """SQuAD v2.0 `exact`, `f1`, `total`, and the same over `HasAns_*`/`NoAns_*` questions.

    Unanswerable questions (no gold answer) are right only with an empty prediction. Questions
    without a prediction are left out, as in the official script.
    """
    scores: dict[str, tuple[float, float, bool]] = {}  # id -> (exact, f1, has_answer)
    for qa in iter_questions(dataset):
        if qa["id"] not in predictions:
            continue
        prediction = predictions[qa["id"]]
        golds = [a["text"] for a in qa["answers"] if normalize_answer(a["text"])] or [""]
        scores[qa["id"]] = (
            max(float(normalize_answer(prediction) == normalize_answer(g)) for g in golds),
            max(_f1(prediction, g, empty_matches_empty=True) for g in golds),
            bool(qa["answers"]),
        )
    if not scores:
        raise ValueError("no question of the SQuAD dataset has a prediction")
    results: dict[str, float] = {}
    for prefix, keep in (("", None), ("HasAns_", True), ("NoAns_", False)):
        subset = [s for s in scores.values() if keep is None or s[2] == keep]
        if subset:
            results[f"{prefix}exact"] = 100.0 * sum(s[0] for s in subset) / len(subset)
            results[f"{prefix}f1"] = 100.0 * sum(s[1] for s in subset) / len(subset)
            results[f"{prefix}total"] = len(subset)
    return results
