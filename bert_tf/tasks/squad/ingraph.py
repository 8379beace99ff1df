"""SQuAD span decoding in TensorFlow ops, for exported models: `squad_answers` turns a question and
a context into the best answer inside the serving graph (tokenization, doc-stride windows, the
span search with google-research's max-context rule, the v2.0 null rule, and offsets back into
the original text), so TF Serving answers raw strings. The Python decoder of `run_squad` is
`bert_tf.tasks.squad.postprocess` (n-best lists, `get_final_text`);
`tests/serving/test_export_squad_v2.py` checks both give the same answers.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from bert_tf.text.tokenization import (
    BASIC_SPLIT_DELIMITERS,
    BASIC_SPLIT_KEPT_DELIMITERS,
    BertPreprocessor,
    pad_to_length,
    trim_to_longest,
)


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
) -> dict[str, tf.Tensor]:
    """Best answer span per (question, context), over doc-stride windows of the context.

    As google-research `run_squad.py`: the question (truncated to `max_query_length` tokens)
    and a window of context tokens fill `[CLS] q [SEP] window [SEP]`; windows start every
    `doc_stride` tokens; a span is valid when start <= end, it is at most `max_answer_length`
    tokens long, both ends lie in the window's context part and the start token has its
    "max context" in that window; the best valid span by start + end logit over all windows
    wins. Token spans map back to the original context through word offsets, so answers are
    exact substrings of it (whole BERT words: punctuation and CJK characters are words).

    Returns `answer_text` (string), `start_char`, `end_char` (int32, Unicode characters into
    `context`, end exclusive) and `score` (float32; -inf and "" when the context has no token).

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

    # Context tokens with the byte span of the word each one comes from.
    words, word_begin, word_end = tf_text.regex_split_with_offsets(
        context, BASIC_SPLIT_DELIMITERS, BASIC_SPLIT_KEPT_DELIMITERS
    )
    pieces = tokenizer(words.flat_values)  # [words, (wordpieces)]
    piece_word = pieces.value_rowids()
    tokens_per_context = tf.reduce_sum(words.with_flat_values(pieces.row_lengths()), axis=1)
    context_ids = tf.RaggedTensor.from_row_lengths(pieces.flat_values, tokens_per_context)
    token_begin = tf.gather(word_begin.flat_values, piece_word)
    token_end = tf.gather(word_end.flat_values, piece_word)
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
    # seq_length); the positions past it are padding, never a valid span (`in_context` below).
    logits = span_model(trim_to_longest(features), training=False)

    # google-research `_check_is_max_context`: a token's context in a window is its distance to
    # the nearer window edge (+ 0.01 * window length); only its best window may start a span.
    offset = in_window - window_start[:, None]
    context_score = tf.cast(tf.minimum(offset, window_length[:, None] - 1 - offset), tf.float32)
    context_score += 0.01 * tf.cast(window_length, tf.float32)[:, None]
    best_context = tf.math.unsorted_segment_max(
        context_score.flat_values, flat_index.flat_values, tf.shape(context_ids.flat_values)[0]
    )
    is_max_context = context_score.with_flat_values(
        context_score.flat_values >= tf.gather(best_context, flat_index.flat_values)
    ).to_tensor(default_value=False, shape=[None, seq_length])

    # Sequence position p holds window token p - first; first = 1 + question + 1.
    first = tf.gather(query_lengths, example) + 2
    window_token = tf.range(seq_length)[None, :] - first[:, None]
    in_context = (window_token >= 0) & (window_token < window_length[:, None])
    can_start = in_context & tf.gather(
        is_max_context, tf.clip_by_value(window_token, 0, seq_length - 1), batch_dims=1
    )
    ones = tf.ones([seq_length, seq_length])
    band = tf.cast(tf.linalg.band_part(ones, 0, max_answer_length - 1), tf.bool)  # 0 <= e-s < max
    valid = band[None] & can_start[:, :, None] & in_context[:, None, :]
    start_logits = pad_to_length(tf.cast(logits["start_logits"], tf.float32), seq_length)
    end_logits = pad_to_length(tf.cast(logits["end_logits"], tf.float32), seq_length)
    scores = start_logits[:, :, None] + end_logits[:, None, :]
    scores = tf.reshape(tf.where(valid, scores, -np.inf), [-1, seq_length * seq_length])
    window_best = tf.argmax(scores, axis=1, output_type=tf.int32)
    window_score = tf.reduce_max(scores, axis=1)

    # Best window per example.
    per_example = tf.RaggedTensor.from_row_lengths(window_score, num_windows)
    best_window = tf.argmax(
        per_example.to_tensor(default_value=-np.inf), axis=1, output_type=tf.int32
    ) + tf.cast(per_example.row_starts(), tf.int32)
    score = tf.gather(window_score, best_window)
    found = score > -np.inf
    span = tf.gather(window_best, best_window)
    extra = {}
    if version_2_with_negative:
        # In float64 like run_squad's Python sums, so both compare the same numbers to the
        # threshold (a float32 difference could flip answers lying right at it).
        starts, ends = tf.cast(start_logits, tf.float64), tf.cast(end_logits, tf.float64)
        null_score = tf.reduce_min(
            tf.RaggedTensor.from_row_lengths(starts[:, 0] + ends[:, 0], num_windows), axis=1
        )
        start_at = tf.stack([best_window, span // seq_length], axis=1)
        end_at = tf.stack([best_window, span % seq_length], axis=1)
        best_span = tf.gather_nd(starts, start_at) + tf.gather_nd(ends, end_at)
        null_score_diff = tf.where(found, null_score - best_span, null_score)
        threshold = tf.constant(
            null_score_diff_threshold, tf.float64, name="null_score_diff_threshold"
        )
        found &= null_score_diff <= threshold
        extra["null_score_diff"] = tf.cast(null_score_diff, tf.float32)
    start_token = span // seq_length - tf.gather(first, best_window)
    end_token = span % seq_length - tf.gather(first, best_window)
    to_flat = tf.gather(window_start, best_window) + context_starts
    # One padding entry so the gathers stay in range when no context has any token.
    begin_bytes = tf.concat([token_begin, [0]], 0)
    end_bytes = tf.concat([token_end, [0]], 0)
    last = tf.shape(token_begin)[0]
    begin = tf.gather(begin_bytes, tf.clip_by_value(to_flat + start_token, 0, last))
    end = tf.gather(end_bytes, tf.clip_by_value(to_flat + end_token, 0, last))
    begin = tf.where(found, tf.cast(begin, tf.int32), 0)
    end = tf.where(found, tf.cast(end, tf.int32), 0)
    answer = tf.strings.substr(context, begin, end - begin)
    start_char = tf.strings.length(
        tf.strings.substr(context, tf.zeros_like(begin), begin), unit="UTF8_CHAR"
    )
    return {
        "answer_text": answer,
        "start_char": start_char,
        "end_char": start_char + tf.strings.length(answer, unit="UTF8_CHAR"),
        "score": score,
        **extra,
    }
