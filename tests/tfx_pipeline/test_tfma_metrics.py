"""The fine-tuning pipeline's TFMA config: the task's official metrics, computed by TFMA, equal
`bert_tf.tasks.glue.compute_metrics`, and the blessing threshold sits on the task's main metric.

TFMA runs here on predictions stored in the examples (no model): the same metrics specs the
pipeline's Evaluator uses, without the model's signature and the comparison to a baseline
(which needs a baseline model).
"""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_model_analysis as tfma

from bert_tf.tasks import glue
from tfx_pipeline import configs, tfma_config


def write_examples(path, labels, predictions, prediction_key: str) -> str:
    with tf.io.TFRecordWriter(str(path)) as writer:
        for label, prediction in zip(labels, predictions, strict=True):
            label_feature = (
                tf.train.Feature(float_list=tf.train.FloatList(value=[label]))
                if isinstance(label, float)
                else tf.train.Feature(int64_list=tf.train.Int64List(value=[label]))
            )
            feature = {
                "label": label_feature,
                prediction_key: tf.train.Feature(
                    float_list=tf.train.FloatList(value=np.atleast_1d(prediction))
                ),
            }
            writer.write(
                tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
            )
    return str(path)


def evaluate(task_name: str, labels: list[str], data: str, output, min_metric: float):
    """TFMA with the pipeline's config for the task, predictions read from the examples."""
    options = configs.ClassificationOptions(task_name=task_name, min_metric=min_metric)
    config = tfma_config.classification_eval_config(options, labels)
    for spec in config.model_specs:
        spec.ClearField("signature_name")
        spec.ClearField("model_type")
    for metrics_spec in config.metrics_specs:
        for metric in metrics_spec.metrics:
            metric.threshold.ClearField("change_threshold")
    tfma.run_model_analysis(eval_config=config, data_location=data, output_path=str(output))
    values = {
        kv.key.name: kv.value.double_value.value
        for m in tfma.load_metrics(str(output))
        for kv in m.metric_keys_and_values
    }
    return values, tfma.load_validation_result(str(output))


@pytest.fixture(scope="module")
def binary_data(tmp_path_factory):
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 80)
    positive = np.clip(0.45 * labels + 0.55 * rng.random(80), 0, 1)
    scores = np.stack([1 - positive, positive], axis=1)
    path = tmp_path_factory.mktemp("binary") / "examples.tfrecord"
    return write_examples(path, [int(x) for x in labels], scores, "scores"), labels, positive


def test_binary_task_metrics_equal_glue_and_threshold_the_main_one(tmp_path, binary_data):
    """MRPC: F1 is the main metric, computed on class 1 (a binarized MetricsSpec)."""
    data, labels, positive = binary_data
    predicted = (positive > 0.5).astype(int)
    expected = glue.compute_metrics("mrpc", predicted, labels)
    expected["mcc"] = glue.compute_metrics("cola", predicted, labels)["mcc"]
    values, validation = evaluate("mrpc", ["0", "1"], data, tmp_path / "ok", min_metric=0.1)
    assert values["example_count"] == 80
    for name in ("accuracy", "f1", "mcc"):
        assert values[tfma_config.TFMA_METRICS[name][1]] == pytest.approx(expected[name], abs=1e-6)
    assert validation.validation_ok

    # Above the model's F1: not blessed, and the failure is F1's (computed and below, not
    # "Metric not found.", which a threshold keyed without the class-1 sub key would give).
    _, validation = evaluate("mrpc", ["0", "1"], data, tmp_path / "fail", min_metric=0.99)
    assert not validation.validation_ok
    (per_slice,) = validation.metric_validations_per_slice
    assert [(f.metric_key.name, f.message) for f in per_slice.failures] == [("f1_score", "")]


