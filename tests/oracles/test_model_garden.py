"""Ours against TF Model Garden's `BertEncoderV2` (tf-models-official 2.16.0, imported from its
wheel in the data cache with gin-config's, never vendored): the same weights, given to Model
Garden variable by variable from our google-named export, give the same sequence and pooled
outputs, with the exact (erf) GELU and with ReLU."""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest

from bert_tf import checkpoints, testing
from bert_tf.data import fetch
from bert_tf.modeling.encoder import build_encoder


@pytest.fixture(scope="module")
def model_garden():
    added = []
    for source, wheel in (
        ("model_garden", "tf_models_official-2.16.0-py2.py3-none-any.whl"),
        ("gin_config", "gin_config-0.5.0-py3-none-any.whl"),
    ):
        path = str(fetch.path(source, wheel))
        if path not in sys.path:
            sys.path.append(path)  # after the venv's packages: only `official` and `gin` from here
            added.append(path)
    import tf_keras
    from official.nlp.modeling.networks import bert_encoder

    yield bert_encoder, tf_keras
    for path in added:  # the pytest worker's later files see the sys.path they had
        sys.path.remove(path)


def _google_name(variable_name: str) -> str:
    """Model Garden's variable name -> the google-research name of the same weight."""
    name = variable_name.split("/", 1)[1].removesuffix(":0")
    layer = re.match(r"transformer/layer_(\d+)/(.*)", name)
    if layer:
        i, rest = layer.groups()
        rest = (
            {
                "self_attention/query": "attention/self/query",
                "self_attention/key": "attention/self/key",
                "self_attention/value": "attention/self/value",
                "self_attention/attention_output": "attention/output/dense",
                "self_attention_layer_norm": "attention/output/LayerNorm",
                "intermediate": "intermediate/dense",
                "output": "output/dense",
                "output_layer_norm": "output/LayerNorm",
            }[rest.rsplit("/", 1)[0]]
            + "/"
            + rest.rsplit("/", 1)[1]
        )
        return f"bert/encoder/layer_{i}/{rest}"
    return {
        "word_embeddings/embeddings": "bert/embeddings/word_embeddings",
        "position_embedding/embeddings": "bert/embeddings/position_embeddings",
        "type_embeddings/embeddings": "bert/embeddings/token_type_embeddings",
        "embeddings/layer_norm/gamma": "bert/embeddings/LayerNorm/gamma",
        "embeddings/layer_norm/beta": "bert/embeddings/LayerNorm/beta",
        "pooler_transform/kernel": "bert/pooler/dense/kernel",
        "pooler_transform/bias": "bert/pooler/dense/bias",
    }[name]


@pytest.mark.parametrize("hidden_act", ["gelu", "relu"])
def test_model_garden_encoder_with_our_weights_gives_our_outputs(model_garden, hidden_act):
    bert_encoder, tf_keras = model_garden
    config = testing.tiny_config(vocab_size=120, hidden_act=hidden_act)
    ours = build_encoder(config)
    rng = np.random.default_rng(11)
    for variable in ours.weights:  # biases and LayerNorm away from 0 and 1 too
        variable.assign(variable.numpy() + rng.normal(0, 0.05, variable.shape))
    google = checkpoints.get_google_weights(ours)

    activation = {
        "gelu": lambda x: tf_keras.activations.gelu(x, approximate=False),
        "relu": tf_keras.activations.relu,
    }[hidden_act]
    theirs = bert_encoder.BertEncoderV2(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        num_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        max_sequence_length=config.max_position_embeddings,
        type_vocab_size=config.type_vocab_size,
        inner_dim=config.intermediate_size,
        inner_activation=activation,
        output_dropout=0.0,
        attention_dropout=0.0,
    )
    batch, seq = 3, 16
    mask = np.array([[int(j < n) for j in range(seq)] for n in (seq, 9, 4)], np.int32)
    inputs = {
        "input_word_ids": rng.integers(5, config.vocab_size, (batch, seq)).astype(np.int32) * mask,
        "input_mask": mask,
        "input_type_ids": np.array([[int(j >= 6) for j in range(seq)]] * batch, np.int32) * mask,
    }
    theirs(inputs)  # builds the variables
    assigned = set()
    for variable in theirs.weights:
        name = _google_name(variable.name)
        value = google[name]
        if name == "bert/embeddings/position_embeddings":
            value = value[: variable.shape[0]]
        variable.assign(np.reshape(value, variable.shape))  # [H, H] <-> [H, heads, head_size]
        assigned.add(name)
    assert assigned == set(google)  # every weight of ours has its place in Model Garden's

    expected = theirs(inputs, training=False)
    got = ours(inputs, training=False)
    for name in ("sequence_output", "pooled_output"):
        np.testing.assert_allclose(
            np.asarray(got[name]), np.asarray(expected[name]), atol=2e-5, rtol=1e-4, err_msg=name
        )
