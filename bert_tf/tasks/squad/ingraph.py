"""SQuAD span decoding in TensorFlow ops, for exported models: `squad_answers` turns a question and
a context into the answer `run_squad --do_predict` writes to predictions.json, inside the serving
graph (tokenization, doc-stride windows, google-research's n-best span search with its
max-context rule, the v2.0 null rule, and `get_final_text`'s projection back onto the context),
so TF Serving answers raw strings. The Python decoder of `run_squad` is
`bert_tf.tasks.squad.postprocess`; `tests/serving/test_export_squad_predictions.py` checks both
give the same answers.

Core TensorFlow ops and the tensorflow-text ops the tokenizer already uses only (TF Serving's
stock build has those): `tf.math.top_k` for the n-best lists, `tf.strings.split` as `str.find`.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from bert_tf.tasks.squad.data import DOC_WHITESPACE
from bert_tf.text.tokenization import (
    BASIC_SPLIT_DELIMITERS,
    BASIC_SPLIT_KEPT_DELIMITERS,
    BertPreprocessor,
    normalize_text,
    pad_to_length,
    trim_to_longest,
)

# The doc-word separators as an RE2 class, and as code points.
_DOC_WHITESPACE_RE = "[" + "".join(f"\\x{{{ord(c):04X}}}" for c in DOC_WHITESPACE) + "]+"
_DOC_WHITESPACE_CODEPOINTS = [ord(c) for c in DOC_WHITESPACE]
# What Python's `str.split()` splits on (`" ".join(text.split())` in google's decoding).
_PYTHON_WHITESPACE_RE = r"[\t-\r\x{1C}-\x{20}\x{85}\p{Z}]+"
_SPACE = ord(" ")


def squad_answers(
    span_model: keras.Model,
    preprocessor: BertPreprocessor,
    question: tf.Tensor,
    context: tf.Tensor,
    doc_stride: int = 128,
    max_query_length: int = 64,
    max_answer_length: int = 30,
    version_2_with_negative: bool = False,
    null_score_diff_threshold: float = 0.0,
    n_best_size: int = 20,
) -> dict[str, tf.Tensor]:
    """run_squad's answer per (question, context), over doc-stride windows of the context.

    As google-research `run_squad.py`: the question (truncated to `max_query_length` tokens)
    and a window of context tokens fill `[CLS] q [SEP] window [SEP]`; windows start every
    `doc_stride` tokens. In each window only the `n_best_size` highest start and end logits
    (ties: the earlier position) are candidates; a (start, end) pair of them is valid when
    start <= end, it is at most `max_answer_length` tokens long, both ends lie in the window's
    context part and the start token has its "max context" in that window (the first such
    window on ties). The best valid pair by start + end logit (float64 sums; ties: the first in
    window, start-rank, end-rank order, as run_squad's stable sort) is the answer.

    Its text is `get_final_text`'s: the span's WordPiece text is located in the normalized
    doc words it covers and mapped back onto their original characters, so "##ia" of
    "Animalia" answers "ia"; when normalization changed the words' length, the whole doc words.
    Doc words are joined by one space, so `answer_text` is `context[start_char:end_char]` with
    each run of whitespace (" \\t\\r\\n" and U+202F) as one space.

    Returns `answer_text` (string), `start_char`, `end_char` (int32, Unicode characters into
    `context`, end exclusive) and `score` (float32, the span's start + end logit). With no
    valid span the answer is "" at 0..0 and `score` -inf (run_squad writes google's
    placeholder text "empty" there).

    With `version_2_with_negative` (SQuAD v2.0), google-research's null rule: the null score is
    the lowest [CLS] start + end logit over the windows, `null_score_diff` (float32, also
    returned) is it minus the best span's `score` (the null score alone when no span is
    valid), and the answer is "" (start/end 0; `score` stays the best span's) when it exceeds
    `null_score_diff_threshold`, as in `run_squad`'s predictions.json.
    """
    tokenizer, packer = preprocessor.tokenizer, preprocessor.packer
    seq_length = preprocessor.seq_length
    batch = tf.shape(question)[0]
    query = tokenizer(question)[:, :max_query_length]
    query_lengths = tf.cast(query.row_lengths(), tf.int32)

    # Context tokens with the byte offset of the word each one comes from. Doc-word separators
    # split too (U+202F is not in `\s`), so every word lies inside one doc word; the tokens
    # are those of run_squad, which tokenizes each doc word.
    words, word_begin, _ = tf_text.regex_split_with_offsets(
        context, f"{_DOC_WHITESPACE_RE}|{BASIC_SPLIT_DELIMITERS}", BASIC_SPLIT_KEPT_DELIMITERS
    )
    pieces = tokenizer(words.flat_values)  # [words, (wordpieces)]
    tokens_per_context = tf.reduce_sum(words.with_flat_values(pieces.row_lengths()), axis=1)
    context_ids = tf.RaggedTensor.from_row_lengths(pieces.flat_values, tokens_per_context)
    token_begin = tf.gather(word_begin.flat_values, pieces.value_rowids())
    num_tokens = tf.cast(context_ids.row_lengths(), tf.int32)
    context_starts = tf.cast(context_ids.row_starts(), tf.int32)

    # Windows: `window_size` context tokens each, starting every `stride` tokens.
    window_size = seq_length - 3 - query_lengths  # minus [CLS] and two [SEP]
    stride = tf.minimum(doc_stride, window_size)
    num_windows = 1 + tf.maximum(0, (num_tokens - window_size + stride - 1) // stride)
    example = tf.repeat(tf.range(batch), num_windows)
    window_start = tf.ragged.range(num_windows).flat_values * tf.gather(stride, example)
    window_length = tf.minimum(
        tf.gather(window_size, example), tf.gather(num_tokens, example) - window_start
    )
    in_window = tf.ragged.range(window_start, window_start + window_length)  # context positions
    flat_index = in_window + tf.gather(context_starts, example)[:, None]
    window_ids = flat_index.with_flat_values(tf.gather(context_ids.flat_values, flat_index.values))
    features = packer([tf.gather(query, example), window_ids])
    # The model runs on the longest window only (a short context's windows are far shorter than
    # seq_length); the positions past it are padding, never a candidate (`real` below).
    logits = span_model(trim_to_longest(features), training=False)

    # google-research `_check_is_max_context`: a token's context in a window is its distance to
    # the nearer window edge + 0.01 * window length (float64, as in Python); only its best
    # window, the first of equals, may start a span.
    offset = in_window - window_start[:, None]
    context_score = (
        tf.cast(tf.minimum(offset, window_length[:, None] - 1 - offset), tf.float64)
        + 0.01 * tf.cast(window_length, tf.float64)[:, None]
    )
    positions = flat_index.flat_values
    num_positions = tf.shape(context_ids.flat_values)[0]
    window_of = tf.cast(context_score.value_rowids(), tf.int32)
    best_context = tf.math.unsorted_segment_max(context_score.flat_values, positions, num_positions)
    best_window = tf.math.unsorted_segment_min(
        tf.where(
            context_score.flat_values == tf.gather(best_context, positions),
            window_of,
            tf.int32.max,
        ),
        positions,
        num_positions,
    )
    is_max_context = context_score.with_flat_values(
        window_of == tf.gather(best_window, positions)
    ).to_tensor(default_value=False, shape=[None, seq_length])

    # Sequence position p holds window token p - first; first = 1 + question + 1.
    first = tf.gather(query_lengths, example) + 2
    window_token = tf.range(seq_length)[None, :] - first[:, None]
    in_context = (window_token >= 0) & (window_token < window_length[:, None])
    can_start = in_context & tf.gather(
        is_max_context, tf.clip_by_value(window_token, 0, seq_length - 1), batch_dims=1
    )
    start_logits = pad_to_length(tf.cast(logits["start_logits"], tf.float32), seq_length)
    end_logits = pad_to_length(tf.cast(logits["end_logits"], tf.float32), seq_length)

    # The n-best lists. run_squad ranks all max_seq_length positions of a window, padding
    # included, whose logits the span head pushes below every real one (-10000); here the
    # positions after the last [SEP] rank last the same way, as -inf.
    real = window_token <= window_length[:, None]
    k = min(n_best_size, seq_length)
    # top_k puts the lower index first among equal values, as run_squad's stable argsort.
    top_start = tf.math.top_k(tf.where(real, start_logits, -np.inf), k).indices  # [W, k]
    top_end = tf.math.top_k(tf.where(real, end_logits, -np.inf), k).indices
    # Scores in float64, as run_squad's Python sums of the float32 logits.
    start_value = tf.gather(tf.cast(start_logits, tf.float64), top_start, batch_dims=1)
    end_value = tf.gather(tf.cast(end_logits, tf.float64), top_end, batch_dims=1)
    span_tokens = top_end[:, None, :] - top_start[:, :, None] + 1
    valid = (
        tf.gather(can_start, top_start, batch_dims=1)[:, :, None]
        & tf.gather(in_context, top_end, batch_dims=1)[:, None, :]
        & (span_tokens >= 1)
        & (span_tokens <= max_answer_length)
    )
    scores = tf.where(valid, start_value[:, :, None] + end_value[:, None, :], -np.inf)

    # The best span of each example: the first highest score in run_squad's candidate order
    # (window, start rank, end rank), which its stable sort keeps first.
    per_example = tf.RaggedTensor.from_row_lengths(
        tf.reshape(scores, [-1, k * k]), num_windows
    ).merge_dims(1, 2)
    per_example = per_example.to_tensor(default_value=-np.inf)
    best = _first_max(per_example)
    found = tf.reduce_max(per_example, axis=1) > -np.inf
    best_window = best // (k * k) + tf.cumsum(num_windows, exclusive=True)
    start_rank, end_rank = best % (k * k) // k, best % k
    best_start = tf.gather_nd(start_value, tf.stack([best_window, start_rank], axis=1))
    best_end = tf.gather_nd(end_value, tf.stack([best_window, end_rank], axis=1))
    score = tf.where(found, best_start + best_end, -np.inf)
    extra = {}
    if version_2_with_negative:
        # The null answer of the window with the lowest [CLS] score (the first of equals).
        null_start = tf.cast(start_logits[:, 0], tf.float64)
        null_end = tf.cast(end_logits[:, 0], tf.float64)
        nulls = tf.RaggedTensor.from_row_lengths(null_start + null_end, num_windows)
        null_window = _first_max(-nulls.to_tensor(default_value=np.inf)) + tf.cumsum(
            num_windows, exclusive=True
        )
        null_start, null_end = tf.gather(null_start, null_window), tf.gather(null_end, null_window)
        null_score = null_start + null_end
        # run_squad's expression, evaluated in its order. (Its n-best list holds the best span
        # for any n_best_size: a window's top start and end outscore its own [CLS] pair.)
        null_score_diff = tf.where(found, null_score - best_start - best_end, null_score)
        threshold = tf.constant(
            null_score_diff_threshold, tf.float64, name="null_score_diff_threshold"
        )
        found &= null_score_diff <= threshold
        extra["null_score_diff"] = tf.cast(null_score_diff, tf.float32)

    # The span as flat context token indexes (kept in range where nothing was found).
    span_start = tf.gather_nd(top_start, tf.stack([best_window, start_rank], axis=1))
    span_end = tf.gather_nd(top_end, tf.stack([best_window, end_rank], axis=1))
    to_flat = tf.gather(window_start - first, best_window) + context_starts
    last = tf.maximum(num_positions - 1, 0)
    token_start = tf.clip_by_value(to_flat + span_start, 0, last)
    token_end = tf.where(found, tf.clip_by_value(to_flat + span_end, 0, last), token_start - 1)
    answer, start_char, end_char = _final_text(
        tokenizer, context, context_ids.flat_values, token_begin, token_start, token_end
    )
    return {
        "answer_text": tf.where(found, answer, ""),
        "start_char": tf.where(found, start_char, 0),
        "end_char": tf.where(found, end_char, 0),
        "score": tf.cast(score, tf.float32),
        **extra,
    }


def _first_max(values: tf.Tensor) -> tf.Tensor:
    """Per row of `values` [rows, n], the index of the first largest value, int32 (argmax does
    not promise which of equal values it returns)."""
    n = tf.shape(values)[1]
    is_max = values == tf.reduce_max(values, axis=1, keepdims=True)
    return tf.reduce_min(tf.where(is_max, tf.range(n)[None, :], n), axis=1)


def _final_text(
    tokenizer,
    context: tf.Tensor,
    token_ids: tf.Tensor,
    token_begin: tf.Tensor,
    token_start: tf.Tensor,
    token_end: tf.Tensor,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """google-research `get_final_text` of each example's span of context tokens
    `token_start..token_end` (flat indexes into `token_ids` / `token_begin`, the byte offset
    of each token's word): (text, start_char, end_char into `context`).

    Python's `postprocess.get_final_text` does it on the doc words of run_squad's features;
    here the same strings are built from the context: the doc words the span covers joined
    by spaces (orig_text), their basic tokens joined by spaces (tok_text) and the span's
    WordPieces with "##" merged (pred_text).
    """
    doc_words, doc_begin, _ = tf_text.regex_split_with_offsets(context, _DOC_WHITESPACE_RE, "")
    # The doc word of a token: the last one starting at or before its word.
    begin = tf.gather(tf.concat([token_begin, [0]], 0), token_start)
    first_word = tf.reduce_sum(tf.cast(doc_begin <= begin[:, None], tf.int32), axis=1) - 1
    end = tf.gather(tf.concat([token_begin, [0]], 0), tf.maximum(token_end, 0))
    last_word = tf.reduce_sum(tf.cast(doc_begin <= end[:, None], tf.int32), axis=1) - 1
    last_word = tf.where(token_end >= token_start, last_word, first_word - 1)  # none found
    word_index = (
        tf.ragged.range(first_word, last_word + 1)
        + tf.cast(doc_words.row_starts(), tf.int32)[:, None]
    )
    span_words = word_index.with_flat_values(
        tf.gather(doc_words.flat_values, word_index.flat_values)
    )
    orig_text = tf.strings.reduce_join(span_words, axis=1, separator=" ")
    basic_tokens = tf_text.regex_split(
        normalize_text(span_words.flat_values, tokenizer.lower_case),
        BASIC_SPLIT_DELIMITERS,
        BASIC_SPLIT_KEPT_DELIMITERS,
    )
    tok_text = tf.strings.reduce_join(
        span_words.with_flat_values(basic_tokens).merge_dims(1, 2), axis=1, separator=" "
    )
    pieces = tokenizer.id_to_token(
        tf.gather(token_ids, tf.ragged.range(token_start, token_end + 1))
    )
    pred_text = tf.strings.reduce_join(pieces, axis=1, separator=" ")
    pred_text = tf.strings.regex_replace(pred_text, " ##", "")
    pred_text = tf.strings.regex_replace(pred_text, "##", "")
    pred_text = tf.strings.regex_replace(pred_text, _PYTHON_WHITESPACE_RE, " ")
    pred_text = tf.strings.regex_replace(pred_text, "^ | $", "")
    word_start = tf.gather(
        tf.concat([doc_begin.flat_values, [0]], 0),
        tf.clip_by_value(
            first_word + tf.cast(doc_words.row_starts(), tf.int32),
            0,
            tf.shape(doc_begin.flat_values)[0],
        ),
    )

    def one(args):
        orig, tok, pred, text, text_begin = args
        # tok_text.find(pred_text), in characters.
        parts = tf.strings.split(tok, sep=pred, maxsplit=1)
        located = (tf.size(parts) == 2) & (tf.strings.length(pred) > 0)
        at = tf.strings.length(tf.concat([parts, [""]], 0)[0], unit="UTF8_CHAR")
        # The space-free alignment: the i-th non-space character of tok_text is the i-th of
        # orig_text when both have as many; else google answers orig_text whole.
        tok_kept = tf.cast(tf.strings.unicode_decode(tok, "UTF-8") != _SPACE, tf.int32)
        orig_kept = tf.cast(
            tf.where(tf.strings.unicode_decode(orig, "UTF-8") != _SPACE)[:, 0], tf.int32
        )
        count = tf.size(orig_kept)
        aligned = located & (tf.reduce_sum(tok_kept) == count)
        pred_end = at + tf.strings.length(pred, unit="UTF8_CHAR")
        first_kept = tf.where(aligned, tf.reduce_sum(tok_kept[:at]), 0)
        last_kept = tf.where(aligned, tf.reduce_sum(tok_kept[:pred_end]), count) - 1
        padded = tf.concat([orig_kept, [0]], 0)
        a = tf.gather(padded, tf.clip_by_value(first_kept, 0, count))
        b = tf.gather(padded, tf.clip_by_value(last_kept, 0, count))
        answer = tf.strings.substr(orig, a, b + 1 - a, unit="UTF8_CHAR")
        # Kept characters of orig_text are the context's non-whitespace ones from its first
        # doc word on: back to character offsets into the context.
        chars = tf.strings.unicode_decode(text, "UTF-8")
        is_space = tf.reduce_any(chars[:, None] == _DOC_WHITESPACE_CODEPOINTS, axis=1)
        kept = tf.concat([tf.cast(tf.where(~is_space)[:, 0], tf.int32), [0]], 0)
        before = tf.strings.length(tf.strings.substr(text, 0, text_begin), unit="UTF8_CHAR")
        skipped = tf.reduce_sum(tf.cast(~is_space[:before], tf.int32))
        last_index = tf.size(kept) - 1
        start = tf.gather(kept, tf.clip_by_value(skipped + first_kept, 0, last_index))
        end = tf.gather(kept, tf.clip_by_value(skipped + last_kept, 0, last_index)) + 1
        return answer, start, end

    return tf.map_fn(
        one,
        (orig_text, tok_text, pred_text, context, tf.cast(word_start, tf.int32)),
        fn_output_signature=(tf.string, tf.int32, tf.int32),
    )
