"""SavedModel exports for TF Serving: signatures, relocation, warmup, and serving through our server."""

import json
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import prediction_log_pb2

from bert_tf import testing
from bert_tf.modeling.encoder import build_encoder
from bert_tf.modeling.models import BertClassifier, BertPretrainer, BertSpanLabeler
from bert_tf.text import tokenization
from bert_tf.text.tokenization import BertPreprocessor
from serving import export, export_lib
from serving.client import ServingClient
from serving.signatures import WARMUP_FILE, read_signature_defs

WORDS = [
    "the",
    "a",
    "man",
    "is",
    "eating",
    "food",
    "dog",
    "runs",
    "fast",
    "paris",
    "capital",
    "of",
    "france",
    "who",
    "wrote",
    "book",
    "by",
]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "?", "!", *WORDS, "##s", "##ing"]
TINY = testing.tiny_config(vocab_size=len(VOCAB))
LABELS = ["neg", "neutral", "pos"]


def _tiny(model_class, *args):
    keras.utils.set_random_seed(1)
    return model_class(build_encoder(TINY), *args)


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """One base path per exported model (shared by the tests below)."""
    root = tmp_path_factory.mktemp("exports")
    preprocessor = BertPreprocessor(VOCAB, seq_length=16)
    pretrainer = _tiny(BertPretrainer)
    classifier = _tiny(BertClassifier, 3)
    regressor = _tiny(BertClassifier, 1)
    span_model = _tiny(BertSpanLabeler)
    paths = {
        "pretrainer": export_lib.export_encoder(pretrainer, preprocessor, root / "pretrainer"),
        "classifier": export_lib.export_classifier(
            classifier, preprocessor, root / "classifier", label_names=LABELS
        ),
        "regressor": export_lib.export_classifier(
            regressor, preprocessor, root / "regressor", regression=True
        ),
        "squad": export_lib.export_squad(
            span_model,
            BertPreprocessor(VOCAB, seq_length=24),
            root / "squad",
            doc_stride=5,
            max_query_length=6,
            max_answer_length=4,
        ),
    }
    models = {"pretrainer": pretrainer, "classifier": classifier, "regressor": regressor}
    return {"root": root, "paths": paths, "models": models, "preprocessor": preprocessor}


@pytest.fixture(scope="module")
def loaded(exports):
    """name -> the loaded SavedModel's signatures (each export loaded once)."""
    cache = {}

    def load(name):
        if name not in cache:
            cache[name] = tf.saved_model.load(exports["paths"][name]).signatures
        return cache[name]

    return load


def test_version_layout(exports):
    path = exports["paths"]["pretrainer"]
    assert path == str(exports["root"] / "pretrainer" / "1")
    names = sorted(p.name for p in (exports["root"] / "pretrainer").iterdir())
    assert names == ["1"]  # no temporary folder left beside the version
    assert (exports["root"] / "pretrainer" / "1" / "assets" / "vocab.txt").read_text().split("\n")[
        :-1
    ] == VOCAB
    assert export_lib.next_version(exports["root"] / "pretrainer") == 2
    with pytest.raises(ValueError, match="already exists"):
        export_lib.export_encoder(
            exports["models"]["pretrainer"],
            exports["preprocessor"],
            exports["root"] / "pretrainer",
            version=1,
        )


def test_fill_mask_top_k(exports, loaded):
    model, preprocessor = exports["models"]["pretrainer"], exports["preprocessor"]
    texts = tf.constant(["the [MASK] is eating [MASK] .", "paris is the [MASK]", "no mask"])
    out = loaded("pretrainer")["fill_mask"](text=texts, top_k=tf.constant(3))
    assert out["top_k_tokens"].shape == (3, 2, 3)
    np.testing.assert_array_equal(out["mask_valid"], [[1, 1], [1, 0], [0, 0]])
    probabilities = out["top_k_probabilities"].numpy()
    assert np.all(probabilities[:, :, :-1] >= probabilities[:, :, 1:])
    assert np.all(probabilities.sum(-1) <= 1 + 1e-6)
    assert np.all(probabilities[0] > 0)
    # In-process: the tokenizer's [MASK] handling, positions and top-1 ids.
    features = tokenization.mask_aware_features(preprocessor, texts)
    ids = features["input_word_ids"].numpy()
    assert list(ids[0, :8]) == [
        2,
        9,
        4,
        12,
        13,
        4,
        5,
        3,
    ]  # [CLS] the [MASK] is eating [MASK] . [SEP]
    np.testing.assert_array_equal(out["mask_positions"][0], [2, 5])
    logits = model({**features, "masked_lm_positions": out["mask_positions"]})["mlm_logits"]
    top1 = np.argmax(logits.numpy(), axis=-1)
    valid = out["mask_valid"].numpy()
    np.testing.assert_array_equal(out["top_k_ids"].numpy()[..., 0][valid], top1[valid])
    assert out["top_k_tokens"].numpy()[0, 0, 0].decode() == VOCAB[top1[0, 0]]


