"""Fixtures for the serving contract tests: tiny SavedModels and a server subprocess."""

import os
import shutil
from pathlib import Path

import pytest
import tensorflow as tf
from tensorflow_serving.apis import (
    predict_pb2,
    prediction_log_pb2,
)

from serving.process import ServerProcess
from serving.signatures import set_method_names


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
        (path / "assets.extra").mkdir()
        with tf.io.TFRecordWriter(str(path / "assets.extra" / "tf_serving_warmup_requests")) as w:
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


@pytest.fixture(scope="session")
def saved_models(tmp_path_factory) -> dict[str, Path]:
    """Template SavedModels (copy them into a base path as numeric version folders)."""
    root = tmp_path_factory.mktemp("saved_models")
    return {
        "strings": save_strings_model(root / "strings", warmup_requests=3),
        "affine1": save_affine_model(root / "affine1", 1.0),
        "affine2": save_affine_model(root / "affine2", 2.0),
        "affine3": save_affine_model(root / "affine3", 3.0),
        "examples": save_examples_model(root / "examples"),
    }


@pytest.fixture
def start_server(tmp_path):
    """Starts servers with the given flags (always --embedded); stops them after the test."""
    servers = []

    def start(*args: str, env: dict | None = None) -> ServerProcess:
        server = ServerProcess(["--embedded", *args], tmp_path / f"server{len(servers)}.log", env)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def copy_version(template: Path, base_path: Path, version: int) -> Path:
    """Copies a SavedModel in as `base_path/version`, atomically (rename), as deployments should."""
    staging = base_path.parent / f".staging-{base_path.name}-{version}"
    shutil.copytree(template, staging)
    target = base_path / str(version)
    os.rename(staging, target)
    return target


@pytest.fixture(scope="session")
def server_process():
    """The ServerProcess class (test modules cannot import conftest)."""
    return ServerProcess


@pytest.fixture(scope="session")
def install_version():
    """`install_version(template, base_path, version)`: see copy_version."""
    return copy_version
