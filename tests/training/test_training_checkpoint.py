"""Object-based training checkpoints (`training_checkpoint`) read back by `load_pretrained`."""

import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf import checkpoints, testing
from bert_tf.modeling.configs import BertConfig
from bert_tf.modeling.encoder import build_encoder
from bert_tf.modeling.models import BertClassifier, BertPretrainer

TINY = testing.tiny_config(vocab_size=100, max_position_embeddings=16)


def _assert_equal(a, b):
    assert len(a.weights) == len(b.weights)
    for x, y in zip(a.weights, b.weights, strict=True):
        np.testing.assert_array_equal(x.numpy(), y.numpy(), err_msg=x.path)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A pretrainer and a classifier, each saved with an optimizer and a step counter."""
    root = tmp_path_factory.mktemp("training_ckpt")
    pretrainer = BertPretrainer(build_encoder(TINY))
    classifier = BertClassifier(build_encoder(TINY), num_classes=3)
    for name, model in (("pretrainer", pretrainer), ("classifier", classifier)):
        optimizer = keras.optimizers.Adam()
        optimizer.build(model.trainable_variables)
        step = tf.Variable(7, dtype=tf.int64)
        ckpt = checkpoints.training_checkpoint(model, optimizer, step=step)
        tf.train.CheckpointManager(ckpt, str(root / name), max_to_keep=2).save(checkpoint_number=7)
    return root, pretrainer, classifier


def test_detected_as_object_format(written):
    root, _, _ = written
    assert checkpoints.detect_format(root / "pretrainer") == "object"
    assert checkpoints.detect_format(root / "pretrainer" / "ckpt-7") == "object"


def test_pretrainer_checkpoint_into_classifier_loads_the_encoder(written):
    root, pretrainer, _ = written
    classifier = BertClassifier(build_encoder(TINY), num_classes=2)
    head_before = [v.numpy() for v in classifier.head.weights]
    loaded = checkpoints.load_pretrained(classifier, root / "pretrainer")
    assert "bert/pooler/dense/kernel" in loaded
    _assert_equal(pretrainer.encoder, classifier.encoder)
    # Another task type: its head is kept as initialised.
    for before, after in zip(head_before, classifier.head.weights, strict=True):
        np.testing.assert_array_equal(before, after.numpy())


def test_pretrainer_checkpoint_into_pretrainer_loads_everything(written):
    root, pretrainer, _ = written
    fresh = BertPretrainer(build_encoder(TINY))
    checkpoints.load_pretrained(fresh, root / "pretrainer" / "ckpt-7")
    _assert_equal(pretrainer, fresh)


def test_same_task_model_restores_its_head(written):
    root, _, classifier = written
    fresh = BertClassifier(build_encoder(TINY), num_classes=3)
    loaded = checkpoints.load_pretrained(fresh, root / "classifier")
    assert "classifier/logits/kernel" in loaded
    _assert_equal(classifier, fresh)


def test_task_head_shape_mismatch_is_listed(written):
    root, _, _ = written
    fresh = BertClassifier(build_encoder(TINY), num_classes=5)
    with pytest.raises(checkpoints.CheckpointMismatchError, match=r"classifier/logits/kernel"):
        checkpoints.load_pretrained(fresh, root / "classifier")
    checkpoints.load_pretrained(fresh, root / "classifier", skip_mismatch=True)


def test_other_shape_is_a_clear_error(written):
    root, _, _ = written
    bigger = BertClassifier(build_encoder(BertConfig(**{**TINY.to_dict(), "hidden_size": 64})), 2)
    with pytest.raises(ValueError, match=r"hidden_size: model 64 vs checkpoint 32"):
        checkpoints.load_pretrained(bigger, root / "pretrainer")


def test_plain_object_checkpoint_is_rejected(tmp_path):
    prefix = tf.train.Checkpoint(step=tf.Variable(1)).write(str(tmp_path / "ckpt"))
    with pytest.raises(
        ValueError, match=r"not written by bert_tf\.checkpoints\.training_checkpoint"
    ):
        checkpoints.load_pretrained(BertPretrainer(build_encoder(TINY)), prefix)


def test_reserved_extra_names():
    with pytest.raises(ValueError, match="reserved"):
        checkpoints.training_checkpoint(BertPretrainer(build_encoder(TINY)), encoder=tf.Variable(1))


def test_encoder_loads_a_pretrainer_checkpoint_in_a_process_without_bert_tf_models(written):
    # The checkpoint stores a BertPretrainer config; reading it must not depend on the caller
    # having imported the module that registers that class.
    root, pretrainer, _ = written
    expected = root / "pretrainer_word_embeddings.npy"
    np.save(expected, pretrainer.encoder.word_embeddings.embeddings.numpy())
    code = f"""
import numpy as np
from bert_tf import checkpoints
from bert_tf.modeling.configs import BertConfig
from bert_tf.modeling.encoder import build_encoder
encoder = build_encoder(BertConfig(**{TINY.to_dict()!r}))
checkpoints.load_pretrained(encoder, {str(root / "pretrainer")!r})
np.testing.assert_array_equal(encoder.word_embeddings.embeddings.numpy(), np.load({str(expected)!r}))
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