def test_regression_task_pearson_and_spearman_equal_glue(tmp_path):
    rng = np.random.default_rng(1)
    labels = rng.random(60) * 5
    predictions = labels + rng.normal(0, 1.2, 60)
    data = write_examples(
        tmp_path / "examples.tfrecord", [float(x) for x in labels], predictions, "outputs"
    )
    values, validation = evaluate("sts-b", [], data, tmp_path / "out", min_metric=0.5)
    expected = glue.compute_metrics("sts-b", predictions, labels)
    assert values["pearson"] == pytest.approx(expected["pearson"], abs=1e-5)
    assert values["spearmanr"] == pytest.approx(expected["spearmanr"], abs=1e-6)
    assert validation.validation_ok


def test_regression_model_is_scored_through_its_regress_signature(tmp_path):
    """STS-B in the pipeline: TFMA feeds the raw eval examples to the exported model's `regress`
    signature, and its Pearson/Spearman equal glue's on the model's own outputs."""
    import tensorflow_text  # noqa: F401  (the exported tokenizer's ops)

    from bert_tf.data import fetch
    from bert_tf.modeling.configs import BertConfig
    from bert_tf.modeling.encoder import build_encoder
    from bert_tf.modeling.models import BertClassifier
    from bert_tf.text.tokenization import BertPreprocessor, load_vocab
    from serving.export_lib import export_classifier

    vocab = load_vocab(fetch.path("minilm", "vocab.txt"))
    model = BertClassifier(build_encoder(BertConfig.from_preset("tiny", vocab_size=len(vocab))), 1)
    model_dir = export_classifier(
        model, BertPreprocessor(vocab, seq_length=24), tmp_path / "model", 1, regression=True
    )
    words = vocab[2000:3000]  # whole English words in the uncased BERT vocab
    rng = np.random.default_rng(2)
    text_a = [" ".join(rng.choice(words, 6)) for _ in range(24)]
    text_b = [" ".join(rng.choice(words, 5)) for _ in range(24)]
    labels = [float(x) for x in rng.random(24) * 5]
    with tf.io.TFRecordWriter(str(tmp_path / "eval.tfrecord")) as writer:
        for a, b, label in zip(text_a, text_b, labels, strict=True):
            feature = {
                "text_a": tf.train.Feature(bytes_list=tf.train.BytesList(value=[a.encode()])),
                "text_b": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b.encode()])),
                "label": tf.train.Feature(float_list=tf.train.FloatList(value=[label])),
            }
            example = tf.train.Example(features=tf.train.Features(feature=feature))
            writer.write(example.SerializeToString())

    config = tfma_config.classification_eval_config(
        configs.ClassificationOptions(task_name="sts-b", min_metric=-1.0), []
    )
    for metrics_spec in config.metrics_specs:
        for metric in metrics_spec.metrics:
            metric.threshold.ClearField("change_threshold")  # no baseline model here
    tfma.run_model_analysis(
        eval_shared_model=tfma.default_eval_shared_model(model_dir, eval_config=config),
        eval_config=config,
        data_location=str(tmp_path / "eval.tfrecord"),
        output_path=str(tmp_path / "out"),
    )
    values = {
        kv.key.name: kv.value.double_value.value
        for m in tfma.load_metrics(str(tmp_path / "out"))
        for kv in m.metric_keys_and_values
    }
    outputs = tf.saved_model.load(model_dir).signatures["serving_default"](
        text_a=tf.constant(text_a), text_b=tf.constant(text_b)
    )["outputs"]
    expected = glue.compute_metrics("sts-b", outputs.numpy(), np.array(labels))
    assert values["example_count"] == 24
    assert values["pearson"] == pytest.approx(expected["pearson"], abs=1e-4)
    assert values["spearmanr"] == pytest.approx(expected["spearmanr"], abs=1e-4)
    assert tfma.load_validation_result(str(tmp_path / "out")).validation_ok