def test_classifier_matches_in_process_model(exports, loaded):
    model, preprocessor = exports["models"]["classifier"], exports["preprocessor"]
    serve = loaded("classifier")["serving_default"]
    text_a = ["the dog runs fast", "who wrote the book ?"]
    text_b = ["", "a man"]
    out = serve(text_a=tf.constant(text_a), text_b=tf.constant(text_b))
    single = preprocessor(tf.constant(text_a[:1]))
    pair = preprocessor((tf.constant(text_a[1:]), tf.constant(text_b[1:])))
    expected = np.concatenate([model(single).numpy(), model(pair).numpy()])
    np.testing.assert_allclose(out["logits"], expected, atol=1e-5)
    np.testing.assert_allclose(out["probabilities"], tf.nn.softmax(expected), atol=1e-5)
    assert [x.decode() for x in out["label"].numpy()] == [LABELS[i] for i in expected.argmax(-1)]


def _example(**features):
    return tf.train.Example(
        features=tf.train.Features(
            feature={
                k: tf.train.Feature(bytes_list=tf.train.BytesList(value=[v.encode()]))
                for k, v in features.items()
            }
        )
    ).SerializeToString()


def test_classify_and_regress_signatures(exports, loaded):
    clf_defs = read_signature_defs(exports["paths"]["classifier"])
    reg_defs = read_signature_defs(exports["paths"]["regressor"])
    assert clf_defs["classify"].method_name == tf.saved_model.CLASSIFY_METHOD_NAME
    assert list(clf_defs["classify"].inputs) == ["inputs"]
    assert reg_defs["regress"].method_name == tf.saved_model.REGRESS_METHOD_NAME
    assert clf_defs["serving_default"].method_name == tf.saved_model.PREDICT_METHOD_NAME
    examples = tf.constant([_example(text_a="the dog runs fast"), _example(text_a="a", text_b="b")])
    classifier = loaded("classifier")
    classified = classifier["classify"](inputs=examples)
    served = classifier["serving_default"](
        text_a=tf.constant(["the dog runs fast", "a"]), text_b=tf.constant(["", "b"])
    )
    np.testing.assert_allclose(classified["scores"], served["probabilities"], atol=1e-6)
    assert classified["classes"].numpy().tolist() == [[s.encode() for s in LABELS]] * 2
    regressor = loaded("regressor")
    regressed = regressor["regress"](inputs=examples)["outputs"].numpy()
    expected = exports["models"]["regressor"](
        exports["preprocessor"](tf.constant(["the dog runs fast"]))
    ).numpy()[0, 0]
    assert regressed.shape == (2,)
    np.testing.assert_allclose(regressed[0], expected, atol=1e-5)


def test_warmup_requests_parse_and_replay(exports, loaded):
    for name in ("pretrainer", "classifier", "squad"):
        path = exports["paths"][name]
        signatures = loaded(name)
        records = list(tf.data.TFRecordDataset(f"{path}/{WARMUP_FILE}").as_numpy_iterator())
        assert records
        for record in records:
            request = prediction_log_pb2.PredictionLog.FromString(record).predict_log.request
            assert request.model_spec.name == name
            inputs = {k: tf.make_ndarray(v) for k, v in request.inputs.items()}
            outputs = signatures[request.model_spec.signature_name](**inputs)
            assert all(v.shape[0] == len(next(iter(inputs.values()))) for v in outputs.values())


def test_squad_answers_are_context_spans_over_several_windows(loaded):
    serve = loaded("squad")["serving_default"]
    sentence = "The dog runs fast, the man is eating food by Paris. "
    contexts = [sentence * 6, "Who wrote the book?", "", "  Éating  foods!"]
    questions = ["who is eating ?", "who wrote", "who", "the dog"]
    out = serve(question=tf.constant(questions), context=tf.constant(contexts))
    for i, context in enumerate(contexts):
        start, end = int(out["start_char"][i]), int(out["end_char"][i])
        answer = out["answer_text"].numpy()[i].decode()
        # run_squad's text: the doc words of context[start:end], joined by one space.
        assert answer == " ".join(context[start:end].split())
        if context:
            assert 0 <= start < end <= len(context)
            assert np.isfinite(out["score"][i])
        else:
            assert (start, end, answer) == (0, 0, "")
    assert len(contexts[0].split()) > 24  # more tokens than one 24-token window holds


