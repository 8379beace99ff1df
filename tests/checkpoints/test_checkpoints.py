"""Checkpoint interop: google-research TF1 checkpoints (ours and Saver-written), HF safetensors,
mismatch reporting, and the convert_checkpoint script."""

import os
import stat
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from safetensors.numpy import load_file, save_file

from bert_tf import checkpoints, convert_checkpoint, testing
from bert_tf.modeling.configs import BertConfig
from bert_tf.modeling.encoder import build_encoder
from bert_tf.modeling.models import BertPretrainer

TINY = testing.tiny_config(vocab_size=100, max_position_embeddings=16)
IDS = np.array([[2, 15, 27, 3, 0, 0], [2, 9, 33, 41, 8, 3]], dtype="int32")
FEATURES = {
    "input_word_ids": IDS,
    "input_mask": (IDS > 0).astype("int32"),
    "input_type_ids": np.zeros_like(IDS),
}
PRETRAINING_FEATURES = {**FEATURES, "masked_lm_positions": np.array([[1, 2], [3, 4]], "int32")}


def _variables(model):
    return [v.numpy() for v in model.weights]


def _assert_same_variables(a, b):
    assert len(a.weights) == len(b.weights)
    for x, y in zip(a.weights, b.weights, strict=True):
        assert np.array_equal(x.numpy(), y.numpy()), x.path


def _pretrainer(config=TINY):
    return BertPretrainer(build_encoder(config))


def test_google_checkpoint_writes_to_a_gfile_uri():
    """gs:// and the like (ram:// here): the same files, readable by TF's checkpoint reader."""
    model = _pretrainer()
    folder = "ram://google_checkpoint_test/out"
    prefix = checkpoints.save_google_checkpoint(model, folder)
    assert prefix == f"{folder}/bert_model.ckpt"
    assert sorted(tf.io.gfile.listdir(folder)) == [
        "bert_config.json",
        "bert_model.ckpt.data-00000-of-00001",
        "bert_model.ckpt.index",
        "checkpoint",
    ]
    # The reader itself: tf.train.load_checkpoint takes ram://'s prefixes for folders.
    reader = tf.compat.v1.train.NewCheckpointReader(prefix)
    name = "bert/embeddings/word_embeddings"
    expected = checkpoints.get_google_weights(model)[name]
    assert np.array_equal(reader.get_tensor(name), expected)


def test_google_checkpoint_round_trip_is_bit_identical(tmp_path):
    model = _pretrainer()
    prefix = checkpoints.save_google_checkpoint(model, tmp_path)
    assert prefix == str(tmp_path / "bert_model.ckpt")
    assert tf.train.latest_checkpoint(str(tmp_path)) == prefix
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "bert_config.json",
        "bert_model.ckpt.data-00000-of-00001",
        "bert_model.ckpt.index",
        "checkpoint",
    ]
    assert BertConfig.from_json_file(tmp_path / "bert_config.json") == TINY
    shapes = dict(tf.train.list_variables(prefix))
    assert len(shapes) == len(model.weights)
    # google-research names and layouts.
    assert shapes["bert/encoder/layer_1/attention/self/query/kernel"] == [32, 32]
    assert shapes["bert/encoder/layer_1/attention/self/query/bias"] == [32]
    assert shapes["bert/encoder/layer_0/attention/output/dense/kernel"] == [32, 32]
    assert shapes["cls/seq_relationship/output_weights"] == [2, 32]
    assert shapes["cls/predictions/output_bias"] == [100]

    restored = _pretrainer()
    loaded = checkpoints.load_pretrained(restored, prefix)
    assert len(loaded) == len(model.weights)
    _assert_same_variables(model, restored)
    for key, value in model(PRETRAINING_FEATURES).items():
        np.testing.assert_array_equal(value, restored(PRETRAINING_FEATURES)[key])

    # An encoder takes its part of a pre-training checkpoint (the folder form works too).
    encoder = build_encoder(TINY)
    checkpoints.load_pretrained(encoder, tmp_path)
    _assert_same_variables(model.encoder, encoder)


