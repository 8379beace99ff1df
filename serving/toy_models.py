"""Tiny SavedModels with TF Serving signatures: the server without a BERT export.

Used by the serving contract tests and the REST fuzz target (bench/fuzz.py).

- strings: `serving_default`: `text` [batch] string -> `length` int32, `upper` string.
- affine: `serving_default`: `x` [batch, 2] float -> `y` = 2x + bias, `batch_size` (the batch it
  ran with); `scaled`: `x`, `scale` [batch] -> `z` = x * scale.
- examples: `classify` / `regress` (and `serving_default` = classify) over serialized
  tf.Examples with a float feature `x` and a string feature `tag`.

Example:

>>> save_affine_model(Path("/tmp/models/affine/1"), bias=1.0)
"""

from pathlib import Path

import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_log_pb2

from serving.signatures import WARMUP_FILE, set_method_names


class StringsModel(tf.Module):
    """`text` -> `length` (int32), `upper` (string)."""

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def serve(self, text):
        return {"length": tf.strings.length(text), "upper": tf.strings.upper(text)}


class AffineModel(tf.Module):
    """`x` [batch, 2] -> `y` = 2x + bias (bias = version), and the batch size it ran with."""

    def __init__(self, bias: float):
        super().__init__()
        self.bias = tf.Variable(bias)

    @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32)])
    def serve(self, x):
        batch = tf.shape(x)[0]
        return {"y": 2.0 * x + self.bias, "batch_size": tf.fill([batch], batch)}

    @tf.function(
        input_signature=[tf.TensorSpec([None, 2], tf.float32), tf.TensorSpec([None], tf.float32)]
    )
    def scaled(self, x, scale):
        return {"z": x * scale[:, None]}


class ExamplesModel(tf.Module):
    """Classify/regress over tf.Examples with a float feature `x` and a string feature `tag`."""

    def _parse(self, inputs):
        spec = {
            "x": tf.io.FixedLenFeature([1], tf.float32),
            "tag": tf.io.FixedLenFeature([1], tf.string, default_value=""),
        }
        return tf.io.parse_example(inputs, spec)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def classify(self, inputs):
        x = self._parse(inputs)["x"]
        scores = tf.concat([tf.sigmoid(-x), tf.sigmoid(x)], axis=1)
        classes = tf.tile(tf.constant([["neg", "pos"]]), [tf.shape(x)[0], 1])
        return {"scores": scores, "classes": classes}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def regress(self, inputs):
        features = self._parse(inputs)
        length = tf.cast(tf.strings.length(features["tag"][:, 0]), tf.float32)
        return {"outputs": features["x"][:, 0] * 3.0 + length}


def save_strings_model(path: Path, warmup_requests: int = 0) -> Path:
    tf.saved_model.save(
        StringsModel(), str(path), signatures={"serving_default": StringsModel().serve}
    )
    if warmup_requests:
        (path / WARMUP_FILE).parent.mkdir()
        with tf.io.TFRecordWriter(str(path / WARMUP_FILE)) as w:
            for i in range(warmup_requests):
                request = predict_pb2.PredictRequest()
                request.model_spec.name = "strings"
                request.inputs["text"].CopyFrom(tf.make_tensor_proto([f"warm {i}"]))
                log = prediction_log_pb2.PredictionLog()
                log.predict_log.request.CopyFrom(request)
                w.write(log.SerializeToString())
    return path


def save_affine_model(path: Path, bias: float) -> Path:
    model = AffineModel(bias)
    tf.saved_model.save(
        model, str(path), signatures={"serving_default": model.serve, "scaled": model.scaled}
    )
    return path


def save_examples_model(path: Path) -> Path:
    model = ExamplesModel()
    tf.saved_model.save(
        model,
        str(path),
        signatures={
            "serving_default": model.classify,
            "classify": model.classify,
            "regress": model.regress,
        },
    )
    set_method_names(
        str(path),
        {
            "serving_default": tf.saved_model.CLASSIFY_METHOD_NAME,
            "classify": tf.saved_model.CLASSIFY_METHOD_NAME,
            "regress": tf.saved_model.REGRESS_METHOD_NAME,
        },
    )
    return path