def test_minilm_cli_export_in_a_plain_tensorflow_process(minilm_dir, minilm_reference, tmp_path):
    # The script finds config.json and vocab.txt in the HF folder.
    command = [sys.executable, "-m", "serving.export", "--task=encoder", "--max_seq_length=32"]
    command += [f"--init_checkpoint={minilm_dir}", f"--export_dir={tmp_path / 'm' / 'bert'}"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == str(tmp_path / "m" / "bert" / "1")
    signatures = set(read_signature_defs(tmp_path / "m" / "bert" / "1"))
    assert signatures - {"__saved_model_init_op"} == {"serving_default"}  # MiniLM: no MLM head
    moved = tmp_path / "moved"
    shutil.move(str(tmp_path / "m"), moved)  # no absolute path may be left in the export
    script = (
        "import json, sys, tensorflow as tf, tensorflow_text\n"
        "m = tf.saved_model.load(sys.argv[1])\n"
        "out = m.signatures['serving_default'](text=tf.constant(['A man is eating food.']))\n"
        "print(json.dumps(out['sequence_output'][0, 0, :5].numpy().tolist()))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(moved / "bert" / "1")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    values = json.loads(result.stdout.strip().splitlines()[-1])
    reference = minilm_reference["outputs"]["A man is eating food."]["cls_sequence_output"]
    np.testing.assert_allclose(values, reference[:5], atol=1e-4)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"task": "classifier", "num_labels": 3, "label_names": ["a", "b"]}, "--num_labels=3"),
        ({"task": "classifier"}, "needs >= 2 classes"),
        ({"task": "classifier", "regression": True, "num_labels": 2}, "--regression"),
        ({"task": "encoder", "max_seq_length": 1000}, "--max_seq_length: expected 3..512"),
        ({"task": "ner"}, "--task"),
    ],
)
def test_bad_flags_are_clear_errors(minilm_dir, tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        export.build_and_export(init_checkpoint=str(minilm_dir), export_dir=tmp_path, **kwargs)
    assert not list(tmp_path.iterdir())


def test_served_through_our_model_server(exports, server_process, tmp_path):
    root = exports["root"]
    config = "model_config_list {\n" + "".join(
        f'  config {{ name: "{name}" base_path: "{root / name}" model_platform: "tensorflow" }}\n'
        for name in ("pretrainer", "classifier")
    )
    (tmp_path / "models.config").write_text(config + "}\n")
    server = server_process(
        ["--embedded", f"--model_config_file={tmp_path / 'models.config'}"],
        tmp_path / "server.log",
    )
    try:
        server.wait_available("pretrainer")
        server.wait_available("classifier")
        with ServingClient(server.target) as client:
            metadata = client.metadata("pretrainer")
            assert {"serving_default", "fill_mask"} <= set(metadata)
            texts = np.array(["the man is eating food", "paris"], dtype=object)
            served = client.predict("pretrainer", {"text": texts})
            model = exports["models"]["pretrainer"]
            features = exports["preprocessor"](tf.constant(texts.astype(str)))
            expected = model.encoder(features)
            np.testing.assert_allclose(
                served["pooled_output"], expected["pooled_output"], atol=1e-5
            )
            # The export runs the encoder on the longest row only ("paris" is padding there);
            # real positions are the full-length encoder's, padding rows 0.
            mask = features["input_mask"].numpy()[:, :, None]
            assert mask[1].sum() < mask[0].sum()
            np.testing.assert_allclose(
                served["sequence_output"], expected["sequence_output"] * mask, atol=1e-5
            )
            classes = client.classify(
                "classifier", [{"text_a": "the dog runs"}], signature="classify"
            )
            assert [label for label, _ in classes[0]] == LABELS
            assert sum(score for _, score in classes[0]) == pytest.approx(1.0, abs=1e-5)
        log = server.log()
    finally:
        assert server.stop() == 0, server.log()
    assert "Number of warmup records read: 2" in log


def test_trim_to_longest_keeps_every_real_token():
    from bert_tf.text.tokenization import trim_to_longest

    mask = tf.constant([[1, 1, 1, 0, 0], [1, 1, 0, 0, 0]])
    features = {"input_word_ids": mask * 7, "input_mask": mask, "input_type_ids": mask * 0}
    trimmed = trim_to_longest(features)
    assert {k: v.shape.as_list() for k, v in trimmed.items()} == {k: [2, 3] for k in features}
    np.testing.assert_array_equal(trimmed["input_mask"], mask[:, :3])
    # An empty batch keeps one column (the encoder needs a length of at least 1).
    empty = {k: tf.zeros([0, 5], tf.int32) for k in features}
    assert trim_to_longest(empty)["input_mask"].shape.as_list() == [0, 1]


def test_export_to_a_filesystem_uri(tmp_path):
    # A URI (as gs://serving_model_dir from the pipeline's Trainer) goes through tf.io.gfile,
    # never os.path: file:// is the local filesystem through that same code path.
    uri = tmp_path.as_uri() + "/classifier"
    model = _tiny(BertClassifier, 3)
    path = export_lib.export_classifier(
        model, BertPreprocessor(VOCAB, seq_length=16), uri, label_names=LABELS
    )
    assert path == uri + "/1"
    assert sorted(p.name for p in (tmp_path / "classifier").iterdir()) == ["1"]
    assert (tmp_path / "classifier" / "1" / "assets" / "vocab.txt").read_text().split() == VOCAB
    assert export_lib.next_version(uri) == 2
    assert "classify" in tf.saved_model.load(path).signatures