def test_tf1_saver_checkpoint_with_optimizer_slots_loads(tmp_path):
    """Simulates a google-research release: graph-mode Saver, adam slots and global_step."""
    reference = _pretrainer()
    weights = checkpoints.get_google_weights(reference)
    with tf.Graph().as_default():
        for name, value in weights.items():
            tf.compat.v1.Variable(value, name=name)
            tf.compat.v1.Variable(np.zeros_like(value), name=f"{name}/adam_m")
            tf.compat.v1.Variable(np.ones_like(value), name=f"{name}/adam_v")
        tf.compat.v1.train.create_global_step()
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            prefix = saver.save(session, str(tmp_path / "bert_model.ckpt"))
    assert "bert/pooler/dense/kernel/adam_m" in dict(tf.train.list_variables(prefix))
    model = _pretrainer()
    checkpoints.load_pretrained(model, prefix)
    _assert_same_variables(reference, model)


def _checkpoint_without_config(model, directory):
    prefix = checkpoints.save_google_checkpoint(model, directory)
    os.remove(directory / "bert_config.json")  # only the variables are compared then
    return prefix


def test_missing_variables_are_listed(tmp_path):
    prefix = _checkpoint_without_config(build_encoder(TINY), tmp_path)
    deeper = build_encoder(BertConfig(**{**TINY.to_dict(), "num_hidden_layers": 3}))
    with pytest.raises(checkpoints.CheckpointMismatchError) as error:
        checkpoints.load_pretrained(deeper, prefix)
    message = str(error.value)
    assert "missing in checkpoint (16)" in message
    assert "bert/encoder/layer_2/attention/self/query/kernel" in message
    assert "bert/encoder/layer_1/" not in message
    assert "allow_missing=True" in message
    # With allow_missing the rest loads; the missing layer keeps its initial values.
    before = deeper.transformer_layers[2].output_dense.kernel.numpy()
    checkpoints.load_pretrained(deeper, prefix, allow_missing=True)
    np.testing.assert_array_equal(deeper.transformer_layers[2].output_dense.kernel, before)


def test_unexpected_variables_are_listed(tmp_path):
    deeper = build_encoder(BertConfig(**{**TINY.to_dict(), "num_hidden_layers": 3}))
    prefix = _checkpoint_without_config(deeper, tmp_path)
    with pytest.raises(checkpoints.CheckpointMismatchError) as error:
        checkpoints.load_pretrained(build_encoder(TINY), prefix)
    message = str(error.value)
    assert "unexpected in checkpoint (16)" in message
    assert "bert/encoder/layer_2/output/LayerNorm/beta" in message
    assert "missing" not in message


def test_shape_mismatches_are_listed_with_both_shapes(tmp_path):
    model = _pretrainer()
    prefix = _checkpoint_without_config(model, tmp_path)
    bigger = _pretrainer(BertConfig(**{**TINY.to_dict(), "vocab_size": 120}))
    with pytest.raises(checkpoints.CheckpointMismatchError) as error:
        checkpoints.load_pretrained(bigger, prefix)
    message = str(error.value)
    assert "shape mismatch (2)" in message
    assert "bert/embeddings/word_embeddings: checkpoint (100, 32) vs model (120, 32)" in message
    assert "cls/predictions/output_bias: checkpoint (100,) vs model (120,)" in message
    checkpoints.load_pretrained(bigger, prefix, skip_mismatch=True)
    np.testing.assert_array_equal(
        bigger.encoder.pooler_dense.kernel, model.encoder.pooler_dense.kernel
    )


