"""Packs WordPiece id segments into BERT's fixed-length inputs, and the text layers' base class.

`BertPacker` is the last step of `tokenization.BertPreprocessor`: `[CLS] A [SEP] B [SEP]`,
trimmed round-robin (`round_robin_trim`) to `seq_length`, padded, with Model Garden's input
names.

Example:

    import tensorflow as tf
    from bert_tf.text.packer import BertPacker

    packer = BertPacker(8, cls_id=2, sep_id=3, pad_id=0)
    features = packer([tf.ragged.constant([[5, 6]]), tf.ragged.constant([[7, 8, 9, 10]])])
    features["input_word_ids"]   # [[2, 5, 6, 3, 7, 8, 9, 3]]
"""

from __future__ import annotations

from collections.abc import Sequence

import keras
import tensorflow as tf


class StringLayer(keras.layers.Layer):
    """Base of the text layers: takes raw tf (string/ragged) tensors and has no weights."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        # Keep inputs as tf tensors (strings, ragged) instead of converting them to backend
        # tensors, and accept python strings: the same switches keras-nlp's preprocessing uses.
        self._convert_input_args = False
        self._allow_non_tensor_positional_args = True
        self.built = True


def round_robin_trim(
    segments: Sequence[tf.RaggedTensor], budget: int | tf.Tensor
) -> list[tf.RaggedTensor]:
    """Keeps the first tokens of one or two segments [batch, (tokens)] within `budget` per row.

    The outputs of `tf_text.RoundRobinTrimmer(budget).trim(segments)` (tokens handed out one
    at a time, first segment first, so the longer segment loses more; google-research's
    `_truncate_seq_pair`), from core TF ops only: that trimmer's op, `TFText>RoundRobinTrim`,
    is not in the tensorflow-text 2.12.1 `ops_lib` that the stock `tensorflow_model_server`
    2.13-2.19 links, so an export using it does not load there (`serving/op_check.py`). Its
    allocation in closed form (no loop, so no while_loop in the graph): one segment keeps
    min(la, B); two keep qa = min(la, max(ceil(B/2), B - lb)) and qb = min(lb, B - qa).
    Rows keep their order; values are gathered, so any dtype works.
    """
    segments = list(segments)
    if not 1 <= len(segments) <= 2:
        raise ValueError(f"round_robin_trim takes one or two segments, got {len(segments)}")
    if isinstance(budget, int) and budget < 0:
        raise ValueError(f"round_robin_trim: budget must be >= 0, got {budget}")
    lengths = [s.row_lengths() for s in segments]
    budget = tf.cast(budget, lengths[0].dtype)
    if len(segments) == 1:
        quotas = [tf.minimum(lengths[0], budget)]
    else:
        len_a, len_b = lengths[0], tf.cast(lengths[1], lengths[0].dtype)
        quota_a = tf.minimum(len_a, tf.maximum(budget - budget // 2, budget - len_b))
        quotas = [quota_a, tf.minimum(len_b, budget - quota_a)]
    trimmed = []
    for segment, quota in zip(segments, quotas, strict=True):
        starts = segment.row_starts()
        kept = tf.ragged.range(
            starts, starts + tf.cast(quota, starts.dtype), row_splits_dtype=starts.dtype
        )
        trimmed.append(tf.gather(segment.values, kept))
    return trimmed


@keras.saving.register_keras_serializable(package="bert_tf")
class BertPacker(StringLayer):
    """Packs 1 or 2 ragged id segments into fixed-length BERT inputs (Model Garden names).

    `[CLS] A [SEP]` or `[CLS] A [SEP] B [SEP]`, segments trimmed round-robin (one token at a
    time from each, so the longer one loses more) to fit `seq_length`, then padded.

    Returns a dict of int32 [batch, seq_length] tensors: `input_word_ids`, `input_mask`
    (1 = real token) and `input_type_ids` (0 for [CLS] A [SEP], 1 for B [SEP]).

    Example:

        packer = BertPacker(seq_length=6, cls_id=2, sep_id=3, pad_id=0)
        packer([tf.ragged.constant([[7, 8, 9]]), tf.ragged.constant([[10, 11]])])
        # input_word_ids [[2, 7, 8, 3, 10, 3]], input_type_ids [[0, 0, 0, 0, 1, 1]]
    """

    def __init__(self, seq_length: int, cls_id: int, sep_id: int, pad_id: int, **kwargs):
        super().__init__(**kwargs)
        if seq_length < 3:
            raise ValueError(
                f"seq_length must be >= 3 (room for [CLS] and two [SEP]), got {seq_length}"
            )
        self.seq_length = seq_length
        self.cls_id = cls_id
        self.sep_id = sep_id
        self.pad_id = pad_id

    def call(self, segments) -> dict[str, tf.Tensor]:
        segments = [segments] if isinstance(segments, tf.RaggedTensor) else list(segments)
        if not 1 <= len(segments) <= 2:
            raise ValueError(f"BERT packs one or two text segments, got {len(segments)}")
        segments = [tf.cast(s, tf.int32) for s in segments]
        budget = self.seq_length - len(segments) - 1  # minus [CLS] and one [SEP] per segment
        trimmed = round_robin_trim(segments, budget)
        # Written straight into the padded rows (the outputs of tf_text.combine_segments then
        # pad_model_inputs): combine_segments concatenates ragged rows by transposing a matrix
        # of integer row indexes, and oneDNN's graph pass, finding a Transpose of integers,
        # logs "E ... oneDNN supports DT_INT64 only on platforms with AVX-512" in every process.
        batch = trimmed[0].nrows(out_type=tf.int32)
        position = tf.range(self.seq_length)[None, :]
        word_ids = tf.where(position == 0, self.cls_id, tf.fill([batch, 1], self.pad_id))
        type_ids = tf.zeros_like(word_ids)
        start = tf.ones([batch, 1], tf.int32)  # after [CLS]
        for type_id, segment in enumerate(trimmed):
            end = start + tf.cast(segment.row_lengths(), tf.int32)[:, None]  # its [SEP]
            index = tf.cast(segment.row_starts(), tf.int32)[:, None] + position - start
            # One entry more, so the gather stays in range where the row has no token.
            values = tf.concat([segment.values, [self.pad_id]], 0)
            tokens = tf.gather(values, tf.clip_by_value(index, 0, tf.size(segment.values)))
            word_ids = tf.where((position >= start) & (position < end), tokens, word_ids)
            word_ids = tf.where(position == end, self.sep_id, word_ids)
            type_ids = tf.where((position >= start) & (position <= end), type_id, type_ids)
            start = end + 1
        return {
            "input_word_ids": word_ids,
            "input_mask": tf.cast(position < start, tf.int32),
            "input_type_ids": type_ids,
        }

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            {
                "seq_length": self.seq_length,
                "cls_id": self.cls_id,
                "sep_id": self.sep_id,
                "pad_id": self.pad_id,
            }
        )
        return config
