"""SQuAD span decoding: n-best start/end search over an example's windows, projection of the
WordPiece span back onto the context's original text (`get_final_text`), v2.0 null odds
(google-research `run_squad.py`'s `write_predictions`).

See `bert_tf.tasks.squad` for the whole flow.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Sequence

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text
from absl import logging

from bert_tf.tasks.squad.data import TOKENIZE_BATCH, SquadExample, SquadFeature
from bert_tf.text.tokenization import (
    BASIC_SPLIT_DELIMITERS,
    BASIC_SPLIT_KEPT_DELIMITERS,
    normalize_text,
)


def basic_tokenize(texts: Sequence[str], lower_case: bool) -> list[list[str]]:
    """BERT's normalization and pre-WordPiece split of each text, e.g. "Zürich's" -> zurich ' s."""
    tokens: list[list[str]] = []
    for i in range(0, len(texts), TOKENIZE_BATCH):
        normalized = normalize_text(tf.constant(list(texts[i : i + TOKENIZE_BATCH])), lower_case)
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
            null_score = float(starts[0]) + float(ends[0])  # Python floats, as google's
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