def test_eval_config_blesses_on_the_main_metric_against_the_last_blessed_model():
    options = configs.ClassificationOptions(task_name="sst-2", min_metric=0.8, max_decrease=0.02)
    config = tfma_config.classification_eval_config(options, ["0", "1"])
    assert [s.signature_name for s in config.model_specs] == ["classify"]
    thresholds = {
        m.class_name: m.threshold
        for spec in config.metrics_specs
        for m in spec.metrics
        if m.HasField("threshold")
    }
    assert list(thresholds) == ["SparseCategoricalAccuracy"]
    threshold = thresholds["SparseCategoricalAccuracy"]
    assert threshold.value_threshold.lower_bound.value == 0.8
    assert threshold.change_threshold.absolute.value == -0.02
    assert threshold.change_threshold.direction == tfma.MetricDirection.HIGHER_IS_BETTER

    regression = tfma_config.classification_eval_config(
        configs.ClassificationOptions(task_name="sts-b"), []
    )
    assert [(s.signature_name, s.prediction_key) for s in regression.model_specs] == [
        ("regress", "outputs")
    ]
    # Three classes: accuracy only (F1/MCC of one class would not be MNLI's metric).
    mnli = tfma_config.classification_eval_config(
        configs.ClassificationOptions(task_name="mnli"), ["a", "b", "c"]
    )
    assert [m.class_name for s in mnli.metrics_specs for m in s.metrics] == [
        "ExampleCount",
        "SparseCategoricalAccuracy",
    ]


def test_class_names_come_from_the_export_asset_and_equal_the_classify_signature(tmp_path):
    """The Evaluator reads a classifier export's class names from its CLASS_NAMES_ASSET (no
    model load); they are the `classes` its `classify` signature answers with, and an export
    without the asset is read through the signature."""
    import tensorflow_text  # noqa: F401  (the exported tokenizer's ops)

    from bert_tf.modeling.configs import BertConfig
    from bert_tf.modeling.encoder import build_encoder
    from bert_tf.modeling.models import BertClassifier
    from bert_tf.text.tokenization import BertPreprocessor
    from serving.export_lib import export_classifier
    from serving.signatures import CLASS_NAMES_ASSET
    from tfx_pipeline.components import tfma_evaluator

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad"]
    names = ["négatif", "positif", "neutre"]
    model = BertClassifier(build_encoder(BertConfig.from_preset("tiny", vocab_size=len(vocab))), 3)
    model_dir = export_classifier(
        model, BertPreprocessor(vocab, seq_length=8), tmp_path / "model", 1, label_names=names
    )
    example = tf.train.Example(
        features=tf.train.Features(
            feature={"text_a": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"good"]))}
        )
    ).SerializeToString()
    classes = tf.saved_model.load(model_dir).signatures["classify"](inputs=tf.constant([example]))
    assert [c.decode() for c in classes["classes"].numpy()[0]] == names
    artifact = str(tmp_path / "artifact")  # a Trainer's Model artifact: <uri>/Format-Serving
    tf.io.gfile.makedirs(artifact)
    tf.io.gfile.rename(model_dir, tf.io.gfile.join(artifact, "Format-Serving"))
    assert tfma_evaluator.class_names(artifact) == names
    asset = tf.io.gfile.join(artifact, "Format-Serving", CLASS_NAMES_ASSET)
    tf.io.gfile.remove(asset)
    assert tfma_evaluator.class_names(artifact) == names  # through the signature
    with tf.io.gfile.GFile(asset, "w") as f:
        f.write('{"names": 3}')
    with pytest.raises(ValueError, match=r"class_names\.json: expected a JSON list"):
        tfma_evaluator.class_names(artifact)
    regressor = export_classifier(
        BertClassifier(build_encoder(BertConfig.from_preset("tiny", vocab_size=len(vocab))), 1),
        BertPreprocessor(vocab, seq_length=8),
        tmp_path / "regressor",
        1,
        regression=True,
    )
    assert not tf.io.gfile.exists(tf.io.gfile.join(regressor, CLASS_NAMES_ASSET))
