"""Sentence embeddings from raw text: in-graph preprocessing + BERT encoder + mean pooling.

This is how sentence-transformers models such as all-MiniLM-L6-v2 are used: average the last
layer's token vectors over the real (non-padding) tokens and L2-normalise, so that a dot product
is a cosine similarity.

Example:

    from bert_tf.data import fetch
    from bert_tf.tasks.sentence_embedding import SentenceEncoder

    encoder = SentenceEncoder.from_pretrained(fetch.fetch("minilm"))
    vectors = encoder.encode(["A man is eating food.", "A man is eating a piece of bread."])
    float(vectors[0] @ vectors[1])   # 0.7553...
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import keras
import numpy as np
import tensorflow as tf

from bert_tf import checkpoints
from bert_tf.modeling.configs import BertConfig
from bert_tf.modeling.encoder import BertEncoder, build_encoder
from bert_tf.text.tokenization import BertPreprocessor


def mean_pool(sequence_output: tf.Tensor, input_mask: tf.Tensor, normalize: bool = True):
    """Mean of `sequence_output` [batch, seq, hidden] over positions where `input_mask` is 1."""
    mask = tf.cast(input_mask, sequence_output.dtype)[:, :, None]
    summed = tf.reduce_sum(sequence_output * mask, axis=1)
    pooled = summed / tf.maximum(tf.reduce_sum(mask, axis=1), 1e-9)
    return tf.math.l2_normalize(pooled, axis=-1) if normalize else pooled


class SentenceEncoder:
    """Raw text -> L2-normalised mean-pooled BERT embeddings (numpy), in batches."""

    def __init__(self, preprocessor: BertPreprocessor, encoder: BertEncoder, batch_size: int = 32):
        self.preprocessor = preprocessor
        self.encoder = encoder
        self.batch_size = batch_size
        self._embed = tf.function(self._embed_batch, reduce_retracing=True)

    @classmethod
    def from_pretrained(
        cls,
        model_dir: str | os.PathLike,
        seq_length: int = 256,
        lower_case: bool = True,
        batch_size: int = 32,
    ) -> SentenceEncoder:
        """From a HF BERT folder (config.json, model.safetensors, vocab.txt)."""
        model_dir = os.fspath(model_dir)  # not a Path: it would fold gs:// into gs:/
        config = BertConfig.from_hf_json_file(os.path.join(model_dir, "config.json"))
        encoder = build_encoder(config)
        checkpoints.load_pretrained(encoder, model_dir)
        preprocessor = BertPreprocessor(
            os.path.join(model_dir, "vocab.txt"), seq_length=seq_length, lower_case=lower_case
        )
        return cls(preprocessor, encoder, batch_size)

    def _embed_batch(self, texts: tf.Tensor) -> tf.Tensor:
        features = self.preprocessor(texts)
        outputs = self.encoder(features, training=False)
        return mean_pool(outputs["sequence_output"], features["input_mask"])

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embeddings [len(texts), hidden] as float32, each of unit length."""
        if isinstance(texts, str):
            raise TypeError("encode() takes a list of strings, not a single string")
        batches = [
            self._embed(tf.constant(list(texts[i : i + self.batch_size]), dtype=tf.string))
            for i in range(0, len(texts), self.batch_size)
        ]
        if not batches:
            return np.zeros((0, self.encoder.bert_config.hidden_size), np.float32)
        return keras.ops.convert_to_numpy(tf.concat(batches, axis=0)).astype(np.float32)
