"""Single-sentence classifiers: `serving_default` takes `text_a` alone; pair models keep text_b.

TF Serving rejects a request that lacks any input of the signature (`Missing but required:
['text_b']`), so the export of a single-sentence task must not ask for `text_b`. The exports
here come from a run_classifier-style output folder (checkpoint, bert_config.json, vocab.txt,
task_info.json) whose description the script follows unless a flag overrides it.
"""

import json
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import prediction_log_pb2

from bert_tf import checkpoints, testing
from bert_tf.modeling.encoder import build_encoder
from bert_tf.modeling.models import BertClassifier
from bert_tf.text.tokenization import BertPreprocessor
from serving import export
from serving.signatures import WARMUP_FILE, read_signature_defs

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "?", "the", "a", "dog", "runs", "fast"]
VOCAB += ["movie", "was", "great", "bad", "is", "it", "sunny", "yes", "##s"]
TINY = testing.micro_config(vocab_size=len(VOCAB))
LABELS = ["neg", "pos"]
SEQ_LENGTH = 16
TEXTS = ["the movie was great .", "the dog runs fast", "is it sunny ?"]
INFO = {
    "task": "classifier",
    "task_name": "sst-2",
    "labels": LABELS,
    "regression": False,
    "single_segment": True,
    "do_lower_case": True,
    "max_seq_length": SEQ_LENGTH,
}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """(folder, model): what run_classifier leaves after training SST-2, without the training."""
    folder = tmp_path_factory.mktemp("sst2_run")
    keras.utils.set_random_seed(2)
    model = BertClassifier(build_encoder(TINY), len(LABELS))
    checkpoints.training_checkpoint(model).write(str(folder / "ckpt-1"))
    (folder / "checkpoint").write_text('model_checkpoint_path: "ckpt-1"\n')
    vocab = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    vocab.write_text("".join(t + "\n" for t in VOCAB))
    checkpoints.write_model_files(folder, TINY, vocab, INFO)
    return folder, model


def _inputs(path, signature="serving_default") -> set[str]:
    return set(read_signature_defs(path)[signature].inputs)


def test_single_segment_export_serves_text_a_alone(run_dir, tmp_path):
    folder, model = run_dir
    path = export.build_and_export(None, str(folder), str(tmp_path / "sst2"))  # no other flag
    # Before the fix serving_default always asked for text_a and text_b.
    assert _inputs(path) == {"text_a"}
    assert _inputs(path, "classify") == {"inputs"}  # the tf.Example signature is unchanged
    signatures = tf.saved_model.load(path).signatures
    out = signatures["serving_default"](text_a=tf.constant(TEXTS))
    # The folder's max_seq_length and run_classifier's packing of single sentences.
    preprocessor = BertPreprocessor(VOCAB, seq_length=SEQ_LENGTH)
    expected = model(preprocessor(tf.constant(TEXTS))).numpy()
    np.testing.assert_allclose(out["logits"], expected, atol=1e-5)
    np.testing.assert_allclose(out["probabilities"], tf.nn.softmax(expected), atol=1e-5)
    assert [x.decode() for x in out["label"].numpy()] == [LABELS[i] for i in expected.argmax(-1)]
    examples = [
        tf.train.Example(
            features=tf.train.Features(
                feature={"text_a": tf.train.Feature(bytes_list=tf.train.BytesList(value=[t]))}
            )
        ).SerializeToString()
        for t in (text.encode() for text in TEXTS)
    ]
    classified = signatures["classify"](inputs=tf.constant(examples))
    np.testing.assert_allclose(classified["scores"], out["probabilities"], atol=1e-6)
    # The warmup requests TF Serving replays at load time carry text_a only, and run.
    records = tf.data.TFRecordDataset(f"{path}/{WARMUP_FILE}").as_numpy_iterator()
    for record in records:
        request = prediction_log_pb2.PredictionLog.FromString(record).predict_log.request
        inputs = {k: tf.make_ndarray(v) for k, v in request.inputs.items()}
        assert set(inputs) == {"text_a"}
        signatures[request.model_spec.signature_name](**inputs)


def test_pair_export_still_requires_text_b(run_dir, tmp_path):
    folder, model = run_dir
    # --nosingle_segment overrides the folder's description (and a checkpoint inside it works).
    path = export.build_and_export(
        "classifier", str(folder / "ckpt-1"), str(tmp_path / "pair"), single_segment=False
    )
    assert _inputs(path) == {"text_a", "text_b"}
    serve = tf.saved_model.load(path).signatures["serving_default"]
    with pytest.raises(TypeError, match="text_b"):
        serve(text_a=tf.constant(TEXTS))
    text_b = ["yes", "", "yes it is"]
    out = serve(text_a=tf.constant(TEXTS), text_b=tf.constant(text_b))
    preprocessor = BertPreprocessor(VOCAB, seq_length=SEQ_LENGTH)
    pair = model(preprocessor((tf.constant(TEXTS[2:]), tf.constant(text_b[2:])))).numpy()
    np.testing.assert_allclose(out["logits"][2:], pair, atol=1e-5)
    assert json.loads((folder / checkpoints.TASK_INFO_NAME).read_text()) == INFO


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_seq_length": 33}, r"--max_seq_length: expected 3\.\.32 \(max_position_embeddings "),
        ({"label_names": ["a", "b", "c"]}, "--label_names has 3 names but .*task_info.json"),
        ({"num_labels": 3}, "--num_labels=3 but .*task_info.json describes labels"),
        ({"regression": True}, "--regression but .*task_info.json describes labels"),
        ({"task": "squad"}, "--task=squad but .*task_info.json describes a classifier model"),
        ({"vocab_file": "other_vocab.txt"}, r"--vocab_file=.* has 22 tokens but .*bert_config"),
    ],
)
def test_flags_that_do_not_fit_the_folder_are_one_line_errors(run_dir, tmp_path, kwargs, message):
    folder, _ = run_dir
    if "vocab_file" in kwargs:
        kwargs["vocab_file"] = tmp_path / kwargs["vocab_file"]
        kwargs["vocab_file"].write_text("".join(t + "\n" for t in [*VOCAB, "cat"]))
    kwargs = {"task": None, **kwargs}
    with pytest.raises(ValueError, match=message) as error:
        export.build_and_export(
            init_checkpoint=str(folder), export_dir=str(tmp_path / "out"), **kwargs
        )
    assert "\n" not in str(error.value)
    assert str(folder) in str(error.value)  # the file it disagrees with
    assert not (tmp_path / "out").exists()


def test_task_info_is_checked(tmp_path):
    (tmp_path / checkpoints.TASK_INFO_NAME).write_text('{"task": "classifier", "labels": "ab"}')
    with pytest.raises(ValueError, match=r"task_info.json: \"labels\" must be a list"):
        checkpoints.read_task_info(Path(tmp_path))
    with pytest.raises(ValueError, match=r'"task" must be one of \[.classifier., .squad.\]'):
        checkpoints.write_model_files(tmp_path, TINY, tmp_path / "x", {"task": "ner"})