def test_config_beside_checkpoint_must_match(tmp_path):
    # Same variable shapes, different head count: only the config tells them apart.
    prefix = checkpoints.save_google_checkpoint(build_encoder(TINY), tmp_path)
    other = build_encoder(BertConfig(**{**TINY.to_dict(), "num_attention_heads": 2}))
    with pytest.raises(ValueError, match="num_attention_heads: model 2 vs checkpoint 4"):
        checkpoints.load_pretrained(other, prefix)


def test_unknown_paths_are_rejected(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope"):
        checkpoints.load_pretrained(build_encoder(TINY), tmp_path / "nope")
    with pytest.raises(ValueError, match=r"neither model\.safetensors"):
        checkpoints.detect_format(tmp_path)


def test_hf_bert_prefix_and_pretraining_heads(minilm_dir, tmp_path):
    tensors = load_file(minilm_dir / "model.safetensors")
    config = BertConfig.from_hf_json_file(minilm_dir / "config.json")
    h, v = config.hidden_size, config.vocab_size
    rng = np.random.default_rng(0)
    heads = {
        "cls.predictions.transform.dense.weight": rng.normal(size=(h, h)),
        "cls.predictions.transform.dense.bias": rng.normal(size=(h,)),
        "cls.predictions.transform.LayerNorm.weight": rng.normal(size=(h,)),
        "cls.predictions.transform.LayerNorm.bias": rng.normal(size=(h,)),
        "cls.predictions.bias": rng.normal(size=(v,)),
        "cls.predictions.decoder.bias": rng.normal(size=(v,)),  # tied copy: ignored
        "cls.seq_relationship.weight": rng.normal(size=(2, h)),
        "cls.seq_relationship.bias": rng.normal(size=(2,)),
    }
    prefixed = {f"bert.{k}": a for k, a in tensors.items()}
    prefixed.update({k: a.astype("float32") for k, a in heads.items()})
    save_file(prefixed, str(tmp_path / "model.safetensors"))

    model = BertPretrainer(build_encoder(config))
    checkpoints.load_pretrained(model, tmp_path / "model.safetensors")
    head = model.masked_lm_head
    np.testing.assert_array_equal(
        model.next_sentence_head.kernel, heads["cls.seq_relationship.weight"].T.astype("float32")
    )
    np.testing.assert_array_equal(
        head._intermediate_dense.kernel,
        heads["cls.predictions.transform.dense.weight"].T.astype("float32"),
    )
    np.testing.assert_array_equal(head._bias, heads["cls.predictions.bias"].astype("float32"))
    query = model.encoder.transformer_layers[3].attention._query_dense.kernel.numpy()
    np.testing.assert_array_equal(
        query.reshape(h, h), tensors["encoder.layer.3.attention.self.query.weight"].T
    )

    # A fine-tuned HF head this table does not know is reported, not dropped silently.
    save_file(
        {**tensors, "classifier.weight": np.zeros((3, h), "float32")},
        str(tmp_path / "c.safetensors"),
    )
    encoder = build_encoder(config)
    with pytest.raises(checkpoints.CheckpointMismatchError, match=r"unexpected.*\n.*classifier"):
        checkpoints.load_pretrained(encoder, tmp_path / "c.safetensors")
    checkpoints.load_pretrained(encoder, tmp_path / "c.safetensors", allow_unexpected=True)
    _assert_same_variables(model.encoder, encoder)


def test_convert_checkpoint_script(minilm_dir, minilm_reference, tmp_path):
    out = tmp_path / "google"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bert_tf.convert_checkpoint",
            f"--input={minilm_dir}",
            f"--output_dir={out}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (out / "vocab.txt").read_bytes() == (minilm_dir / "vocab.txt").read_bytes()
    config = BertConfig.from_json_file(out / "bert_config.json")
    assert config == BertConfig.from_hf_json_file(minilm_dir / "config.json")
    assert not any(name.startswith("cls/") for name, _ in tf.train.list_variables(str(out)))

    from_hf = build_encoder(config)
    checkpoints.load_pretrained(from_hf, minilm_dir)
    from_google = build_encoder(config)
    checkpoints.load_pretrained(from_google, out)
    _assert_same_variables(from_hf, from_google)
    ids = np.array([minilm_reference["outputs"]["A man is eating food."]["input_ids"]], "int32")
    features = {
        "input_word_ids": ids,
        "input_mask": np.ones_like(ids),
        "input_type_ids": np.zeros_like(ids),
    }
    np.testing.assert_array_equal(
        from_hf(features)["sequence_output"], from_google(features)["sequence_output"]
    )


def test_convert_checkpoint_bad_input_names_the_path(tmp_path):
    # main() prints exactly this message as `error: ...` (one line, no traceback).
    with pytest.raises(FileNotFoundError, match=r"nope.*not a checkpoint prefix"):
        convert_checkpoint.convert(str(tmp_path / "nope"), str(tmp_path), None, False)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("mask", [0o022, 0o027])
def test_convert_checkpoint_outputs_follow_the_umask(minilm_dir, tmp_path, mask):
    # Regression: bert_config.json and vocab.txt came out 0600 (temp-file modes) beside a 0644
    # checkpoint, unreadable to a TF Serving container running as another user.
    old = os.umask(mask)
    try:
        convert_checkpoint.convert(str(minilm_dir), str(tmp_path / "google"))
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "google").iterdir()}
    assert {"bert_config.json", "vocab.txt", "checkpoint", "bert_model.ckpt.index"} <= set(modes)
    assert set(modes.values()) == {0o666 & ~mask}, modes
    assert stat.S_IMODE((tmp_path / "google").stat().st_mode) == 0o777 & ~mask


