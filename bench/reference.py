"""The keras-nlp BERT the suites measure ours against (and experiments/keras_nlp_reference.py
fine-tunes): one definition, so every comparison is against the same model."""

from __future__ import annotations

from bert_tf.modeling.configs import BertConfig


def keras_nlp_backbone(config: BertConfig):
    """An untrained keras-nlp `BertBackbone` of `config`'s shape."""
    import keras_nlp  # slow to import; only the suites that run the reference need it

    return keras_nlp.models.BertBackbone(
        vocabulary_size=config.vocab_size,
        num_layers=config.num_hidden_layers,
        num_heads=config.num_attention_heads,
        hidden_dim=config.hidden_size,
        intermediate_dim=config.intermediate_size,
        dropout=config.hidden_dropout_prob,
        max_sequence_length=config.max_position_embeddings,
        num_segments=config.type_vocab_size,
    )
