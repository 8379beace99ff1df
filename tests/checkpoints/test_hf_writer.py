"""save_hf_checkpoint / get_hf_weights: our models written as HF transformers folders, in HF's
names and layouts (experiments/hf_parity.py loads one into transformers; tests/experiments/
test_hf_parity.py runs that)."""

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from bert_tf import checkpoints, testing
from bert_tf.modeling.configs import BertConfig
from bert_tf.modeling.encoder import build_encoder
from bert_tf.modeling.models import BertClassifier, BertPretrainer, BertSpanLabeler

TINY = testing.tiny_config(vocab_size=100, max_position_embeddings=16)


def _assert_same_variables(a, b):
    assert len(a.weights) == len(b.weights)
    for x, y in zip(a.weights, b.weights, strict=True):
        assert np.array_equal(x.numpy(), y.numpy()), x.path


def test_minilm_round_trips_to_the_same_hf_tensors(minilm_dir, tmp_path):
    encoder = build_encoder(BertConfig.from_hf_json_file(minilm_dir / "config.json"))
    checkpoints.load_pretrained(encoder, minilm_dir)
    folder = Path(
        checkpoints.save_hf_checkpoint(encoder, tmp_path / "hf", minilm_dir / "vocab.txt")
    )
    original = load_file(minilm_dir / "model.safetensors")
    written = load_file(folder / "model.safetensors")
    # Every weight, bit for bit (HF's position_ids buffer is not a weight).
    assert set(written) == set(original) - {"embeddings.position_ids"}
    for name, array in written.items():
        assert array.dtype == np.float32 and np.array_equal(array, original[name]), name
    assert (folder / "vocab.txt").read_bytes() == (minilm_dir / "vocab.txt").read_bytes()
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["BertModel"]
    assert BertConfig.from_hf_json_file(folder / "config.json") == encoder.bert_config


def test_classifier_is_bert_for_sequence_classification(tmp_path):
    model = BertClassifier(build_encoder(TINY), num_classes=3, dropout=0.0)
    folder = Path(checkpoints.save_hf_checkpoint(model, tmp_path))
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["BertForSequenceClassification"]
    assert config["id2label"] == {"0": "LABEL_0", "1": "LABEL_1", "2": "LABEL_2"}
    assert config["classifier_dropout"] == 0.0
    tensors = load_file(folder / "model.safetensors")
    assert all(k.startswith(("bert.", "classifier.")) for k in tensors)
    h = TINY.hidden_size
    assert tensors["classifier.weight"].shape == (3, h)
    np.testing.assert_array_equal(tensors["classifier.weight"], model.head.dense.kernel.numpy().T)
    np.testing.assert_array_equal(tensors["classifier.bias"], model.head.dense.bias.numpy())
    query = model.encoder.transformer_layers[1].attention._query_dense.kernel.numpy()
    np.testing.assert_array_equal(
        tensors["bert.encoder.layer.1.attention.self.query.weight"], query.reshape(h, h).T
    )
    assert tensors.keys() == checkpoints.get_hf_weights(model).keys()

    # Our reader takes the encoder back; the head is HF's, reported unless allowed.
    other = BertClassifier(build_encoder(TINY), num_classes=3, dropout=0.0)
    with pytest.raises(checkpoints.CheckpointMismatchError, match="classifier"):
        checkpoints.load_pretrained(other, folder)
    checkpoints.load_pretrained(other, folder, allow_unexpected=True)
    _assert_same_variables(model.encoder, other.encoder)


def test_pretrainer_round_trips_through_our_reader(tmp_path):
    model = BertPretrainer(build_encoder(TINY))
    folder = Path(checkpoints.save_hf_checkpoint(model, tmp_path))
    assert json.loads((folder / "config.json").read_text())["architectures"] == [
        "BertForPreTraining"
    ]
    tensors = load_file(folder / "model.safetensors")
    assert "cls.predictions.bias" in tensors and "bert.pooler.dense.weight" in tensors
    assert "cls.predictions.decoder.weight" not in tensors  # tied to the word embeddings
    other = BertPretrainer(build_encoder(TINY))
    checkpoints.load_pretrained(other, folder)
    _assert_same_variables(model, other)


def test_other_task_models_are_refused(tmp_path):
    with pytest.raises(TypeError, match="BertSpanLabeler"):
        checkpoints.save_hf_checkpoint(BertSpanLabeler(build_encoder(TINY)), tmp_path)
