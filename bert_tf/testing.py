"""Tiny BERT configs for tests and examples: one definition of the small models the test suite
builds (milliseconds per step on a CPU), so the suite's sizes do not drift apart.

- `tiny_config`: 2 layers, width 32, 4 heads (a real multi-head, multi-layer encoder).
- `micro_config`: 1 layer, width 16, 2 heads (exports and pipelines where only the plumbing
  matters).

Both take the vocabulary size (the tokenizer's) and any other `BertConfig` field as overrides;
the intermediate size is twice the width unless given.

Example:

    from bert_tf import testing
    from bert_tf.modeling.encoder import build_encoder

    encoder = build_encoder(testing.tiny_config(vocab_size=100, max_position_embeddings=16))
"""

from __future__ import annotations

from typing import Any

from bert_tf.modeling.configs import BertConfig


def tiny_config(
    vocab_size: int,
    hidden_size: int = 32,
    num_hidden_layers: int = 2,
    num_attention_heads: int = 4,
    max_position_embeddings: int = 64,
    **overrides: Any,
) -> BertConfig:
    """A small `BertConfig` (see the module docstring); `overrides` are other fields."""
    overrides.setdefault("intermediate_size", 2 * hidden_size)
    return BertConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        max_position_embeddings=max_position_embeddings,
        **overrides,
    )


def micro_config(
    vocab_size: int, max_position_embeddings: int = 32, **overrides: Any
) -> BertConfig:
    """One layer of width 16 with 2 heads."""
    return tiny_config(
        vocab_size,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=max_position_embeddings,
        **overrides,
    )