def test_encoder_only_checkpoint_starts_fresh_pretraining_heads(tmp_path):
    """Continued pretraining from an encoder-only checkpoint (an HF BertModel, e.g. MiniLM):
    with fresh_heads the encoder loads, the seven head variables keep their initial values,
    the masked-LM decoder is the loaded word embeddings; without it the error lists them."""
    encoder_only = build_encoder(TINY)
    prefix = _checkpoint_without_config(encoder_only, tmp_path)
    model = _pretrainer()
    with pytest.raises(checkpoints.CheckpointMismatchError, match=r"missing in checkpoint \(7\)"):
        checkpoints.load_pretrained(model, prefix)
    head = model.masked_lm_head._intermediate_dense.kernel.numpy()
    checkpoints.load_pretrained(model, prefix, fresh_heads=True)
    np.testing.assert_array_equal(model.masked_lm_head._intermediate_dense.kernel, head)
    np.testing.assert_array_equal(
        model.encoder.word_embeddings.embeddings, encoder_only.word_embeddings.embeddings
    )
    # The tied decoder: logits move with the word embeddings.
    before = model(PRETRAINING_FEATURES)["mlm_logits"].numpy()
    model.encoder.word_embeddings.embeddings.assign(model.encoder.word_embeddings.embeddings * 2)
    assert not np.allclose(model(PRETRAINING_FEATURES)["mlm_logits"], before)
    fresh = {v.path for v in checkpoints.fresh_variables(model, prefix)}
    assert len(fresh) == 7
    assert all(p.startswith(("masked_lm_head", "next_sentence_head")) for p in fresh), fresh
    # A missing encoder variable is still an error with fresh_heads.
    deeper = _pretrainer(BertConfig(**{**TINY.to_dict(), "num_hidden_layers": 3}))
    with pytest.raises(checkpoints.CheckpointMismatchError, match=r"missing in checkpoint \(16\)"):
        checkpoints.load_pretrained(deeper, prefix, fresh_heads=True)


def test_checkpoint_with_heads_has_no_fresh_variables(tmp_path):
    model = _pretrainer()
    prefix = _checkpoint_without_config(model, tmp_path)
    assert checkpoints.fresh_variables(_pretrainer(), prefix) == []
